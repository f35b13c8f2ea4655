package dedupe

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/oncegate/oncegate/pkg/canon"
)

// Errors returned by key derivation. Errors about the payload itself come
// from package canon: errors.Is(err, canon.ErrNotFound) for a missing key
// field, canon.ErrDuplicateName and the others for input that is not I-JSON.
var (
	// ErrInvalidKeySpec is wrapped by the error NewKeyer returns for a spec
	// it cannot use.
	ErrInvalidKeySpec = errors.New("dedupe: invalid key spec")
	// ErrNoRunID is returned when a PerRun KeySpec is keyed without a run
	// id.
	ErrNoRunID = errors.New("dedupe: run-scoped key needs a run id")
	// ErrInvalidKey is wrapped by the error ParseKey returns for text that is
	// not a key.
	ErrInvalidKey = errors.New("dedupe: invalid key")
)

// Key is a 128-bit intent key: the identity of one unit of work, the same on
// every retry of that work. Its text form (String) is 32 lowercase hex
// digits, fit for a Nats-Msg-Id or Idempotency-Key header. The zero Key is
// not the key of anything.
type Key [16]byte

// String returns the key as 32 lowercase hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// MarshalText implements encoding.TextMarshaler.
func (k Key) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, k[:]), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseKey's rules.
func (k *Key) UnmarshalText(b []byte) error {
	p, err := ParseKey(string(b))
	if err != nil {
		return err
	}
	*k = p
	return nil
}

// ParseKey parses the text form of a key: exactly 32 lowercase hex digits.
// Anything else, upper case included, is rejected, so that one key has one
// spelling.
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*len(k) {
		return Key{}, fmt.Errorf("%w: %q: want 32 hex digits, got %d bytes", ErrInvalidKey, truncateText(s), len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return Key{}, fmt.Errorf("%w: %q: byte %d is not a lowercase hex digit", ErrInvalidKey, truncateText(s), i)
		}
	}
	hex.Decode(k[:], []byte(s))
	return k, nil
}

