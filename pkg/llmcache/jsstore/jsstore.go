// Package jsstore keeps an Oncegate LLM cache in JetStream key-value
// buckets, shared by every consumer replica connected to the same NATS
// deployment, so that a retry that lands on another replica reuses the
// answer instead of paying the model again.
//
//	st, err := jsstore.New(ctx, js, jsstore.Options{Replicas: 3})
//	...
//	cache, err := llmcache.NewStore(st, llmcache.Options{})
//
// # Buckets
//
// Answers and fill claims live in one bucket (Options.Bucket), the tokens
// spent per intent in another (Options.BudgetBucket); each bucket's TTL is
// its retention, as Badger's per-entry TTL is for the embedded store. The
// cache's own checksum and expiry travel inside each stored entry, as they
// do in Badger, so a flipped bit is a miss, not a wrong answer.
//
// An answer is one value under "a.<key>" when it fits in a message (the
// server's max_payload, 1 MiB by default, less room for headers); a larger
// one is written as chunks under "p.<key>.<generation>.<i>" first and then
// a small head under "a.<key>" naming them, so a reader sees either the
// whole previous answer or the whole new one. Chunks of a replaced answer
// are left to the bucket's TTL.
//
// Why not an Object Store: BenchmarkLargeAnswer (a put and a get of one
// answer, one server on loopback, shared 2-core machine) measured the KV
// value 5.2× faster than an Object Store at 4 KiB, 1.9× at 256 KiB and 1.3×
// at 900 KiB; past max_payload, at 4 MiB, the Object Store was 1.7× faster
// than these chunks, which are written and read one after another. Chat
// answers are almost all a few KiB, the cache's MaxEntryBytes is 1 MiB by
// default, and chunks keep one bucket, one TTL and one watch for the fill
// claim and its answer, so the bucket wins.
//
// # One upstream call across replicas
//
// The store is an llmcache.Filler. The first miss on a key creates its
// claim "f.<key>" (create-if-absent) and renews it every third of
// Options.Lease while the call runs. A miss that finds the claim held
// watches the answer and the claim: it returns the answer as soon as it is
// stored (an answer past the cache's TTL, which the bucket keeps for the
// margin of its own TTL, is none: the key is claimed as a new one is), or
// reads it every eighth of the lease besides (a watch that ends with its
// server's restart starts again only after missed heartbeats); it
// takes the claim over (compare-and-set on the revision it saw)
// when the holder releases it without an answer, or when the claim has
// not been renewed for a whole lease since the server stamped its last
// write (its holder died or was cut off); and after the cache's SharedWait
// it gives up and calls the model itself. A claim's age is read against
// the waiter's clock, so the clocks of the replicas and the servers must
// agree to well within a lease (as the ledger's leases already ask).
//
// # Sealed answers
//
// With Options.Key every answer is sealed with AES-GCM (a random nonce per
// answer, the cache key as additional data) before it is written, so the
// servers, their replicas and backups hold no answer in plain text. The
// bucket's metadata names the key by a check value: a store without the
// key, or with another, is refused by New (llmcache.ErrEncryptionKey)
// rather than write plain text beside sealed answers. The value format is
// versioned by its first four bytes ("OGE1" sealed; an unsealed answer
// under a key reads as a miss and is written again sealed).
//
// # Budgets
//
// A budget record is read and written back with the revision read
// (compare-and-set), retried when another replica wrote in between, so
// every replica reserves from and settles to one budget per intent.
package jsstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvbucket"
	"github.com/oncegate/oncegate/internal/kvlast"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// Defaults for Options, which its fields' docs state.
const (
	defaultBucket    = "oncegate-llm-cache"
	defaultTTL       = 25 * time.Hour             // the cache's default TTL of 24h and an hour of margin
	defaultBudgetTTL = 7*24*time.Hour + time.Hour // the cache's default BudgetTTL of 7 days and an hour
	defaultLease     = 30 * time.Second
	defaultTimeout   = 5 * time.Second
)

const (
	// headroom is what a message needs beyond its value: subject and
	// headers.
	headroom = 8 << 10
	// maxConflictRetries bounds the re-reads of a budget record after a
	// write lost a compare-and-set.
	maxConflictRetries = 64
	chunkMagic         = "OGK1"
)

