package llmcache

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// ErrClosed is returned by a Cache, and by requests through its transport,
// after Close.
var ErrClosed = errors.New("llmcache: cache closed")

// ErrInvalidOptions is wrapped by the error New and Open return for
// options that cannot work.
var ErrInvalidOptions = errors.New("llmcache: invalid options")

// Options configures a [Cache]. The zero value means the defaults.
type Options struct {
	// Namespace is the namespace of requests whose context carries no
	// [Call], or a Call with an empty Namespace. The default is "default".
	Namespace string

	// TTL is how long a stored answer is served. The default is 24h.
	TTL time.Duration

	// MaxEntryBytes is the largest answer body stored; a larger answer is
	// passed through and not stored. The default is 1 MiB.
	MaxEntryBytes int

	// MaxRequestBytes is the largest request body keyed; a larger request
	// bypasses the cache. The default is 8 MiB.
	MaxRequestBytes int

	// FillTimeout bounds one upstream call made on behalf of the callers
	// waiting for it. Those callers' own contexts do not cancel it (one
	// caller giving up must not fail the others), so this does. The
	// default is 10m.
	FillTimeout time.Duration

	// Budget is the most tokens the calls for one intent may spend, as the
	// API reports them; a call that could take the intent past it fails
	// with a *BudgetError wrapping ErrBudgetExceeded. A call may spend its
	// prompt plus its max tokens, so set max tokens (or
	// max_completion_tokens) for a budget that is never passed; without
	// them the last call allowed can overshoot by its completion. The
	// default, 0, is no limit; [Call.Budget] overrides it per call.
	Budget int64

	// BudgetTTL is how long the tokens spent on an intent are remembered.
	// The default is 7 days, the ledger's default retention: a trigger
	// redelivered within that time draws from the budget it already used.
	BudgetTTL time.Duration

	// Prices prices tokens in the counters. The default prices nothing.
	Prices Prices

	// Clock tells the time for expiry. The default is time.Now.
	Clock func() time.Time

	// Logger receives one debug record per upstream call and a warning
	// per store failure. It never sees headers (where the API key is) or
	// message contents. The default discards.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.TTL == 0 {
		o.TTL = 24 * time.Hour
	}
	if o.MaxEntryBytes == 0 {
		o.MaxEntryBytes = 1 << 20
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = 8 << 20
	}
	if o.FillTimeout == 0 {
		o.FillTimeout = 10 * time.Minute
	}
	if o.BudgetTTL == 0 {
		o.BudgetTTL = 7 * 24 * time.Hour
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

func (o *Options) validate() error {
	var errs []error
	if o.TTL < 0 || o.FillTimeout < 0 || o.BudgetTTL < 0 {
		errs = append(errs, fmt.Errorf("%w: negative duration", ErrInvalidOptions))
	}
	if o.MaxEntryBytes < 0 || o.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("%w: negative size", ErrInvalidOptions))
	}
	if o.Budget < 0 {
		errs = append(errs, fmt.Errorf("%w: negative Budget %d", ErrInvalidOptions, o.Budget))
	}
	for m, p := range o.Prices {
		if p.Prompt < 0 || p.Completion < 0 {
			errs = append(errs, fmt.Errorf("%w: negative price for model %q", ErrInvalidOptions, m))
		}
	}
	return errors.Join(errs...)
}

// Cache stores model answers in Badger and serves them to go-openai through
// [Cache.Transport]. It is safe for concurrent use.
type Cache struct {
	db    *badger.DB
	ownDB bool
	opts  Options

	stats   counters
	budgets budgets

	mu      sync.Mutex
	flights map[Key]*flight
	closed  bool

	fills  sync.WaitGroup
	ctx    context.Context // parent of every fill; canceled by Close
	cancel context.CancelFunc
	gcDone chan struct{}
}

// Open opens (creating if needed) a cache in its own Badger database in
// dir, and closes the database on Close.
//
// Answers go to Badger's value log, uncompressed (most of them are larger
// than 512 bytes, and the value log is never compressed); the tables hold
// keys and budgets, uncompressed too, so that anyone can check with grep
// that no secret reached the disk.
//
// Keep it apart from the ledger's database: the ledger syncs every claim
// and commit to disk and its latency is the pipeline's, while a cache
// write need not be synced at all (a lost answer is asked again), and an
// answer is often a hundred times the size of a ledger record.
func Open(dir string, opts Options) (*Cache, error) {
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithChecksumVerificationMode(options.OnTableAndBlockRead).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithBlockCacheSize(32 << 20).
		WithValueThreshold(512).
		WithCompression(options.None).
		WithLogger(nil)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("llmcache: opening badger in %s: %w", dir, err)
	}
	c, err := newCache(db, true, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	return c, nil
}

