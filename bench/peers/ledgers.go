package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/procstat"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A pairer runs one claim+commit of a fresh key, or (batch > 1) of batch
// fresh keys at once, and reports an error if a fresh key was not new.
type pairer interface {
	pair(ctx context.Context, keys []dedupe.Key) error
	close()
}

// serverPid is the process id of the server a pairer talks to, 0 for one in
// this process; the bench adds that server's CPU time to its own.
type serverPid interface{ serverPid() int }

// result128 is the result every peer stores with a commit.
var result128 = make([]byte, 128)

// keySource hands out fresh keys.
type keySource struct {
	next atomic.Uint64
	seed uint64
}

func newKeySource() *keySource { return &keySource{seed: uint64(time.Now().UnixNano())} }

func (s *keySource) fill(keys []dedupe.Key) {
	n := s.next.Add(uint64(len(keys)))
	for i := range keys {
		binary.LittleEndian.PutUint64(keys[i][:], n-uint64(i))
		binary.LittleEndian.PutUint64(keys[i][8:], s.seed)
	}
}

// --- Oncegate --------------------------------------------------------------

// ledgerPairer claims and commits through a ledger.Ledger: one key with
// Begin and Commit, several with BeginAll and CommitAll (what Oncegate's
// consumer does with a fetched batch).
type ledgerPairer struct {
	l       ledger.Ledger
	closeFn func()
}

func (p *ledgerPairer) pair(ctx context.Context, keys []dedupe.Key) error {
	opts := ledger.BeginOptions{Owner: "bench", Lease: time.Minute}
	res := ledger.Result{DownstreamID: "ticket-1", Response: result128}
	if len(keys) == 1 {
		c, err := p.l.Begin(ctx, keys[0], opts)
		if err != nil {
			return err
		}
		if c.Status != ledger.StatusNew {
			return fmt.Errorf("fresh key: %v", c.Status)
		}
		return p.l.Commit(ctx, keys[0], c.Lease.Token, res)
	}
	reqs := make([]ledger.BeginRequest, len(keys))
	for i, k := range keys {
		reqs[i] = ledger.BeginRequest{Key: k, Options: opts}
	}
	commits := make([]ledger.CommitRequest, len(keys))
	for i, r := range ledger.BeginAll(ctx, p.l, reqs) {
		if r.Err != nil {
			return r.Err
		}
		if r.Claim.Status != ledger.StatusNew {
			return fmt.Errorf("fresh key: %v", r.Claim.Status)
		}
		commits[i] = ledger.CommitRequest{Key: keys[i], Token: r.Claim.Lease.Token, Result: res}
	}
	for _, err := range ledger.CommitAll(ctx, p.l, commits) {
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *ledgerPairer) close() { p.closeFn() }

func openBadgerPairer(dir string) (pairer, error) {
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{})
	if err != nil {
		return nil, err
	}
	l, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &ledgerPairer{l: l, closeFn: func() { l.Close(); db.Close() }}, nil
}

// --- Redis -------------------------------------------------------------------

// redisPairer is the idempotency key a user writes with Redis: SET key
// "pending" NX PX lease to claim, SET key result PX retention to commit.
type redisPairer struct {
	c   *redis.Client
	pid int
}

func (p *redisPairer) serverPid() int { return p.pid }

func (p *redisPairer) pair(ctx context.Context, keys []dedupe.Key) error {
	for _, k := range keys {
		key := "idem:" + string(k[:])
		ok, err := p.c.SetNX(ctx, key, "pending", time.Minute).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("redis: fresh key already set")
		}
		if err := p.c.Set(ctx, key, result128, 24*time.Hour).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (p *redisPairer) close() { p.c.Close() }

// redisServer is one redis-server for all Redis cells; cells switch its
// appendfsync.
type redisServer struct {
	p    *proc
	sock string
}

func newRedisServer(ctx context.Context, dir string) (*redisServer, error) {
	p, sock, err := startRedis(ctx, dir)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	defer c.Close()
	if err := waitFor(ctx, p, func() error { return c.Ping(ctx).Err() }); err != nil {
		p.stop()
		return nil, skipf("redis-server: %v", err)
	}
	return &redisServer{p: p, sock: sock}, nil
}

// open returns a pairer on a fresh database state with appendfsync fsync
// and a pool of workers connections.
func (s *redisServer) open(ctx context.Context, fsync string, workers int) (pairer, error) {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: s.sock, PoolSize: max(workers, 10), MinIdleConns: min(workers, 64)})
	if err := c.ConfigSet(ctx, "appendfsync", fsync).Err(); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &redisPairer{c: c, pid: s.p.cmd.Process.Pid}, nil
}