// Options configures a Store. The zero value means the defaults.
type Options struct {
	// Bucket names the bucket of answers and fill claims. The default is
	// "oncegate-llm-cache".
	Bucket string
	// BudgetBucket names the bucket of token budgets. The default is
	// Bucket + "-budgets".
	BudgetBucket string
	// Replicas is the number of servers that hold each bucket when New
	// creates it. The default is 1.
	Replicas int
	// Storage is where the servers keep the buckets when New creates
	// them. The default is jetstream.FileStorage.
	Storage jetstream.StorageType
	// TTL is the answers bucket's TTL; keep it at least the cache's TTL,
	// or answers expire early (a miss, never a wrong answer). The default
	// is 25h: the cache's default TTL of 24h and an hour of margin.
	TTL time.Duration
	// BudgetTTL is the budgets bucket's TTL; keep it at least the cache's
	// BudgetTTL. The default is 7 days and an hour: the cache's default
	// BudgetTTL and an hour of margin.
	BudgetTTL time.Duration
	// Lease is how long a fill claim holds without renewal. A waiter
	// takes over a claim it has not seen renewed for this long. The
	// default is 30s.
	Lease time.Duration
	// Timeout bounds each call whose context has no deadline. The default
	// is 5s.
	Timeout time.Duration
	// ChunkBytes is the largest value written as one message; larger
	// answers are chunked. The default is the connection's max_payload
	// less 8 KiB.
	ChunkBytes int
	// Key, if set, is an AES key (16, 24 or 32 bytes) that every answer
	// is sealed with (AES-GCM, a random nonce per answer, the cache key
	// as additional data) before it reaches the servers; budgets and fill
	// claims, which hold no text, are not. The bucket's metadata names the
	// key (by a check value), and New refuses, with an error wrapping
	// llmcache.ErrEncryptionKey, a bucket sealed with another key, or a
	// sealed bucket without one. A key given for a bucket written in plain
	// text seals it from then on: its plain answers are read as misses. The
	// default, nil, stores answers as they are.
	Key []byte
}

// Store is an llmcache.Store, llmcache.BudgetStore and llmcache.Filler in
// JetStream KV. It is safe for concurrent use.
type Store struct {
	nc        *nats.Conn
	kv        jetstream.KeyValue // answers, chunks, claims
	budgets   jetstream.KeyValue
	last      *kvlast.Reader // kv's keys, from its stream leader
	lastSpent *kvlast.Reader // budgets' keys, from its stream leader
	opts      Options
	seal      *sealer // nil without Options.Key
	owner     [8]byte
	closed    atomic.Bool
	stop      chan struct{} // closed by Close: renewers stop
	once      sync.Once
	renew     sync.WaitGroup
}

var (
	_ llmcache.Store       = (*Store)(nil)
	_ llmcache.BudgetStore = (*Store)(nil)
	_ llmcache.Filler      = (*Store)(nil)
)

