package llmcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oncegate/oncegate/internal/llmhook"
)

// ErrClosed is returned by a Cache, and by requests through its transport,
// after Close.
var ErrClosed = errors.New("llmcache: cache closed")

// ErrStoreUnavailable is wrapped by the error returned, through go-openai,
// for a call that a store shared between processes could not serve or
// coordinate (its servers unreachable, or electing a leader): the answer
// may be stored, or being made by another process, so the call fails
// rather than pay the model again, and its caller retries it later.
var ErrStoreUnavailable = errors.New("llmcache: shared store unavailable")

// ErrInvalidOptions is wrapped by the error NewStore (and the stores'
// openers) return for options that cannot work.
var ErrInvalidOptions = errors.New("llmcache: invalid options")

// ErrEncryptionKey is wrapped by the error of a store that was written
// with another encryption key than the one given, or with none, or with
// one when none is given (badgerstore.OpenEncrypted, jsstore.New).
var ErrEncryptionKey = errors.New("llmcache: encryption key does not match the cache's")

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

	// Endpoint names the model endpoint the cache's answers come from, and
	// is part of every key, so that answers from one endpoint are never
	// served for another. The default is the request's URL up to the
	// chat completions path (scheme, host and base path, without the query
	// string): a switch of base URL, say from the stand-in to a real
	// provider, asks again. Set it to keep answers across a change of URL
	// that does not change the model behind it.
	Endpoint string

	// SharedWait bounds how long a miss waits for an identical call that
	// another process holds the fill claim for, with a store shared
	// between processes (a [Filler]); after it, the miss calls the model
	// itself. A live holder renews its claim for as long as its call may
	// take (FillTimeout) and while its answer's write is retried, and a
	// dead holder's claim lapses and is taken over, so the wait normally
	// ends well before the bound; a shorter bound pays the model again
	// whenever the holder is slow. Callers stop waiting
	// when their own context ends: the wait goes on detached, and the
	// answer is in the store for their retry. The default is FillTimeout +
	// 30s, which allows for a holder retrying its answer's write.
	SharedWait time.Duration

	// HoldDir, if set, is a directory of this process's own where every
	// answer paid for is written before the store is asked to keep it,
	// and removed once the store has it, so that the answer outlives a
	// process that dies in between (killed, crash-looping, its shared
	// store unreachable meanwhile): NewStore takes up the answers it finds
	// there, holds them and stores them (see "A paid answer is kept" in
	// the package documentation). Meant for a store shared between
	// processes, whose write is a network round trip; the files are not
	// synced to disk (they outlive the process, not the machine). The
	// default, "", keeps a paid answer in memory only until it is stored.
	HoldDir string

	// HoldKey, if set, is an AES key (16, 24 or 32 bytes) that seals the
	// answers in HoldDir (AES-GCM, a random nonce per answer, the cache
	// key as additional data). A file sealed with another key, or with
	// none, does not decode, and is removed. The default, nil, writes them
	// as they are.
	HoldKey []byte
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
	if o.SharedWait == 0 {
		o.SharedWait = o.FillTimeout + 30*time.Second
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
	if o.TTL < 0 || o.FillTimeout < 0 || o.BudgetTTL < 0 || o.SharedWait < 0 {
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

// Cache stores model answers in a [Store] (Badger, with package
// badgerstore, or JetStream KV, with package jsstore) and serves them to
// go-openai through [Cache.Transport]. It is safe for concurrent use.
type Cache struct {
	store  Store
	filler Filler        // nil unless the store is shared between processes
	puts   atomic.Uint64 // answers this Cache has stored
	opts   Options

	stats   counters
	budgets budgets

	mu      sync.Mutex
	flights map[Key]*flight
	held    map[Key]*storedAnswer // paid for, refused by the store, being retried
	closed  bool

	holdFiles *holdFiles   // Options.HoldDir; nil without one
	nheld     atomic.Int64 // len(held), read without mu on every lookup

	fills   sync.WaitGroup
	workers *workers        // the fills' goroutines
	ctx     context.Context // parent of every fill; canceled by Close
	cancel  context.CancelFunc
}

// NewStore returns a cache in s, and closes s on Close. If s is also a
// [Filler] (a store shared between processes), identical misses in
// different processes make one upstream call. With Options.HoldDir, it
// takes up the answers an earlier process left there and stores them.
func NewStore(s Store, opts Options) (*Cache, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	bs, _ := s.(BudgetStore)
	if bs == nil && opts.Budget > 0 {
		return nil, fmt.Errorf("%w: Budget needs a store that keeps budgets (a BudgetStore)", ErrInvalidOptions)
	}
	hf, err := newHoldFiles(opts.HoldDir, opts.HoldKey)
	if err != nil {
		return nil, err
	}
	opts.HoldKey = nil // kept, as a cipher, by hf alone
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		store: s, opts: opts,
		budgets:   budgets{store: bs, ttl: opts.BudgetTTL, clock: opts.Clock},
		flights:   map[Key]*flight{},
		held:      map[Key]*storedAnswer{},
		holdFiles: hf,
		workers:   newWorkers(workerIdle),
		ctx:       ctx, cancel: cancel,
	}
	c.filler, _ = s.(Filler)
	if err := c.reclaim(); err != nil {
		cancel()
		c.fills.Wait()
		c.workers.stop()
		return nil, err
	}
	return c, nil
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
	c.workers.stop()
	return c.store.Close()
}

// spent returns the tokens spent on intent in namespace, as the budget
// counts them: the calls made under a budget (Options.Budget or
// Call.Budget); a call under none is not counted.
func (c *Cache) spent(namespace, intent string) (int64, error) {
	if namespace == "" {
		namespace = c.opts.Namespace
	}
	return c.budgets.spent(c.ctx, namespace, intent)
}

func (c *Cache) get(ctx context.Context, k Key) (*storedAnswer, bool, error) {
	if a := c.heldAnswer(k); a != nil {
		return a, true, nil
	}
	v, err := c.store.Get(ctx, k)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if errors.Is(err, ErrClosed) {
		return nil, false, ErrClosed
	}
	if err != nil {
		return nil, false, fmt.Errorf("llmcache: read %v: %w", k, err)
	}
	a, err := unmarshalEntry(v)
	if err != nil {
		return nil, false, fmt.Errorf("llmcache: read %v: %w", k, err)
	}
	if !c.opts.Clock().Before(a.Expires) {
		return nil, false, nil
	}
	return a, true, nil
}

// live reports whether a stored entry answers now: it decodes, checksum
// and all, and has not expired.
func (c *Cache) live(entry []byte) bool {
	a, err := unmarshalEntry(entry)
	return err == nil && c.opts.Clock().Before(a.Expires)
}

// heldAnswer returns the live answer for k that c holds because the store
// refused it (hold), or nil.
func (c *Cache) heldAnswer(k Key) *storedAnswer {
	if c.nheld.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	a := c.held[k]
	c.mu.Unlock()
	if a == nil || !c.opts.Clock().Before(a.Expires) {
		return nil
	}
	return a
}

// hold keeps a, the answer for k that the store refused, in memory until
// unhold: get serves it meanwhile.
func (c *Cache) hold(k Key, a *storedAnswer) {
	c.mu.Lock()
	if c.held[k] == nil {
		c.nheld.Add(1)
	}
	c.held[k] = a
	c.mu.Unlock()
}

// unhold forgets the held answer a for k, once it is stored or given up.
func (c *Cache) unhold(k Key, a *storedAnswer) {
	c.mu.Lock()
	if c.held[k] == a {
		delete(c.held, k)
		c.nheld.Add(-1)
	}
	c.mu.Unlock()
}

func (c *Cache) put(ctx context.Context, k Key, a *storedAnswer) error {
	err := c.store.Put(ctx, k, a.marshal(), a.Expires.Sub(a.Created))
	if err == nil {
		c.puts.Add(1)
	}
	return err
}

// endpoint returns the identity of the endpoint req goes to: the
// configured Endpoint, or the URL without the chat completions path and
// query.
func (c *Cache) endpoint(u *url.URL) string {
	if c.opts.Endpoint != "" {
		return c.opts.Endpoint
	}
	e := url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host), Path: strings.TrimSuffix(u.Path, "/chat/completions")}
	return e.String()
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

// summarize scans the store.
func (c *Cache) summarize() (llmhook.Summary, error) {
	var s llmhook.Summary
	now := c.opts.Clock()
	err := c.store.Scan(context.Background(), func(v []byte) error {
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
	}, func(v []byte) error {
		if r, err := decodeBudget(v); err == nil {
			s.Budgets++
			s.BudgetSpent += r.spent
		}
		return nil
	})
	return s, err
}
