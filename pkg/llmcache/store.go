package llmcache

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// ErrNotFound is wrapped by the error a [Store] returns for a key it does
// not hold.
var ErrNotFound = errors.New("llmcache: not found")

// Store is where a [Cache] keeps its answers and the tokens spent per
// intent. Badger ([Open], [New], [NewBadgerStore]) is the embedded default,
// owned by one process; package llmcache/jsstore keeps them in JetStream
// key-value buckets shared by every replica of a deployment. The cache
// encodes and checksums what it stores, so a store moves opaque bytes. A
// Store must be safe for concurrent use.
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
	// Budget returns the budget record under id, or nil if there is none.
	Budget(ctx context.Context, id []byte) ([]byte, error)
	// UpdateBudget replaces the budget record under id (nil if there is
	// none) with what update returns from it, atomically: if another
	// writer changed the record in between, update is called again with
	// the new one. An error from update is returned as it is, and nothing
	// is written. The record is kept for at least ttl after the write.
	UpdateBudget(ctx context.Context, id []byte, ttl time.Duration, update func(old []byte) ([]byte, error)) error
	// Scan calls answer with every stored answer entry and budget with
	// every budget record; the slices are valid only during the call.
	Scan(ctx context.Context, answer, budget func(v []byte) error) error
	// Close releases what the store holds.
	Close() error
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
	Fill(ctx context.Context, k Key, wait time.Duration) (Claim, []byte, error)
}

// Claim is a fill claim held on one key, kept alive by its [Filler] until
// Release.
type Claim interface {
	// Release gives the claim up; call it once the answer is stored, or
	// once the call failed, so that the next miss need not wait for the
	// claim to lapse.
	Release(ctx context.Context) error
}

// BadgerStore is the embedded [Store]: answers under the key prefix "c/"
// and budgets under "b/" of one Badger database, owned by one process.
type BadgerStore struct {
	db     *badger.DB
	own    bool
	stop   chan struct{}
	gcDone chan struct{}
}

var _ Store = (*BadgerStore)(nil)

// NewBadgerStore returns a store in db. If own is set, Close closes db.
// While the store is open it runs Badger's value log garbage collection
// every ten minutes.
func NewBadgerStore(db *badger.DB, own bool) *BadgerStore {
	s := &BadgerStore{db: db, own: own, stop: make(chan struct{}), gcDone: make(chan struct{})}
	go s.collect()
	return s
}

func (s *BadgerStore) collect() {
	defer close(s.gcDone)
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			for s.db.RunValueLogGC(0.5) == nil {
			}
		}
	}
}

func answerKey(k Key) []byte { return append([]byte("c/"), k[:]...) }

func badgerErr(err error) error {
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrClosed
	}
	return err
}

// Get implements [Store].
func (s *BadgerStore) Get(_ context.Context, k Key) ([]byte, error) {
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(answerKey(k))
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, k)
	}
	return v, badgerErr(err)
}

// Put implements [Store]. Badger's TTL, in whole seconds on the system
// clock, only collects the garbage.
func (s *BadgerStore) Put(_ context.Context, k Key, entry []byte, ttl time.Duration) error {
	return badgerErr(s.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(answerKey(k), entry).WithTTL(ttl + time.Minute))
	}))
}

// Delete implements [Store].
func (s *BadgerStore) Delete(_ context.Context, k Key) error {
	return badgerErr(s.db.Update(func(txn *badger.Txn) error { return txn.Delete(answerKey(k)) }))
}

func badgerBudgetKey(id []byte) []byte { return append([]byte("b/"), id...) }

// Budget implements [Store].
func (s *BadgerStore) Budget(_ context.Context, id []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(badgerBudgetKey(id))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	return v, badgerErr(err)
}

// UpdateBudget implements [Store] with a Badger transaction, retried when
// it conflicts with another.
func (s *BadgerStore) UpdateBudget(_ context.Context, id []byte, ttl time.Duration, update func(old []byte) ([]byte, error)) error {
	key := badgerBudgetKey(id)
	for {
		err := s.db.Update(func(txn *badger.Txn) error {
			var old []byte
			it, err := txn.Get(key)
			switch {
			case errors.Is(err, badger.ErrKeyNotFound):
			case err != nil:
				return err
			default:
				if old, err = it.ValueCopy(nil); err != nil {
					return err
				}
			}
			v, err := update(old)
			if err != nil {
				return err
			}
			return txn.SetEntry(badger.NewEntry(key, v).WithTTL(ttl))
		})
		if !errors.Is(err, badger.ErrConflict) {
			return badgerErr(err)
		}
	}
}

// Scan implements [Store].
func (s *BadgerStore) Scan(_ context.Context, answer, budget func(v []byte) error) error {
	return badgerErr(s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for _, p := range []struct {
			prefix string
			fn     func([]byte) error
		}{{"b/", budget}, {"c/", answer}} {
			for it.Seek([]byte(p.prefix)); it.ValidForPrefix([]byte(p.prefix)); it.Next() {
				if err := it.Item().Value(p.fn); err != nil {
					return err
				}
			}
		}
		return nil
	}))
}

// Close implements [Store]: it stops the garbage collection, and closes the
// database if the store owns it.
func (s *BadgerStore) Close() error {
	select {
	case <-s.stop:
		return nil
	default:
	}
	close(s.stop)
	<-s.gcDone
	if s.own {
		return s.db.Close()
	}
	return nil
}