// New returns a store in the buckets opts names, creating them if they do
// not exist. An existing bucket is used as it is. The caller owns the
// connection under js: Close does not close it.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Store, error) {
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", llmcache.ErrInvalidOptions)
	}
	if opts.Replicas < 0 || opts.TTL < 0 || opts.BudgetTTL < 0 || opts.Lease < 0 || opts.Timeout < 0 || opts.ChunkBytes < 0 {
		return nil, fmt.Errorf("%w: negative replicas, duration or size", llmcache.ErrInvalidOptions)
	}
	if opts.Bucket == "" {
		opts.Bucket = defaultBucket
	}
	if opts.BudgetBucket == "" {
		opts.BudgetBucket = opts.Bucket + "-budgets"
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if opts.TTL == 0 {
		opts.TTL = defaultTTL
	}
	if opts.BudgetTTL == 0 {
		opts.BudgetTTL = defaultBudgetTTL
	}
	if opts.Lease == 0 {
		opts.Lease = defaultLease
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	nc := js.Conn()
	if opts.ChunkBytes == 0 {
		opts.ChunkBytes = int(nc.MaxPayload()) - headroom
	}
	if limit := int(nc.MaxPayload()); opts.ChunkBytes < 1024 || limit > 0 && opts.ChunkBytes > limit-headroom {
		return nil, fmt.Errorf("%w: ChunkBytes %d does not fit the server's max_payload %d with %d bytes of headroom",
			llmcache.ErrInvalidOptions, opts.ChunkBytes, limit, headroom)
	}
	seal, err := newSealer(opts.Key)
	if err != nil {
		return nil, err
	}
	opts.Key = nil // the sealer holds it
	ctx, cancel := kvbucket.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	s := &Store{
		nc: nc, opts: opts, seal: seal, stop: make(chan struct{}),
		last:      kvlast.NewReader(nc, js.Options(), opts.Bucket),
		lastSpent: kvlast.NewReader(nc, js.Options(), opts.BudgetBucket),
	}
	rand.Read(s.owner[:])
	var meta map[string]string
	if seal != nil {
		meta = map[string]string{metaEncryption: seal.id}
	}
	if s.kv, err = bucket(ctx, js, opts, opts.Bucket, "Oncegate LLM cache: answers and fill claims", opts.TTL, meta); err != nil {
		return nil, err
	}
	if err := s.checkKey(ctx, js); err != nil {
		return nil, err
	}
	if s.budgets, err = bucket(ctx, js, opts, opts.BudgetBucket, "Oncegate LLM cache: tokens spent per intent", opts.BudgetTTL, nil); err != nil {
		return nil, err
	}
	return s, nil
}

func bucket(ctx context.Context, js jetstream.JetStream, opts Options, name, desc string, ttl time.Duration, meta map[string]string) (jetstream.KeyValue, error) {
	kv, err := kvbucket.Open(ctx, js, jetstream.KeyValueConfig{
		Bucket: name, Description: desc, History: 1, TTL: ttl,
		Storage: opts.Storage, Replicas: opts.Replicas, Metadata: meta,
	})
	if errors.Is(err, jetstream.ErrInvalidBucketName) {
		return nil, fmt.Errorf("%w: bucket %q: %w", llmcache.ErrInvalidOptions, name, err)
	}
	if err != nil {
		return nil, wrapErr("opening bucket "+name, err)
	}
	return kv, nil
}

// checkKey compares the key that seals the answers bucket, as its
// metadata names it, with this store's (see Options.Key). A plain bucket
// given a key is sealed from then on; it is read back after the update,
// so that of two stores with different keys racing to seal it, the one
// whose update was overwritten is refused too.
func (s *Store) checkKey(ctx context.Context, js jetstream.JetStream) error {
	have, err := s.sealedWith(ctx)
	if err != nil {
		return err
	}
	switch {
	case s.seal == nil && have == "":
		return nil
	case s.seal == nil:
		return fmt.Errorf("%w: bucket %s holds answers sealed with a key (%s), and this store has none; give it that key (encryption.key_file)",
			llmcache.ErrEncryptionKey, s.opts.Bucket, have)
	case have == "":
		st, err := js.Stream(ctx, "KV_"+s.opts.Bucket)
		if err != nil {
			return wrapErr("sealing bucket "+s.opts.Bucket, err)
		}
		cfg := st.CachedInfo().Config
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		cfg.Metadata[metaEncryption] = s.seal.id
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return wrapErr("sealing bucket "+s.opts.Bucket, err)
		}
		if have, err = s.sealedWith(ctx); err != nil {
			return err
		}
	}
	if have != s.seal.id {
		return fmt.Errorf("%w: bucket %s holds answers sealed with another key (%s; this store's is %s)",
			llmcache.ErrEncryptionKey, s.opts.Bucket, have, s.seal.id)
	}
	return nil
}

// sealedWith returns the key check value the answers bucket's metadata
// names, or "" for a plain bucket.
func (s *Store) sealedWith(ctx context.Context) (string, error) {
	st, err := s.kv.Status(ctx)
	if err != nil {
		return "", wrapErr("bucket "+s.opts.Bucket, err)
	}
	return st.Metadata()[metaEncryption], nil
}

// wrapErr wraps a store failure with what the store was doing, and marks
// a closed or closing connection with llmcache.ErrClosed.
func wrapErr(what string, err error) error {
	if kvbucket.Closed(err) {
		return fmt.Errorf("jsstore: %s: %w: %w", what, llmcache.ErrClosed, err)
	}
	return fmt.Errorf("jsstore: %s: %w", what, err)
}

// get reads key, retrying transient failures.
func (s *Store) get(ctx context.Context, kv jetstream.KeyValue, key string) (jetstream.KeyValueEntry, error) {
	var e jetstream.KeyValueEntry
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		e, err = kv.Get(ctx, key)
		return err
	})
	return e, err
}

