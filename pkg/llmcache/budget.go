package llmcache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// ErrBudgetExceeded is wrapped by the *BudgetError returned, through
// go-openai, for a call that would take an intent past its token budget.
var ErrBudgetExceeded = errors.New("llmcache: token budget exceeded")

// BudgetError reports a call refused by the per-intent token budget.
type BudgetError struct {
	Namespace string // the call's namespace
	Unit      string // the intent key, or the cache key for calls without one
	Spent     int64  // tokens already spent on Unit
	Reserved  int64  // tokens reserved by calls for Unit still in flight
	Need      int64  // the most this call may spend: its prompt estimate plus its max tokens
	Budget    int64  // the budget the call ran under: Call.Budget, or Options.Budget
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("llmcache: token budget exceeded for %s in namespace %q: %d of %d tokens spent, %d reserved, the call may spend %d",
		e.Unit, e.Namespace, e.Spent, e.Budget, e.Reserved, e.Need)
}

// Unwrap returns ErrBudgetExceeded.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// errNoBudgets is the error of a budget or spend limit in a cache whose
// Store is not a BudgetStore.
var errNoBudgets = fmt.Errorf("%w: the store keeps no budgets", ErrInvalidOptions)

// budget returns the record under id, or nil if there is none.
func (b *budgets) budget(ctx context.Context, id []byte) ([]byte, error) {
	if b.store == nil {
		return nil, errNoBudgets
	}
	return b.store.Budget(ctx, id)
}

// budgets tracks the tokens spent per unit (an intent, or a cache key) in
// the store, so a budget outlives restarts (a crash loop retrying one
// trigger stops at the budget just like a retry loop in one process) and,
// with a shared store, is one budget across every replica.
//
// A record is the tokens spent, then the reservations of calls in flight,
// each with the time it lapses: a process that dies mid-call leaves its
// reservation behind, and it stops counting once no call could still be
// running under it (FillTimeout). Every reservation and settlement is a
// compare-and-set of the record in the store.
type budgets struct {
	store BudgetStore // nil if the cache's Store keeps no budgets
	ttl   time.Duration
	clock func() time.Time
}

// reservation is one call's claim on a unit's budget.
type reservation struct {
	id    uint64
	need  int64
	until int64 // Unix nanoseconds
}

type budgetRecord struct {
	spent int64
	res   []reservation
}

const reservationBytes = 24

// decodeBudget reads a record: 8 bytes of tokens spent, then 24 bytes per
// reservation (id, need, lapse time). A record of 8 bytes is one written
// before reservations were stored.
func decodeBudget(v []byte) (budgetRecord, error) {
	var r budgetRecord
	if v == nil {
		return r, nil
	}
	if len(v) < 8 || (len(v)-8)%reservationBytes != 0 {
		return r, fmt.Errorf("%w: budget record of %d bytes", ErrCorruptEntry, len(v))
	}
	r.spent = int64(binary.BigEndian.Uint64(v))
	for p := v[8:]; len(p) > 0; p = p[reservationBytes:] {
		r.res = append(r.res, reservation{
			id:    binary.BigEndian.Uint64(p),
			need:  int64(binary.BigEndian.Uint64(p[8:])),
			until: int64(binary.BigEndian.Uint64(p[16:])),
		})
	}
	return r, nil
}

func (r *budgetRecord) encode() []byte {
	b := make([]byte, 0, 8+reservationBytes*len(r.res))
	b = binary.BigEndian.AppendUint64(b, uint64(r.spent))
	for _, x := range r.res {
		b = binary.BigEndian.AppendUint64(b, x.id)
		b = binary.BigEndian.AppendUint64(b, uint64(x.need))
		b = binary.BigEndian.AppendUint64(b, uint64(x.until))
	}
	return b
}