func truncateText(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Fingerprint is a 128-bit digest of a whole canonical payload. The ledger
// keeps it beside the intent key, so that the same key arriving with a
// different payload (an agent that reworded its request) can be told
// apart and counted.
type Fingerprint [16]byte

// String returns the fingerprint as 32 lowercase hex digits.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// Intent is what a Keyer derives from one trigger.
type Intent struct {
	Key         Key         // identity of the work: the selected fields
	Fingerprint Fingerprint // identity of the exact payload
}

// KeySpec says which part of a trigger identifies one unit of work for one
// pipeline step.
//
// Granularity is the decision that matters. A key that is too coarse (the
// alert name alone) swallows real new work; one that is too fine (the whole
// payload, delivery id included) never matches a retry. Name the fields that
// make the work this work, and a version field when the same thing can
// legitimately happen again (an invoice revision, an alert's new
// occurrence).
type KeySpec struct {
	// Pipeline and Step name the step; both are required. Keys of different
	// steps are derived from different inputs and never coincide, even for
	// one payload.
	Pipeline, Step string

	// Fields are JSON Pointers (RFC 6901) to the values that identify the
	// work, such as "/alert/fingerprint". Every one must be present in the
	// payload. When Fields is empty, the whole payload identifies the work,
	// less the Volatile members.
	Fields []string

	// Volatile are JSON Pointers to members that change between deliveries
	// of the same work (timestamps, delivery ids) and are dropped when
	// Fields is empty. They may be absent. Setting both Fields and Volatile
	// is an error.
	Volatile []string

	// Version, if set, is a JSON Pointer to a value that starts a new unit
	// of work when it changes; it must be present in the payload.
	Version string

	// PerRun keys the work by a run id too (RunIntent's), for pipelines
	// that mint a run id once and reuse it when they resume: the same input
	// is then new work in another run. The default keys the work by its
	// input alone: the same input gives the same key in every run, on every
	// replica, after every re-plan.
	PerRun bool

	// SHA256 derives keys with the first 128 bits of SHA-256 instead of two
	// seeded 64-bit xxHash digests. xxHash is fast, and as good as random
	// for inputs nobody chose to collide, but it is not a cryptographic
	// commitment: someone who controls payloads can construct two different
	// ones with one key, and the second would be swallowed as a duplicate
	// of the first. Set SHA256 when payloads come from parties who might
	// craft a collision to suppress someone else's work (a public webhook
	// endpoint, a multi-tenant inbox); it costs a few times more per byte.
	// The default is xxHash.
	SHA256 bool

	// Limits bounds the payloads accepted; the zero value means canon's
	// defaults.
	Limits canon.Options

	// Headers, if set, are names of message headers whose values identify
	// the work too, such as Oncegate-Event, which the webhook ingress sets
	// to the provider's event type. Names are canonicalized as HTTP header
	// names. A spec with headers is keyed with HeaderIntent, and its keys
	// never coincide with those of a spec without (see headers.go).
	Headers []string
}

// Keyer derives intent keys from payloads for one KeySpec. A Keyer is safe
// for concurrent use by multiple goroutines.
type Keyer struct {
	spec     KeySpec
	fields   []canon.Pointer
	volatile []canon.Pointer
	version  *canon.Pointer
	headers  []string // canonical names, in spec order
	prefix   []byte   // domain, pipeline, step, scope, hash, field list: fixed per spec
	scratch  sync.Pool
}

// keyScratch is the per-call working memory a Keyer pools.
type keyScratch struct {
	c        *canon.Canonicalizer
	doc, sel []byte
	in       []byte
}

// Domain strings keep keys and fingerprints apart from each other and from
// any other use of the same hash.
const (
	keyDomain         = "oncegate/intent-key/v1"
	fingerprintDomain = "oncegate/payload-fingerprint/v1"
)

// NewKeyer returns a Keyer for spec.
func NewKeyer(spec KeySpec) (*Keyer, error) {
	if spec.Pipeline == "" || spec.Step == "" {
		return nil, fmt.Errorf("%w: pipeline and step names are required", ErrInvalidKeySpec)
	}
	if len(spec.Fields) > 0 && len(spec.Volatile) > 0 {
		return nil, fmt.Errorf("%w: fields and volatile are exclusive: volatile members are dropped only when no fields are named", ErrInvalidKeySpec)
	}
	if _, err := canon.New(spec.Limits); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidKeySpec, err)
	}
	k := &Keyer{spec: spec}
	if err := k.parseHeaders(); err != nil {
		return nil, err
	}
	parse := func(what string, list []string) ([]canon.Pointer, error) {
		ps := make([]canon.Pointer, len(list))
		for i, s := range list {
			p, err := canon.ParsePointer(s)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %q: %w", ErrInvalidKeySpec, what, s, err)
			}
			ps[i] = p
		}
		return ps, nil
	}
	var err error
	if k.fields, err = parse("field", spec.Fields); err != nil {
		return nil, err
	}
	if k.volatile, err = parse("volatile field", spec.Volatile); err != nil {
		return nil, err
	}
	if spec.Version != "" {
		v, err := parse("version field", []string{spec.Version})
		if err != nil {
			return nil, err
		}
		k.version = &v[0]
	}

	// Everything fixed by the spec goes into one prefix, each part length-
	// prefixed so that no two specs encode alike.
	p := append([]byte(k.domain()), 0)
	p = appendString(p, spec.Pipeline)
	p = appendString(p, spec.Step)
	p = append(p, b2u(spec.PerRun), b2u(spec.SHA256)) // once a scope and a hash enumeration: 0 is the default
	p = appendList(p, spec.Fields)
	p = appendList(p, spec.Volatile)
	p = appendString(p, spec.Version)
	if len(k.headers) > 0 { // a spec without headers encodes as it always has
		p = appendList(p, k.headers)
	}
	k.prefix = p
	k.scratch.New = func() any {
		c, _ := canon.New(spec.Limits) // validated above
		return &keyScratch{c: c}
	}
	return k, nil
}

func appendString[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendList(b []byte, list []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(list)))
	for _, s := range list {
		b = appendString(b, s)
	}
	return b
}

// Intent derives the intent of payload. The payload must be I-JSON within
// the spec's limits; the error otherwise wraps one of package canon's
// sentinels, with the byte offset of the problem. For a PerRun spec, use
// RunIntent.
func (k *Keyer) Intent(payload []byte) (Intent, error) {
	return k.RunIntent("", payload)
}