// New returns a cache in db, under the key prefixes "c/" (answers) and
// "b/" (budgets). The caller keeps ownership of db and closes it after
// Close.
func New(db *badger.DB, opts Options) (*Cache, error) {
	return newCache(db, false, opts)
}

func newCache(db *badger.DB, own bool, opts Options) (*Cache, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		db: db, ownDB: own, opts: opts,
		budgets: budgets{db: db, ttl: opts.BudgetTTL},
		flights: map[Key]*flight{},
		ctx:     ctx, cancel: cancel,
		gcDone: make(chan struct{}),
	}
	go c.collect()
	return c, nil
}

// collect runs Badger's value log garbage collection every ten minutes,
// while the cache is open.
func (c *Cache) collect() {
	defer close(c.gcDone)
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			for c.db.RunValueLogGC(0.5) == nil {
			}
		}
	}
}

// Close cancels the upstream calls in flight (their callers get an error)
// and waits for them, then closes the database if the cache opened it.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.fills.Wait()
	<-c.gcDone
	if c.ownDB {
		return c.db.Close()
	}
	return nil
}

// Stats returns the counters of every namespace and step seen, sorted.
func (c *Cache) Stats() []StepStats { return c.stats.snapshot() }

// Spent returns the tokens spent on intent in namespace, as the budget
// counts them.
func (c *Cache) Spent(namespace, intent string) (int64, error) {
	if namespace == "" {
		namespace = c.opts.Namespace
	}
	return c.budgets.spent(namespace, intent)
}

func answerKey(k Key) []byte { return append([]byte("c/"), k[:]...) }

// Get returns the stored answer for k, if there is a live one.
func (c *Cache) Get(k Key) (*Answer, bool, error) {
	var a *Answer
	err := c.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(answerKey(k))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error {
			var err error
			a, err = unmarshalEntry(append([]byte(nil), v...))
			return err
		})
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if errors.Is(err, badger.ErrDBClosed) {
		return nil, false, ErrClosed
	}
	if err != nil {
		return nil, false, fmt.Errorf("llmcache: read %v: %w", k, err)
	}
	if !c.opts.Clock().Before(a.Expires) {
		return nil, false, nil
	}
	return a, true, nil
}

// Delete removes the stored answer for k, if any.
func (c *Cache) Delete(k Key) error {
	err := c.db.Update(func(txn *badger.Txn) error { return txn.Delete(answerKey(k)) })
	if errors.Is(err, badger.ErrDBClosed) {
		return ErrClosed
	}
	return err
}

func (c *Cache) put(k Key, a *Answer) error {
	// Badger's TTL, in whole seconds on the system clock, only collects
	// the garbage; a.Expires on the cache's clock decides what is served.
	ttl := a.Expires.Sub(a.Created) + time.Minute
	return c.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(answerKey(k), a.marshal()).WithTTL(ttl))
	})
}

// Transport returns an http.RoundTripper that answers chat completion
// requests (POST to a path ending in /chat/completions) from the cache and
// sends every other request to next unchanged. A nil next means
// http.DefaultTransport.
func (c *Cache) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &transport{c: c, next: next}
}

// HTTPClient returns a copy of base (or of a zero http.Client, if base is
// nil) whose transport goes through the cache: the one line that puts a
// go-openai client behind it is
//
//	cfg.HTTPClient = cache.HTTPClient(nil)
func (c *Cache) HTTPClient(base *http.Client) *http.Client {
	var hc http.Client
	if base != nil {
		hc = *base
	}
	hc.Transport = c.Transport(hc.Transport)
	return &hc
}

// Summary describes what a cache holds.
type Summary struct {
	Answers      int   // live stored answers
	AnswerBytes  int64 // their bodies' total size
	AnswerTokens int64 // the tokens they cost when made: what each hit saves
	Streams      int   // of Answers, streamed ones
	Budgets      int   // intents with recorded spending
	BudgetSpent  int64 // tokens recorded across those intents
}

// Summary scans the store.
func (c *Cache) Summary() (Summary, error) {
	var s Summary
	now := c.opts.Clock()
	err := c.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Seek([]byte("b/")); it.ValidForPrefix([]byte("b/")); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				if len(v) == 8 {
					s.Budgets++
					s.BudgetSpent += int64(binary.BigEndian.Uint64(v))
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		for it.Seek([]byte("c/")); it.ValidForPrefix([]byte("c/")); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				a, err := unmarshalEntry(v)
				if err != nil || !now.Before(a.Expires) {
					return nil // a corrupt or expired entry is a miss
				}
				s.Answers++
				s.AnswerBytes += int64(len(a.Body))
				s.AnswerTokens += a.Usage.Total()
				if a.Stream {
					s.Streams++
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, badger.ErrDBClosed) {
		return s, ErrClosed
	}
	return s, err
}