// live drops lapsed reservations and returns the tokens the rest hold.
func (r *budgetRecord) live(now time.Time) int64 {
	var held int64
	keep := r.res[:0]
	for _, x := range r.res {
		if x.until > now.UnixNano() {
			keep = append(keep, x)
			held = satAdd(held, x.need)
		}
	}
	r.res = keep
	return held
}

func budgetID(ns, unit string) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(ns)+len(unit))
	b = binary.AppendUvarint(b, uint64(len(ns)))
	b = append(b, ns...)
	return append(b, unit...)
}

// reserve sets need tokens aside for one call until until, or returns a
// *BudgetError if the unit's spending plus its live reservations plus need
// would pass limit. It returns the reservation's id, for settle.
func (b *budgets) reserve(ctx context.Context, ns, unit string, need, limit int64, until time.Time) (uint64, error) {
	var denied *BudgetError
	id, err := b.reserveID(ctx, budgetID(ns, unit), b.ttl, need, limit, until, func(spent, held int64) error {
		denied = &BudgetError{Namespace: ns, Unit: unit, Spent: spent, Reserved: held, Need: need, Budget: limit}
		return denied
	})
	if denied != nil && errors.Is(err, ErrBudgetExceeded) {
		return 0, denied
	}
	if err != nil {
		return 0, fmt.Errorf("llmcache: reserve from the budget of %s: %w", unit, err)
	}
	return id, nil
}

// reserveID sets need units aside under the record id, kept for ttl,
// until until, or returns deny's error if the record's spending plus its
// live reservations plus need would pass limit.
func (b *budgets) reserveID(ctx context.Context, rid []byte, ttl time.Duration, need, limit int64, until time.Time, deny func(spent, held int64) error) (uint64, error) {
	id := rand.Uint64() | 1
	if b.store == nil {
		return 0, errNoBudgets
	}
	err := b.store.UpdateBudget(ctx, rid, ttl, func(old []byte) ([]byte, error) {
		r, err := decodeBudget(old)
		if err != nil {
			return nil, err
		}
		// A retried write whose first attempt applied finds its own
		// reservation: replace it, never count it twice.
		r.res = slices.DeleteFunc(r.res, func(x reservation) bool { return x.id == id })
		held := r.live(b.clock())
		// spent+held+need > limit, without overflow: need may be
		// math.MaxInt64, for a call whose worst cost cannot be counted.
		if need < 0 || need > limit || satAdd(r.spent, held) > limit-need {
			return nil, deny(r.spent, held)
		}
		r.res = append(r.res, reservation{id: id, need: need, until: until.UnixNano()})
		return r.encode(), nil
	})
	return id, err
}

// settle releases reservation id (0 for none) and records spent tokens.
func (b *budgets) settle(ctx context.Context, ns, unit string, id uint64, spent int64) error {
	if err := b.settleID(ctx, budgetID(ns, unit), b.ttl, id, spent); err != nil {
		return fmt.Errorf("llmcache: settle the budget of %s: %w", unit, err)
	}
	return nil
}

// settleID releases reservation id (0 for none) of the record rid and
// records spent units.
func (b *budgets) settleID(ctx context.Context, rid []byte, ttl time.Duration, id uint64, spent int64) error {
	if b.store == nil {
		return errNoBudgets
	}
	return b.store.UpdateBudget(ctx, rid, ttl, func(old []byte) ([]byte, error) {
		r, err := decodeBudget(old)
		if err != nil {
			r = budgetRecord{} // a damaged record is replaced
		}
		r.live(b.clock())
		for i, x := range r.res {
			if x.id == id {
				r.res = append(r.res[:i], r.res[i+1:]...)
				break
			}
		}
		r.spent = satAdd(r.spent, spent)
		return r.encode(), nil
	})
}

// spent returns the tokens recorded for unit.
func (b *budgets) spent(ctx context.Context, ns, unit string) (int64, error) {
	v, err := b.budget(ctx, budgetID(ns, unit))
	if err != nil {
		return 0, err
	}
	r, err := decodeBudget(v)
	return r.spent, err
}