// put writes key, retrying transient failures (writing a value twice is
// harmless).
func (s *Store) put(ctx context.Context, key string, v []byte) error {
	return retry(ctx, func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, key, v)
		return err
	})
}

// update writes key if its revision is still rev (0: absent), retrying
// transient failures. A retry after a write whose answer was lost reports
// a revision mismatch, as a lost race does.
func (s *Store) update(ctx context.Context, kv jetstream.KeyValue, key string, v []byte, rev uint64) (uint64, error) {
	var r uint64
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		r, err = kv.Update(ctx, key, v, rev)
		return err
	})
	return r, err
}

// create writes key if it is absent, retrying transient failures. A retry
// after a write whose answer was lost reports that the key exists.
func (s *Store) create(ctx context.Context, key string, v []byte) (uint64, error) {
	var r uint64
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		r, err = s.kv.Create(ctx, key, v)
		return err
	})
	return r, err
}

func headKey(k llmcache.Key) string  { return "a." + k.String() }
func claimKey(k llmcache.Key) string { return "f." + k.String() }

// Get implements llmcache.Store.
func (s *Store) Get(ctx context.Context, k llmcache.Key) ([]byte, error) {
	if s.closed.Load() {
		return nil, llmcache.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	e, err := s.get(ctx, s.kv, headKey(k))
	if err == nil {
		return s.assemble(ctx, k, e.Value())
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, wrapErr("get "+k.String(), err)
	}
	// A miss sends the call to the model: confirm it with the leader.
	v, _, found, err := s.leaderRead(ctx, s.last, headKey(k))
	if err != nil {
		return nil, wrapErr("get "+k.String(), err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %v", llmcache.ErrNotFound, k)
	}
	return s.assemble(ctx, k, v)
}

// assemble returns the entry a head stands for (the head itself, or the
// chunks it names), opened if the store seals its answers.
func (s *Store) assemble(ctx context.Context, k llmcache.Key, head []byte) ([]byte, error) {
	v, err := s.gather(ctx, k, head)
	if err != nil || s.seal == nil {
		return v, err
	}
	return s.seal.open(k, v)
}

// gather returns the value a head stands for: the head itself, or the
// chunks it names, joined.
func (s *Store) gather(ctx context.Context, k llmcache.Key, head []byte) ([]byte, error) {
	if len(head) != len(chunkMagic)+8+4+8 || string(head[:4]) != chunkMagic {
		return head, nil
	}
	gen := hex.EncodeToString(head[4:12])
	n := int(binary.BigEndian.Uint32(head[12:]))
	size := binary.BigEndian.Uint64(head[16:])
	if size > 1<<40 {
		return nil, fmt.Errorf("%w: chunked answer of %d bytes", llmcache.ErrCorruptEntry, size)
	}
	out := make([]byte, 0, size)
	for i := range n {
		// From the leader: a replica that served the head may lag on a
		// chunk written before it, never the leader.
		v, _, found, err := s.leaderRead(ctx, s.last, fmt.Sprintf("p.%s.%s.%d", k, gen, i))
		if err != nil {
			return nil, wrapErr("get "+k.String(), err)
		}
		if !found {
			return nil, fmt.Errorf("%w: %v: chunk %d of %d has expired", llmcache.ErrNotFound, k, i, n)
		}
		out = append(out, v...)
	}
	if uint64(len(out)) != size {
		return nil, fmt.Errorf("%w: chunked answer of %d bytes, want %d", llmcache.ErrCorruptEntry, len(out), size)
	}
	return out, nil
}

// Put implements llmcache.Store. The bucket's TTL decides how long the
// entry is kept; ttl is not used.
func (s *Store) Put(ctx context.Context, k llmcache.Key, entry []byte, _ time.Duration) error {
	if s.closed.Load() {
		return llmcache.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if s.seal != nil {
		entry = s.seal.seal(k, entry)
	}
	head := entry
	if len(entry) > s.opts.ChunkBytes {
		var gen [8]byte
		rand.Read(gen[:])
		n := 0
		for off := 0; off < len(entry); off += s.opts.ChunkBytes {
			part := entry[off:min(off+s.opts.ChunkBytes, len(entry))]
			if err := s.put(ctx, fmt.Sprintf("p.%s.%x.%d", k, gen, n), part); err != nil {
				return wrapErr("put "+k.String(), err)
			}
			n++
		}
		head = append([]byte(chunkMagic), gen[:]...)
		head = binary.BigEndian.AppendUint32(head, uint32(n))
		head = binary.BigEndian.AppendUint64(head, uint64(len(entry)))
	}
	if err := s.put(ctx, headKey(k), head); err != nil {
		return wrapErr("put "+k.String(), err)
	}
	return nil
}

// Delete implements llmcache.Store.
func (s *Store) Delete(ctx context.Context, k llmcache.Key) error {
	if s.closed.Load() {
		return llmcache.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	if err := s.kv.Delete(ctx, headKey(k)); err != nil {
		return wrapErr("delete "+k.String(), err)
	}
	return nil
}

// budgetKey names a budget record by a hash of its id: the id holds a
// namespace and an intent, which need not be valid key characters.
func budgetKey(id []byte) string {
	h := sha256.Sum256(id)
	return "b." + hex.EncodeToString(h[:16])
}

// Budget implements llmcache.BudgetStore.
func (s *Store) Budget(ctx context.Context, id []byte) ([]byte, error) {
	if s.closed.Load() {
		return nil, llmcache.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	v, _, _, err := s.leaderRead(ctx, s.lastSpent, budgetKey(id))
	if err != nil {
		return nil, wrapErr("read budget", err)
	}
	return v, nil
}

// UpdateBudget implements llmcache.BudgetStore by compare-and-set on the
// record's revision. The bucket's TTL decides how long the record is kept;
// ttl is not used.
func (s *Store) UpdateBudget(ctx context.Context, id []byte, _ time.Duration, update func(old []byte) ([]byte, error)) error {
	if s.closed.Load() {
		return llmcache.ErrClosed
	}
	ctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	key := budgetKey(id)
	for range maxConflictRetries {
		old, rev, _, err := s.leaderRead(ctx, s.lastSpent, key)
		if err != nil {
			return wrapErr("read budget", err)
		}
		v, err := update(old)
		if err != nil {
			return err
		}
		_, err = s.update(ctx, s.budgets, key, v, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return wrapErr("write budget", err)
		}
		return nil
	}
	return fmt.Errorf("jsstore: write budget: lost %d compare-and-set races in a row", maxConflictRetries)
}

// Scan implements llmcache.Store. It lists the keys, then reads the values
// one by one: it is O(n), for inspection.
func (s *Store) Scan(ctx context.Context, answer, budget func(v []byte) error) error {
	if s.closed.Load() {
		return llmcache.ErrClosed
	}
	for _, b := range []struct {
		kv     jetstream.KeyValue
		filter string
		fn     func(context.Context, string) ([]byte, error)
		yield  func([]byte) error
	}{
		{s.budgets, "b.*", func(ctx context.Context, key string) ([]byte, error) {
			e, err := s.budgets.Get(ctx, key)
			if err != nil {
				return nil, err
			}
			return e.Value(), nil
		}, budget},
		{s.kv, "a.*", func(ctx context.Context, key string) ([]byte, error) {
			e, err := s.kv.Get(ctx, key)
			if err != nil {
				return nil, err
			}
			var k llmcache.Key
			if _, err := hex.Decode(k[:], []byte(key[2:])); err != nil {
				return nil, llmcache.ErrNotFound
			}
			return s.assemble(ctx, k, e.Value())
		}, answer},
	} {
		keys, err := s.keys(ctx, b.kv, b.filter)
		if err != nil {
			return err
		}
		for _, key := range keys {
			cctx, cancel := kvbucket.WithTimeout(ctx, s.opts.Timeout)
			v, err := b.fn(cctx, key)
			cancel()
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, llmcache.ErrNotFound) {
				continue
			}
			if err != nil {
				return wrapErr("scan", err)
			}
			if err := b.yield(v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) keys(ctx context.Context, kv jetstream.KeyValue, filter string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*s.opts.Timeout)
	defer cancel()
	l, err := kv.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapErr("list keys", err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, wrapErr("list keys", err)
	}
	return keys, nil
}

// Close implements llmcache.Store: it stops renewing claims (a claim still
// held lapses) and waits for the renewers. It does not close the
// connection.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.once.Do(func() { close(s.stop) })
	s.renew.Wait()
	return nil
}
