package badgerstore

import (
	"context"
	"encoding/binary"
	"sync"

	"github.com/dgraph-io/badger/v4"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// One process owns a Badger directory, so every write of a ledger record
// goes through the BadgerLedgers of that process. They share an inproc per
// DB, which does two things:
//
//   - It serializes the writes of each key: a write takes the key's lock
//     before it reads the record and keeps it until its transaction has
//     committed, so no two transactions of the process ever work on one key
//     at once. (Badger's conflict detection stays on: it is no longer what
//     decides, but it still guards.)
//   - It remembers the pending records it wrote (claims and their
//     renewals), up to a bound. Under the key's lock the record it remembers
//     is the current one, so every later write of the key takes it from
//     memory instead of reading it back down Badger's skiplists: on a 2-core
//     VM that read was the largest single cost of a durable gate after the
//     fsyncs.
//   - It keeps the volatile claims (BeginOptions.Volatile): pending records
//     that exist in memory only, never in the DB. A volatile claim is kept
//     while there is room under the bound; past it, the claim is written
//     like any other.
//
// A record that is no longer pending (committed, failed) is forgotten. So is
// every durable record of a transaction that failed: its state is then read
// from the DB again. A volatile claim has no other copy and is kept.
type inproc struct {
	shards [inprocShards]inprocShard
}

const inprocShards = 64

// inprocClaims bounds the pending records a shard remembers: about 64K in
// all, far more than are in flight. A durable claim not remembered is read;
// a volatile claim that finds no room is written. (A variable for tests.)
var inprocClaims = 1024

// memo is a pending record the process remembers.
type memo struct {
	rec      ledger.Record
	volatile bool // rec is not in the DB
}

type inprocShard struct {
	mu     sync.Mutex
	held   map[dedupe.Key]chan struct{} // closed when the key's lock is released
	claims map[dedupe.Key]memo
	_      [64]byte
}

func newInproc() *inproc {
	s := &inproc{}
	for i := range s.shards {
		s.shards[i].held = make(map[dedupe.Key]chan struct{})
		s.shards[i].claims = make(map[dedupe.Key]memo)
	}
	return s
}

// shard returns the shard of k. Keys are hashes, so any 8 bytes of them
// spread evenly.
func (s *inproc) shard(k dedupe.Key) *inprocShard {
	return &s.shards[binary.LittleEndian.Uint64(k[:8])%inprocShards]
}

// lock takes the locks of keys, which must be sorted and distinct (the order
// every caller takes them in, so no two callers wait on each other in a
// circle), and returns the function that releases them.
func (s *inproc) lock(ctx context.Context, keys []dedupe.Key) (unlock func(), err error) {
	taken := 0
	unlock = func() {
		for _, k := range keys[:taken] {
			sh := s.shard(k)
			sh.mu.Lock()
			ch := sh.held[k]
			delete(sh.held, k)
			sh.mu.Unlock()
			close(ch)
		}
	}
	for _, k := range keys {
		sh := s.shard(k)
		for {
			sh.mu.Lock()
			ch, busy := sh.held[k]
			if !busy {
				sh.held[k] = make(chan struct{})
				sh.mu.Unlock()
				break
			}
			sh.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				unlock()
				return nil, ctx.Err()
			}
		}
		taken++
	}
	return unlock, nil
}

// claim returns the pending record of k this process wrote or kept last, if
// it remembers it, and whether that record is volatile. Under k's lock it is
// k's record.
func (s *inproc) claim(k dedupe.Key) (rec ledger.Record, volatile, ok bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	m, ok := sh.claims[k]
	sh.mu.Unlock()
	return m.rec, m.volatile, ok
}

// room reports whether a volatile claim of k would be kept: k is remembered
// already, or its shard is under the bound. The caller holds k's lock; other
// keys may take the room meanwhile, so the bound is soft by the number of
// writes in flight.
func (s *inproc) room(k dedupe.Key) bool {
	sh := s.shard(k)
	sh.mu.Lock()
	_, ok := sh.claims[k]
	ok = ok || len(sh.claims) < inprocClaims
	sh.mu.Unlock()
	return ok
}

// wrote records rec as k's record, after the transaction that wrote it
// committed or, volatile, instead of writing it. The caller holds k's lock.
func (s *inproc) wrote(k dedupe.Key, rec *ledger.Record, volatile bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec.State != ledger.StatePending {
		delete(sh.claims, k)
		return
	}
	if _, ok := sh.claims[k]; ok || volatile || len(sh.claims) < inprocClaims {
		sh.claims[k] = memo{rec: *rec, volatile: volatile}
	}
}

// forget drops a durable record s remembers of k: a transaction on k failed,
// and k's record is whatever the DB holds. A volatile claim stays: the
// failed transaction did not change it. The caller holds k's lock.
func (s *inproc) forget(k dedupe.Key) {
	sh := s.shard(k)
	sh.mu.Lock()
	if m, ok := sh.claims[k]; ok && !m.volatile {
		delete(sh.claims, k)
	}
	sh.mu.Unlock()
}

// volatiles returns the volatile claims s keeps.
func (s *inproc) volatiles() map[dedupe.Key]ledger.Record {
	out := make(map[dedupe.Key]ledger.Record)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, m := range sh.claims {
			if m.volatile {
				out[k] = m.rec
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// inprocs holds the inproc of each open DB that has ledgers.
var inprocs struct {
	sync.Mutex
	m map[*badger.DB]*inprocRef
}

type inprocRef struct {
	s    *inproc
	refs int
}

// acquireInproc returns db's inproc, making it for the first ledger of db.
func acquireInproc(db *badger.DB) *inproc {
	inprocs.Lock()
	defer inprocs.Unlock()
	if inprocs.m == nil {
		inprocs.m = make(map[*badger.DB]*inprocRef)
	}
	r := inprocs.m[db]
	if r == nil {
		r = &inprocRef{s: newInproc()}
		inprocs.m[db] = r
	}
	r.refs++
	return r.s
}

// releaseInproc undoes one acquireInproc of db.
func releaseInproc(db *badger.DB) {
	inprocs.Lock()
	defer inprocs.Unlock()
	if r := inprocs.m[db]; r != nil {
		if r.refs--; r.refs == 0 {
			delete(inprocs.m, db)
		}
	}
}
