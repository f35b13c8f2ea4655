package badgerstore

import (
	"context"
	"encoding/binary"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// One process owns a Badger directory, so every write of a ledger record
// goes through the Ledgers of that process. They share an inproc per DB,
// which does four things:
//
//   - It serializes the writes of each key: a write takes the key's lock
//     before it reads the record and keeps it until its transaction has
//     committed, so no two transactions of the process ever work on one key
//     at once. (Badger's conflict detection stays on: it is no longer what
//     decides, but it still guards.)
//   - It remembers the pending records it wrote (claims and their
//     renewals). Under the key's lock the record it remembers is the
//     current one, so every later write of the key takes it from memory
//     instead of reading it back down Badger's skiplists: on a 2-core VM
//     that read was the largest single cost of a durable gate after the
//     fsyncs.
//   - It keeps the volatile claims (BeginOptions.Volatile): pending records
//     that exist in memory and in the claims journal only (journal.go),
//     never in the DB. A volatile claim is kept while there is room under
//     the bound; past it, the claim is written like any other.
//   - It tells this process's claims from those of the processes that held
//     the directory before it. A pending record found in the DB that this
//     incarnation did not write was written by a process that is gone (the
//     directory lock proves it): its lease is over whatever it says, and
//     the next Begin takes the work over at once instead of waiting it out.
//
// A record that is no longer pending (committed, failed) is forgotten, and
// so are durable claims whose lease ran out, once there are many (prune): a
// claim past its lease is taken over whoever wrote it. A transaction that
// failed leaves the key's durable memo marked stale: its record is read
// from the DB again, and it is still this process's claim. A volatile
// claim has no other copy and is kept.
type inproc struct {
	shards [inprocShards]inprocShard
	j      *journal // nil for a DB in memory

	maxVolatile int // inprocClaims; tests of this package set it lower

	// testBlocked is nil but in tests of this package, which set it to
	// learn that a caller waits for a key's lock.
	testBlocked func(dedupe.Key)
}

const inprocShards = 64

// inprocClaims bounds the volatile claims a shard keeps: about 64K in all,
// far more than are in flight. A volatile claim that finds no room is
// written.
const inprocClaims = 1024

// memo is a pending record the process wrote or keeps.
type memo struct {
	rec      ledger.Record
	volatile bool // rec is not in the DB
	stale    bool // a transaction on the key failed: read its record from the DB
}

type inprocShard struct {
	mu        sync.Mutex
	held      map[dedupe.Key]chan struct{} // closed when the key's lock is released
	claims    map[dedupe.Key]memo
	volatiles int // the memos that are volatile
	pruneAt   int // prune claims when they grow past this
	_         [64]byte
}

// minPrune is the fewest claims of a shard worth pruning.
const minPrune = 1024

func newInproc() *inproc {
	s := &inproc{maxVolatile: inprocClaims}
	for i := range s.shards {
		s.shards[i].held = make(map[dedupe.Key]chan struct{})
		s.shards[i].claims = make(map[dedupe.Key]memo)
		s.shards[i].pruneAt = minPrune
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
			if s.testBlocked != nil {
				s.testBlocked(k)
			}
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

// claim returns the pending record of k this process wrote or kept last,
// whether it is still k's record (valid: not stale), whether it is
// volatile, and whether this process claimed k at all (mine). Under k's
// lock a valid record is k's record.
func (s *inproc) claim(k dedupe.Key) (rec ledger.Record, valid, volatile, mine bool) {
	sh := s.shard(k)
	sh.mu.Lock()
	m, ok := sh.claims[k]
	sh.mu.Unlock()
	return m.rec, ok && !m.stale, m.volatile, ok
}

// room reports whether a volatile claim of k would be kept: k's claim is
// volatile already, or its shard keeps fewer than the bound. The caller
// holds k's lock; other keys may take the room meanwhile, so the bound is
// soft by the number of writes in flight.
func (s *inproc) room(k dedupe.Key) bool {
	sh := s.shard(k)
	sh.mu.Lock()
	m, ok := sh.claims[k]
	ok = ok && m.volatile || sh.volatiles < s.maxVolatile
	sh.mu.Unlock()
	return ok
}

// wrote records rec as k's record, after the transaction that wrote it
// committed or, volatile, instead of writing it. The caller holds k's lock.
func (s *inproc) wrote(k dedupe.Key, rec *ledger.Record, volatile bool, now time.Time) {
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if m, ok := sh.claims[k]; ok && m.volatile {
		sh.volatiles--
	}
	if rec.State != ledger.StatePending {
		delete(sh.claims, k)
		return
	}
	sh.claims[k] = memo{rec: *rec, volatile: volatile}
	if volatile {
		sh.volatiles++
	}
	if len(sh.claims) > sh.pruneAt {
		sh.prune(k, now)
	}
}

// prune forgets the durable claims whose lease ran out before now, but
// keep's: they are taken over whoever wrote them. The caller holds sh.mu.
func (sh *inprocShard) prune(keep dedupe.Key, now time.Time) {
	for k, m := range sh.claims {
		if k != keep && !m.volatile && !m.rec.LeaseUntil.After(now) {
			delete(sh.claims, k)
		}
	}
	sh.pruneAt = max(2*len(sh.claims), minPrune)
}

// forget marks the durable record s remembers of k stale: a transaction on
// k failed, and k's record is whatever the DB holds; the claim is still
// this process's. A volatile claim stays: the failed transaction did not
// change it. The caller holds k's lock.
func (s *inproc) forget(k dedupe.Key) {
	sh := s.shard(k)
	sh.mu.Lock()
	if m, ok := sh.claims[k]; ok && !m.volatile {
		m.stale = true
		sh.claims[k] = m
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

// journalSnapshot is the journal's entries for the volatile claims s keeps.
func (s *inproc) journalSnapshot() []journalEntry {
	var out []journalEntry
	for _, rec := range s.volatiles() {
		out = append(out, entryOf(&rec))
	}
	return out
}

func entryOf(rec *ledger.Record) journalEntry {
	return journalEntry{Key: rec.Key, Fingerprint: rec.Fingerprint, Token: rec.Token, Attempts: rec.Attempts, Created: rec.Created}
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

// acquireInproc returns db's inproc, making it for the first ledger of db;
// then first runs on it (to recover the claims journal and start its next
// file) before any other ledger of db can use it.
func acquireInproc(db *badger.DB, first func(*inproc) error) (*inproc, error) {
	inprocs.Lock()
	defer inprocs.Unlock()
	if inprocs.m == nil {
		inprocs.m = make(map[*badger.DB]*inprocRef)
	}
	r := inprocs.m[db]
	if r == nil {
		s := newInproc()
		if err := first(s); err != nil {
			return nil, err
		}
		r = &inprocRef{s: s}
		inprocs.m[db] = r
	}
	r.refs++
	return r.s, nil
}

// releaseInproc undoes one acquireInproc of db.
func releaseInproc(db *badger.DB) {
	inprocs.Lock()
	defer inprocs.Unlock()
	if r := inprocs.m[db]; r != nil {
		if r.refs--; r.refs == 0 {
			delete(inprocs.m, db)
			if r.s.j != nil {
				r.s.j.closeWith(r.s.journalSnapshot)
			}
		}
	}
}