func (s *redisServer) stop() { s.p.stop() }

// --- PostgreSQL ------------------------------------------------------------

// pgPairer is the idempotency-key table a user writes with PostgreSQL:
// INSERT ... ON CONFLICT DO NOTHING to claim (one row inserted: the key is
// new), UPDATE to commit; each statement its own transaction, committed
// with synchronous_commit on.
type pgPairer struct {
	pool *pgxpool.Pool
	pid  int
}

func (p *pgPairer) serverPid() int { return p.pid }

const pgSchema = `CREATE TABLE IF NOT EXISTS idempotency_keys (
	key bytea PRIMARY KEY,
	state text NOT NULL,
	owner text NOT NULL,
	locked_until timestamptz NOT NULL,
	result bytea,
	created_at timestamptz NOT NULL DEFAULT now()
)`

func (p *pgPairer) pair(ctx context.Context, keys []dedupe.Key) error {
	for _, k := range keys {
		tag, err := p.pool.Exec(ctx,
			`INSERT INTO idempotency_keys (key, state, owner, locked_until) VALUES ($1, 'pending', 'bench', now() + interval '1 minute') ON CONFLICT DO NOTHING`,
			k[:])
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errors.New("postgres: fresh key already present")
		}
		if _, err := p.pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'done', result = $2 WHERE key = $1`, k[:], result128); err != nil {
			return err
		}
	}
	return nil
}

func (p *pgPairer) close() { p.pool.Close() }

type pgServer struct {
	p    *proc
	dir  string
	conn string
}

func newPGServer(ctx context.Context, dir string, maxConns int) (*pgServer, error) {
	p, conn, err := startPostgres(ctx, dir, maxConns)
	if err != nil {
		return nil, err
	}
	s := &pgServer{p: p, dir: dir, conn: conn}
	err = waitFor(ctx, p, func() error {
		pool, err := pgxpool.New(ctx, conn)
		if err != nil {
			return err
		}
		defer pool.Close()
		_, err = pool.Exec(ctx, pgSchema)
		return err
	})
	if err != nil {
		s.stop()
		return nil, skipf("postgres: %v", err)
	}
	return s, nil
}

func (s *pgServer) open(ctx context.Context, workers int) (pairer, error) {
	cfg, err := pgxpool.ParseConfig(s.conn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(max(workers, 4))
	cfg.MinConns = int32(min(workers, 64))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `TRUNCATE idempotency_keys`); err != nil {
		pool.Close()
		return nil, err
	}
	return &pgPairer{pool: pool, pid: s.p.cmd.Process.Pid}, nil
}

// stop shuts the postmaster down (fast shutdown) by its pid, since the
// process the bench started may be runuser and not postgres itself.
func (s *pgServer) stop() {
	b, err := os.ReadFile(filepath.Join(s.dir, "data", "postmaster.pid"))
	if err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGINT)
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	s.p.stop()
}

// --- measuring ---------------------------------------------------------------

// A sample is one measured cell.
type sample struct {
	rate float64       // pairs per second
	cpu  time.Duration // CPU time per pair, this process and the server's
}

// measure runs claim+commit pairs from workers goroutines (each with batch
// keys at a time) for d after a warm-up of d/5, and returns pairs (keys)
// per second and the CPU time they took, this process's and the server's.
func measure(ctx context.Context, p pairer, keys *keySource, workers, batch int, d time.Duration) (sample, error) {
	pid := 0
	if s, ok := p.(serverPid); ok {
		pid = s.serverPid()
	}
	var (
		done    atomic.Int64
		stop    atomic.Bool
		counted atomic.Bool
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range workers {
		wg.Go(func() {
			ks := make([]dedupe.Key, batch)
			for !stop.Load() {
				keys.fill(ks)
				if err := p.pair(ctx, ks); err != nil {
					errOnce.Do(func() { first = err })
					stop.Store(true)
					return
				}
				if counted.Load() {
					done.Add(int64(batch))
				}
			}
		})
	}
	time.Sleep(d / 5)
	counted.Store(true)
	start, cpu0 := time.Now(), procstat.CPU()+treeCPU(pid)
	time.Sleep(d)
	n := done.Load()
	elapsed, cpu := time.Since(start), procstat.CPU()+treeCPU(pid)-cpu0
	stop.Store(true)
	wg.Wait()
	s := sample{rate: float64(n) / elapsed.Seconds()}
	if n > 0 {
		s.cpu = cpu / time.Duration(n)
	}
	return s, first
}
