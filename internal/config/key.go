package config

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/oncegate/oncegate/pkg/canon"
)

// Key scopes and hashes; see dedupe.KeySpec.PerRun and dedupe.KeySpec.SHA256.
const (
	ScopeInput = "input"
	ScopeRun   = "run"
	HashXXH    = "xxh"
	HashSHA256 = "sha256"
)

// Key is a pipeline's key spec; see dedupe.KeySpec.
type Key struct {
	// Fields are JSON Pointers to the values that identify the work. Empty
	// means the whole payload, less Volatile.
	Fields []string `yaml:"fields"`
	// Volatile are JSON Pointers to members dropped from the whole payload
	// (delivery ids, timestamps); only without Fields.
	Volatile []string `yaml:"volatile"`
	// Version is a JSON Pointer to a value that starts new work when it
	// changes (an alert's occurrence, an invoice revision).
	Version string `yaml:"version"`
	// Scope is ScopeInput (the default) or ScopeRun.
	Scope string `yaml:"scope"`
	// RunIDField is a JSON Pointer to the run id; required with ScopeRun,
	// not allowed otherwise.
	RunIDField string `yaml:"run_id_field"`
	// Hash is HashXXH (the default) or HashSHA256; choose sha256 when
	// payloads come from parties who might craft collisions.
	Hash string `yaml:"hash"`
	// Status is a JSON Pointer to the trigger's status ("firing",
	// "resolved"). The key the other fields give is the intent's identity,
	// which a firing and its resolve share (templates' .identity, the
	// pagerduty preset's default dedup_key). A trigger whose status is
	// "firing", or that has none, is keyed by its identity (the key it has
	// without key.status); any other status (a resolve) is keyed by the
	// identity and the status, so that a resolve is distinct work from its
	// firing rather than a duplicate of it.
	Status string `yaml:"status"`
	// ResolveWait orders the lifecycle of an identity with Status: a
	// resolve whose firing is still at work (its effects failing and
	// retried, its model step running) waits for the firing's outcome up
	// to this long after it reached the stream, then goes; a firing that
	// finds its resolve gone out is dropped, never sent after it. The
	// default is 1m.
	ResolveWait time.Duration `yaml:"resolve_wait"`
	// Headers are trigger headers whose values are part of the key, such
	// as Oncegate-Event, which the webhook ingress sets to the provider's
	// event type: the same payload under another event is other work. A
	// trigger without one of them is dead-lettered (missing_field).
	Headers []string `yaml:"headers"`
}

// DefaultResolveWait is key.resolve_wait's default, when key.status is set.
const DefaultResolveWait = time.Minute

// key checks a pipeline's key section: JSON Pointers, the scope and its
// run id, the hash, the header names.
func (v *validator) key(at func(string) string, p *Pipeline) {
	k := &p.Key
	pointer := func(path, s string) {
		if _, err := canon.ParsePointer(s); err != nil {
			v.add(path, invalid("%q is not a JSON Pointer: %v", s, err))
		}
	}
	for j, f := range k.Fields {
		pointer(indexPath(at("key.fields"), j), f)
	}
	for j, f := range k.Volatile {
		pointer(indexPath(at("key.volatile"), j), f)
	}
	if len(k.Fields) > 0 && len(k.Volatile) > 0 {
		v.add(at("key.volatile"), invalid("volatile members are dropped only from the whole payload, when no fields are named: set fields or volatile, not both"))
	}
	if k.Version != "" {
		pointer(at("key.version"), k.Version)
	}
	if v.oneOf(at("key.scope"), k.Scope, ScopeInput, ScopeRun) {
		switch {
		case k.Scope == ScopeRun && k.RunIDField == "":
			v.add(at("key.run_id_field"), missing("scope run needs the JSON Pointer of the run id"))
		case k.Scope == ScopeRun:
			pointer(at("key.run_id_field"), k.RunIDField)
		case k.RunIDField != "":
			v.add(at("key.run_id_field"), invalid("only used with scope run"))
		}
	}
	v.oneOf(at("key.hash"), k.Hash, HashXXH, HashSHA256)
	seen := map[string]bool{}
	for j, h := range k.Headers {
		if !validHeaderName(h) {
			v.add(indexPath(at("key.headers"), j), invalid("%q is not a header name", h))
			continue
		}
		// Header names are not case-sensitive: the key reads each once.
		if c := http.CanonicalHeaderKey(h); seen[c] {
			v.add(at("key"), invalid("header %q is named twice", h))
		} else {
			seen[c] = true
		}
	}
}

// keyStatus checks key.status and key.resolve_wait: the status must be
// outside the identity a firing and its resolve share.
func (v *validator) keyStatus(at func(string) string, k *Key) {
	if k.ResolveWait < 0 {
		v.add(at("key.resolve_wait"), invalid("must be 0 or positive, got %s", formatDuration(k.ResolveWait)))
	} else if k.ResolveWait > 0 && k.Status == "" {
		v.add(at("key.resolve_wait"), invalid("orders a firing and its resolve: it needs key.status"))
	}
	if k.Status != "" {
		if _, err := canon.ParsePointer(k.Status); err != nil {
			v.add(at("key.status"), invalid("%q is not a JSON Pointer: %v", k.Status, err))
		} else if slices.Contains(k.Fields, k.Status) || k.Version == k.Status {
			v.add(at("key.status"), invalid("%q is also a key field: the identity a firing and its resolve share must not hold the status", k.Status))
		} else if len(k.Fields) == 0 && !slices.Contains(k.Volatile, k.Status) {
			v.add(at("key.status"), invalid("the key is the whole payload, status included: add %q to key.volatile, so that the identity leaves it out", k.Status))
		}
	}
}

// key explains a pipeline's key: what identifies the work, its scope and
// its hash.
func (x *explainer) key(at func(string) string, k *Key) []string {
	var key []string
	switch {
	case len(k.Fields) > 0:
		key = append(key, "fields "+strings.Join(k.Fields, ", "))
	case len(k.Volatile) > 0:
		key = append(key, "the whole payload less "+strings.Join(k.Volatile, ", "))
	default:
		key = append(key, "the whole payload")
	}
	if k.Version != "" {
		key = append(key, "version "+k.Version)
	}
	scope := x.d(at("key.scope"), k.Scope, k.Scope)
	if k.Scope == ScopeRun {
		scope += ", run id " + k.RunIDField
	}
	key = append(key, "scope "+scope, "hash "+x.d(at("key.hash"), k.Hash, k.Hash))
	return key
}

// keyStatus explains key.status: the identity a firing and its resolve
// share, and how they are ordered.
func (x *explainer) keyStatus(at func(string) string, k *Key) []string {
	return []string{k.Status + " is part of the key; the key less it is the identity a firing and its resolve share",
		"a resolve waits for its firing's outcome up to resolve_wait " + x.d(at("key.resolve_wait"), k.ResolveWait, formatDuration(k.ResolveWait)) +
			", goes where its firing went, and a firing whose resolve went out first is dropped"}
}