// RunIntent derives the intent of payload within run runID. runID is
// required for a PerRun spec, and ignored otherwise.
func (k *Keyer) RunIntent(runID string, payload []byte) (Intent, error) {
	if len(k.headers) > 0 {
		return Intent{}, fmt.Errorf("%w: the spec names headers; key it with HeaderIntent", ErrMissingHeader)
	}
	return k.intent(runID, nil, payload)
}

// LookupIntent derives the intent of payload as HeaderIntent does (as
// RunIntent does for a spec that names no headers; header may then be nil),
// and reads the value at p from the same canonical form: value is its
// canonical JSON (a copy), and ok is false when payload has no such value.
// It canonicalizes the payload once where Intent followed by
// [canon.Append] and [canon.Lookup] would twice: a consumer reads a field
// beside the key (an alert's status, say) on its hot path.
func (k *Keyer) LookupIntent(runID string, header func(name string) string, payload []byte, p canon.Pointer) (in Intent, value []byte, ok bool, err error) {
	if header == nil {
		if len(k.headers) > 0 {
			return Intent{}, nil, false, fmt.Errorf("%w: the spec names headers and no header function was given", ErrMissingHeader)
		}
		header = func(string) string { return "" }
	}
	in, err = k.intentLookup(runID, header, payload, func(doc []byte) error {
		v, found, err := canon.Lookup(doc, p)
		if err != nil {
			return err
		}
		if found {
			value, ok = bytes.Clone(v), true
		}
		return nil
	})
	if err != nil {
		return Intent{}, nil, false, err
	}
	return in, value, ok, nil
}

// intent derives the intent of payload within run runID, with the values
// of the spec's headers read through header.
func (k *Keyer) intent(runID string, header func(string) string, payload []byte) (Intent, error) {
	return k.intentLookup(runID, header, payload, nil)
}

// intentLookup is intent, calling look (unless nil) with the payload's
// canonical form, which look must not keep.
func (k *Keyer) intentLookup(runID string, header func(string) string, payload []byte, look func(doc []byte) error) (Intent, error) {
	if k.spec.PerRun && runID == "" {
		return Intent{}, ErrNoRunID
	}
	s := k.scratch.Get().(*keyScratch)
	defer k.scratch.Put(s)

	var err error
	if s.doc, err = s.c.Append(s.doc[:0], payload); err != nil {
		return Intent{}, err
	}
	if look != nil {
		if err := look(s.doc); err != nil {
			return Intent{}, err
		}
	}
	in := append(s.in[:0], k.prefix...)
	if k.spec.PerRun {
		in = appendString(in, runID)
	}
	for _, name := range k.headers {
		v := header(name)
		if v == "" {
			return Intent{}, fmt.Errorf("%w: %s", ErrMissingHeader, name)
		}
		in = appendString(in, v)
	}
	if k.version != nil {
		v, ok, err := canon.Lookup(s.doc, *k.version)
		if err != nil {
			return Intent{}, err
		}
		if !ok {
			return Intent{}, &canon.PointerError{Pointer: k.spec.Version, Err: canon.ErrNotFound}
		}
		in = appendString(in, v)
	}
	switch {
	case len(k.fields) > 0:
		s.sel, err = canon.Select(s.sel[:0], s.doc, k.fields)
	case len(k.volatile) > 0:
		s.sel, err = canon.Omit(s.sel[:0], s.doc, k.volatile)
	default:
		s.sel = append(s.sel[:0], s.doc...)
	}
	if err != nil {
		return Intent{}, err
	}
	in = append(in, s.sel...)
	s.in = in

	var out Intent
	k.sum(&out.Key, in)
	// The fingerprint reuses in's buffer: the key is already taken.
	fp := append(append(s.in[:0], fingerprintDomain...), 0)
	fp = append(fp, s.doc...)
	s.in = fp
	k.sum((*Key)(&out.Fingerprint), fp)
	return out, nil
}

func (k *Keyer) sum(dst *Key, b []byte) {
	switch {
	case k.spec.SHA256:
		h := sha256.Sum256(b)
		copy(dst[:], h[:16])
	default:
		binary.LittleEndian.PutUint64(dst[:8], xxhash.Sum64(b))
		var d xxhash.Digest
		d.ResetWithSeed(0x9e3779b97f4a7c15)
		d.Write(b)
		binary.LittleEndian.PutUint64(dst[8:], d.Sum64())
	}
}
