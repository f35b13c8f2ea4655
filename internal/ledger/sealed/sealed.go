// Package sealed keeps what a ledger's records quote of the work sealed in
// its store: their notes (ledger.Ledger.Note: a model step's answers) and
// their results' responses (an effect's body, which may quote the answer
// and the trigger). A ledger that is not encrypted at rest (the JetStream
// KV ledger: its bucket, its replicas and their backups) then holds
// neither in plain text; the rest of a record (key, state, tokens, owner,
// times, fingerprint, downstream id, failure reason) stays readable, as
// inspection needs it.
//
// Each is sealed with AES-GCM under the encryption key, with a random
// nonce, and bound to its intent's key and to what it is (the additional
// data), so that a sealed value copied onto another record, or from note
// to response, does not open. A note that does not open (written without
// the key, with another key, or tampered with) reads as no note: the work
// asks the model again, which is safe, rather than trust an answer it
// cannot authenticate. A response that does not open reads as none.
package sealed

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"iter"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// magic starts every sealed note; it names the format.
var magic = []byte("OGN1")

// Box seals and opens values bound to an intent's key and a kind (one
// byte saying what the value is), with AES-GCM, a random nonce per value.
type Box struct{ aead cipher.AEAD }

// NewBox returns a Box for key (16, 24 or 32 bytes). It does not keep key.
func NewBox(key []byte) (*Box, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("sealed: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("sealed: %w", err)
	}
	return &Box{aead}, nil
}

// Ledger is a ledger.Ledger whose notes and responses are sealed. It is a
// ledger.Batcher if the ledger it wraps is.
type Ledger struct {
	l ledger.Ledger
	*Box
}

// Batcher is a Ledger of a ledger.Batcher.
type Batcher struct {
	*Ledger
	b ledger.Batcher
}

var (
	_ ledger.Ledger  = (*Ledger)(nil)
	_ ledger.Batcher = (*Batcher)(nil)
)

// New returns l with its notes and responses sealed with key (16, 24 or 32 bytes: AES-128,
// -192 or -256). The result is a *Batcher if l is a ledger.Batcher. It
// does not keep key.
func New(l ledger.Ledger, key []byte) (ledger.Ledger, error) {
	box, err := NewBox(key)
	if err != nil {
		return nil, err
	}
	s := &Ledger{l: l, Box: box}
	if b, ok := l.(ledger.Batcher); ok {
		return &Batcher{Ledger: s, b: b}, nil
	}
	return s, nil
}

// What a sealed value is, in its additional data.
const (
	kindNote     = 'n'
	kindResponse = 'r'
)

// Seal returns v sealed for key, as kind; an empty v stays empty.
func (s *Box) Seal(key dedupe.Key, kind byte, v []byte) []byte {
	if len(v) == 0 {
		return v
	}
	out := make([]byte, len(magic)+s.aead.NonceSize(), len(magic)+s.aead.NonceSize()+len(v)+s.aead.Overhead())
	copy(out, magic)
	rand.Read(out[len(magic):])
	return s.aead.Seal(out, out[len(magic):], v, append(key[:len(key):len(key)], kind))
}

// Open returns the value v sealed for key as kind, or nil if it does not
// open.
func (s *Box) Open(key dedupe.Key, kind byte, v []byte) []byte {
	n := len(magic) + s.aead.NonceSize()
	if len(v) < n || !bytes.Equal(v[:len(magic)], magic) {
		return nil
	}
	out, err := s.aead.Open(nil, v[len(magic):n], v[n:], append(key[:len(key):len(key)], kind))
	if err != nil {
		return nil
	}
	return out
}

// open returns rec with its note and its result's response opened, or
// without them if they do not open.
func (s *Ledger) open(rec ledger.Record) ledger.Record {
	if len(rec.Note) > 0 {
		rec.Note = s.Open(rec.Key, kindNote, rec.Note)
	}
	if len(rec.Result.Response) > 0 {
		rec.Result.Response = s.Open(rec.Key, kindResponse, rec.Result.Response)
	}
	return rec
}

// sealResult returns r with its response sealed for key's record.
func (s *Ledger) sealResult(key dedupe.Key, r ledger.Result) ledger.Result {
	r.Response = s.Seal(key, kindResponse, r.Response)
	return r
}

// Note implements ledger.Ledger: it stores note sealed. The limit on a
// note's size applies to the sealed note, 32 bytes longer.
func (s *Ledger) Note(ctx context.Context, key dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	return s.l.Note(ctx, key, token, s.Seal(key, kindNote, note), d)
}

// Begin implements ledger.Ledger.
func (s *Ledger) Begin(ctx context.Context, key dedupe.Key, opts ledger.BeginOptions) (ledger.Claim, error) {
	c, err := s.l.Begin(ctx, key, opts)
	c.Record = s.open(c.Record)
	return c, err
}

// Get implements ledger.Ledger.
func (s *Ledger) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	rec, err := s.l.Get(ctx, key)
	return s.open(rec), err
}

// Pending implements ledger.Ledger.
func (s *Ledger) Pending(ctx context.Context) iter.Seq2[ledger.Record, error] {
	return func(yield func(ledger.Record, error) bool) {
		for rec, err := range s.l.Pending(ctx) {
			if !yield(s.open(rec), err) {
				return
			}
		}
	}
}

// Extend implements ledger.Ledger.
func (s *Ledger) Extend(ctx context.Context, key dedupe.Key, token uint64, d time.Duration) (ledger.Lease, error) {
	return s.l.Extend(ctx, key, token, d)
}

// Commit implements ledger.Ledger: it stores the result's response
// sealed. The limit on a result's size applies to the sealed result, 32
// bytes longer.
func (s *Ledger) Commit(ctx context.Context, key dedupe.Key, token uint64, result ledger.Result) error {
	return s.l.Commit(ctx, key, token, s.sealResult(key, result))
}

// Fail implements ledger.Ledger.
func (s *Ledger) Fail(ctx context.Context, key dedupe.Key, token uint64, reason string) error {
	return s.l.Fail(ctx, key, token, reason)
}

// Clear implements ledger.Ledger.
func (s *Ledger) Clear(ctx context.Context, key dedupe.Key, token uint64, note string) error {
	return s.l.Clear(ctx, key, token, note)
}

// Close implements ledger.Ledger: it closes the ledger it wraps.
func (s *Ledger) Close() error { return s.l.Close() }

// BeginBatch implements ledger.Batcher.
func (b *Batcher) BeginBatch(ctx context.Context, reqs []ledger.BeginRequest) []ledger.BeginResult {
	out := b.b.BeginBatch(ctx, reqs)
	for i := range out {
		out[i].Claim.Record = b.open(out[i].Claim.Record)
	}
	return out
}

// CommitBatch implements ledger.Batcher.
func (b *Batcher) CommitBatch(ctx context.Context, reqs []ledger.CommitRequest) []error {
	sealed := make([]ledger.CommitRequest, len(reqs))
	for i, r := range reqs {
		r.Result = b.sealResult(r.Key, r.Result)
		sealed[i] = r
	}
	return b.b.CommitBatch(ctx, sealed)
}
