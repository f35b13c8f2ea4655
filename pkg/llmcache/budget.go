package llmcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// ErrBudgetExceeded is wrapped by the *BudgetError returned, through
// go-openai, for a call that would take an intent past its token budget.
var ErrBudgetExceeded = errors.New("llmcache: token budget exceeded")

// BudgetError reports a call refused by the per-intent token budget.
type BudgetError struct {
	Namespace string
	Unit      string // the intent key, or the cache key for calls without one
	Spent     int64  // tokens already spent on Unit
	Reserved  int64  // tokens reserved by calls for Unit still in flight
	Need      int64  // the most this call may spend: its prompt estimate plus its max tokens
	Budget    int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("llmcache: token budget exceeded for %s in namespace %q: %d of %d tokens spent, %d reserved, the call may spend %d",
		e.Unit, e.Namespace, e.Spent, e.Budget, e.Reserved, e.Need)
}

// Unwrap returns ErrBudgetExceeded.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// budgets tracks the tokens spent per unit (an intent, or a cache key).
// Spending is kept in the store, so a budget outlives restarts: a crash
// loop retrying one trigger stops at the budget just like a retry loop in
// one process. Reservations are in memory.
type budgets struct {
	db  *badger.DB
	ttl time.Duration

	mu       sync.Mutex
	inflight map[string]*reservation
}

type reservation struct {
	spent, reserved int64
	calls           int
}

func budgetKey(ns, unit string) []byte {
	b := make([]byte, 0, 2+len(ns)+1+len(unit))
	b = append(b, "b/"...)
	b = binary.AppendUvarint(b, uint64(len(ns)))
	b = append(b, ns...)
	return append(b, unit...)
}

func (b *budgets) loadSpent(key []byte) (int64, error) {
	var spent int64
	err := b.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: budget record of %d bytes", ErrCorruptEntry, len(v))
			}
			spent = int64(binary.BigEndian.Uint64(v))
			return nil
		})
	})
	return spent, err
}

// reserve sets need tokens aside for one call, or returns a *BudgetError if
// the unit's spending plus its reservations plus need would pass limit.
func (b *budgets) reserve(ns, unit string, need, limit int64) error {
	key := string(budgetKey(ns, unit))
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.inflight[key]
	if r == nil {
		spent, err := b.loadSpent([]byte(key))
		if err != nil {
			return fmt.Errorf("llmcache: read the budget of %s: %w", unit, err)
		}
		r = &reservation{spent: spent}
	}
	if r.spent+r.reserved+need > limit {
		return &BudgetError{Namespace: ns, Unit: unit, Spent: r.spent, Reserved: r.reserved, Need: need, Budget: limit}
	}
	r.reserved += need
	r.calls++
	if b.inflight == nil {
		b.inflight = map[string]*reservation{}
	}
	b.inflight[key] = r
	return nil
}

// settle releases a reservation of need and records spent tokens.
func (b *budgets) settle(ns, unit string, need, spent int64) error {
	key := string(budgetKey(ns, unit))
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.inflight[key]
	if r == nil {
		return fmt.Errorf("llmcache: settle %s: no reservation", unit)
	}
	r.reserved -= need
	r.spent += spent
	r.calls--
	if r.calls == 0 {
		delete(b.inflight, key)
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(r.spent))
	return b.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry([]byte(key), v[:]).WithTTL(b.ttl))
	})
}

// spent returns the tokens recorded for unit.
func (b *budgets) spent(ns, unit string) (int64, error) {
	key := budgetKey(ns, unit)
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.inflight[string(key)]; r != nil {
		return r.spent, nil
	}
	return b.loadSpent(key)
}
