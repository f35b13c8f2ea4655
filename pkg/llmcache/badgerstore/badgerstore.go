// Package badgerstore keeps a [llmcache.Cache]'s answers and budgets in an
// embedded Badger database, owned by one process: the cache of a program
// that runs alone. Replicas share package jsstore's JetStream KV buckets
// instead.
//
//	cache, err := badgerstore.Open("data/llm-cache", llmcache.Options{Budget: 20_000})
//	...
//	defer cache.Close()
//	cfg.HTTPClient = cache.HTTPClient(nil)
//
// It is a package of its own so that a program of the other kind does not
// compile Badger in: package llmcache, jsstore and ratelimit do not import
// it.
package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/oncegate/oncegate/pkg/llmcache"
)

// Open opens (creating if needed) a cache in its own Badger database in
// dir, and closes the database when the cache closes.
//
// Answers go to Badger's value log, uncompressed (most of them are larger
// than 512 bytes, and the value log is never compressed); the tables hold
// keys and budgets, uncompressed too, so that anyone can check with grep
// that no secret reached the disk.
//
// Keep it apart from a ledger's database: the ledger syncs every claim
// and commit to disk and its latency is the pipeline's, while a cache
// write need not be synced at all (a lost answer is asked again), and an
// answer is often a hundred times the size of a ledger record.
func Open(dir string, opts llmcache.Options) (*llmcache.Cache, error) {
	return OpenEncrypted(dir, nil, opts)
}

// OpenEncrypted is [Open] with the database encrypted at rest (tables,
// value log and write-ahead log) with key, an AES key of 16, 24 or 32
// bytes; a nil key is Open. A key of another length is
// llmcache.ErrInvalidOptions. A directory written with another key, or
// with none, and a directory written with a key opened without one, fail
// with an error wrapping llmcache.ErrEncryptionKey (and Badger's own).
func OpenEncrypted(dir string, key []byte, opts llmcache.Options) (*llmcache.Cache, error) {
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithChecksumVerificationMode(options.OnTableAndBlockRead).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithBlockCacheSize(32 << 20).
		WithValueThreshold(512).
		WithCompression(options.None).
		WithLogger(nil)
	if key != nil {
		if n := len(key); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%w: encryption key is %d bytes; want 16, 24 or 32", llmcache.ErrInvalidOptions, n)
		}
		bo = bo.WithEncryptionKey(key).WithIndexCacheSize(16 << 20)
	}
	db, err := badger.Open(bo)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return nil, fmt.Errorf("%w: %s was written with another key, or none: %w", llmcache.ErrEncryptionKey, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("llmcache: opening badger in %s: %w", dir, err)
	}
	c, err := llmcache.NewStore(New(db, Options{CloseDB: true}), opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

// Store is a [llmcache.Store] in one Badger database: answers under the
// key prefix "c/" and budgets under "b/". A database may hold other data
// under other prefixes.
type Store struct {
	db     *badger.DB
	own    bool
	stop   chan struct{}
	gcDone chan struct{}
}

var (
	_ llmcache.Store       = (*Store)(nil)
	_ llmcache.BudgetStore = (*Store)(nil)
)

// Options configures a Store that New keeps in a database its caller
// opened. The zero value means the defaults.
type Options struct {
	// CloseDB makes the store close the database when it closes (when the
	// cache does). The default, false, leaves the database to its caller,
	// who may keep other data in it under other prefixes.
	CloseDB bool
}

// New returns a store in db; give it to llmcache.NewStore. While the store
// is open it runs Badger's value log garbage collection every ten minutes.
func New(db *badger.DB, opts Options) *Store {
	s := &Store{db: db, own: opts.CloseDB, stop: make(chan struct{}), gcDone: make(chan struct{})}
	go s.collect()
	return s
}

func (s *Store) collect() {
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

func answerKey(k llmcache.Key) []byte { return append([]byte("c/"), k[:]...) }

func badgerErr(err error) error {
	if errors.Is(err, badger.ErrDBClosed) {
		return llmcache.ErrClosed
	}
	return err
}

// Get implements [llmcache.Store].
func (s *Store) Get(_ context.Context, k llmcache.Key) ([]byte, error) {
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
		return nil, fmt.Errorf("%w: %v", llmcache.ErrNotFound, k)
	}
	return v, badgerErr(err)
}

// Put implements [llmcache.Store]. Badger's TTL, in whole seconds on the
// system clock, only collects the garbage.
func (s *Store) Put(_ context.Context, k llmcache.Key, entry []byte, ttl time.Duration) error {
	return badgerErr(s.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(answerKey(k), entry).WithTTL(ttl + time.Minute))
	}))
}

// Delete implements [llmcache.Store].
func (s *Store) Delete(_ context.Context, k llmcache.Key) error {
	return badgerErr(s.db.Update(func(txn *badger.Txn) error { return txn.Delete(answerKey(k)) }))
}

func budgetKey(id []byte) []byte { return append([]byte("b/"), id...) }

// Budget implements [llmcache.BudgetStore].
func (s *Store) Budget(_ context.Context, id []byte) ([]byte, error) {
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(budgetKey(id))
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

// UpdateBudget implements [llmcache.BudgetStore] with a Badger transaction,
// retried when it conflicts with another.
func (s *Store) UpdateBudget(_ context.Context, id []byte, ttl time.Duration, update func(old []byte) ([]byte, error)) error {
	key := budgetKey(id)
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

// Scan implements [llmcache.Store].
func (s *Store) Scan(_ context.Context, answer, budget func(v []byte) error) error {
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

// Close implements [llmcache.Store]: it stops the garbage collection, and
// closes the database if the store owns it.
func (s *Store) Close() error {
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
