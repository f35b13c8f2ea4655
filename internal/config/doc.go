// Package config loads, checks and explains Oncegate's configuration: a
// YAML file of process settings and pipelines, overridable by ONCEGATE_*
// environment variables.
//
// # Loading
//
// [Load] reads a file, applies the environment ([Config.LoadEnv]), fills in
// the defaults and validates ([Config.Validate]); [Parse] and [ParseEnv] do
// the same for a document in memory. [Default] is the configuration the
// consumer runs with when it is given no file, and examples/oncegate.yaml
// spells it out with every option commented.
//
// # Strictness
//
// A key the configuration does not have is an error ([ErrUnknownKey]), as
// is an ONCEGATE_* variable that matches no field, so that a misspelt
// option never goes unnoticed. Every problem found is reported, not only
// the first: the error is an errors.Join of [*FieldError] values, each
// naming the field's path and the line (or environment variable) its value
// came from.
//
// # Layout
//
// Each section of the file has a file of its own here (nats.go, ledger.go,
// llm.go, stream.go, pipeline.go, key.go, step.go, effect.go, ingress.go,
// proxy.go, tracing.go, ...) holding its type, its defaults, its checks and
// its rows in Explain, so that an option is added in one place. Rules that
// span sections (the redelivery horizon against the ledger's retention and
// the streams' windows, the ingress's tolerance against the duplicate
// window, keys on unsigned headers) are in validate.go. The configuration
// describes and checks; it imports none of the packages it configures:
// internal/app and the consumer translate it into their Options.
//
// # Secrets
//
// Secrets never live in the file. The NATS password and token come from
// files or from ONCEGATE_NATS_PASSWORD and ONCEGATE_NATS_TOKEN; the model's
// API key from the variable llm.api_key_env names; secret HTTP headers from
// the variables effect.headers_env names. A "password" or "token" key, or
// credentials in a URL, are errors. [Config.Explain] prints names of files
// and variables, never their contents.
package config

//go:generate go run ./refgen -root ../.. -o ../../docs/config.md
