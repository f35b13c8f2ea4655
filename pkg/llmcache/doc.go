// Package llmcache makes a retried pipeline step reuse the model's answer
// instead of paying for it again.
//
// # Keys
//
// A cached answer is found by [KeyOf]: the namespace (a tenant or pipeline,
// so that one tenant never reads another's answers) and the canonical form
// (RFC 8785, package canon) of every field of the go-openai request that can
// change the answer. Not the rendered timestamp a prompt template might
// interpolate unless it is in the messages, and never the API key.
//
// The Badger-backed cache, the go-openai integration, single-flight misses
// and token accounting are being built on these keys; this
// package holds only the key derivation so far.
package llmcache
