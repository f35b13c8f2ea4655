package llmcache

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is wrapped by the error a [Store] returns for a key it does
// not hold.
var ErrNotFound = errors.New("llmcache: not found")

// Store is where a [Cache] keeps its answers. Package llmcache/badgerstore
// keeps them in an embedded Badger database, owned by one process; package
// llmcache/jsstore in JetStream key-value buckets shared by every replica
// of a deployment. Both are also a [BudgetStore], which token budgets and
// spend limits need, and jsstore a [Filler]. The cache encodes and
// checksums what it stores, so a store moves opaque bytes. A Store must be
// safe for concurrent use.
type Store interface {
	// Get returns the entry stored under k, or an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, k Key) ([]byte, error)
	// Put stores entry under k, replacing any, and keeps it for at least
	// ttl (the cache decides what is still served from the entry's own
	// expiry).
	Put(ctx context.Context, k Key, entry []byte, ttl time.Duration) error
	// Delete removes the entry under k; a missing entry is not an error.
	Delete(ctx context.Context, k Key) error
	// Scan calls answer with every stored answer entry and, if the store
	// is a BudgetStore, budget with every budget record; the slices are
	// valid only during the call.
	Scan(ctx context.Context, answer, budget func(v []byte) error) error
	// Close releases what the store holds.
	Close() error
}

// BudgetStore is implemented by a [Store] that also keeps the records of
// token budgets and spend limits: the tokens (or dollars) spent per intent
// or account and the reservations of the calls in flight. A cache whose
// store is not one refuses Options.Budget, and fails the calls that name a
// budget or spend limits with an error wrapping [ErrInvalidOptions].
type BudgetStore interface {
	// Budget returns the budget record under id, or nil if there is none.
	Budget(ctx context.Context, id []byte) ([]byte, error)
	// UpdateBudget replaces the budget record under id (nil if there is
	// none) with what update returns from it, atomically: if another
	// writer changed the record in between, update is called again with
	// the new one. An error from update is returned as it is, and nothing
	// is written. The record is kept for at least ttl after the write.
	UpdateBudget(ctx context.Context, id []byte, ttl time.Duration, update func(old []byte) ([]byte, error)) error
}

// Filler is implemented by a [Store] shared between processes, to make
// identical misses in different processes one upstream call: the first
// takes a claim on the key and calls the model, and the others wait for
// its answer.
type Filler interface {
	// Fill returns when the caller should call the model for k, or when
	// another process's answer for k is stored, or when wait has passed:
	//   - a non-nil Claim: the caller holds the fill of k, calls the model,
	//     stores the answer and then releases the claim; a claim whose
	//     holder stops renewing it (a crash) is taken over by a waiter;
	//   - a non-nil entry: the answer another process stored;
	//   - neither: no answer within wait; call the model without a claim.
	//
	// live tells a stored entry that still answers from one that does not
	// (expired, or damaged): a store may keep an entry past the cache's
	// TTL, and such an entry under k is no answer. Fill never returns an
	// entry live rejects; it claims k as though k held none.
	//
	// Fill reads k's entry after it takes the claim, from where every
	// acknowledged write is (a stream leader), and returns a live entry it
	// finds there instead of the claim, which it gives up: an answer
	// stored between the caller's lookup and the claim is never paid for
	// again. The Cache does not look again after a Claim.
	Fill(ctx context.Context, k Key, wait time.Duration, live func(entry []byte) bool) (Claim, []byte, error)
}

// Claim is a fill claim held on one key, kept alive by its [Filler] until
// Release.
type Claim interface {
	// Release gives the claim up; call it once the answer is stored, or
	// once the call failed, so that the next miss need not wait for the
	// claim to lapse.
	Release(ctx context.Context) error
}
