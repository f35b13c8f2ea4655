package window

import (
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
)

// Window defaults.
const (
	defaultCapacity = 1 << 20
	defaultTTL      = 10 * time.Minute
)

// errInvalidOptions is wrapped by the error New returns for options it
// cannot honour.
var errInvalidOptions = errors.New("window: invalid options")

// Options configures a Window. The zero value means the defaults.
type Options struct {
	// Capacity is the number of live keys the window holds without losing
	// any. It is rounded up to a multiple of 4, and to at least 1<<16 (a
	// 1 MiB table). The table takes 16 bytes per key of capacity. Past
	// it, adding a key evicts the oldest key among the ones it competes
	// with. The default is 1<<20 (16 MiB of table).
	//
	// On Linux a table of 2 MiB or more is mapped apart from the Go heap,
	// on transparent huge pages where the system allows them (lookups land
	// on random buckets; with 4 KiB pages most would also miss the TLB). It
	// counts in the process's resident memory but not in the Go heap, so
	// GOGC and GOMEMLIMIT do not see it, and it is unmapped once the Window
	// is garbage collected.
	Capacity int

	// TTL is how long a key is remembered after it was added: at least TTL and
	// at most TTL plus TTL/16 (time is kept in units of 1/32 to 1/64 of the
	// TTL), plus 50µs with the counter clock (see Now). The default is
	// 10 minutes. TTL must be at least 64ns.
	TTL time.Duration

	// Now, if set, tells the window the time, so that tests can move it;
	// it must never go back. The default is the process's monotonic clock.
	// Where the kernel keeps that clock with the CPU's time-stamp counter
	// (Linux on amd64 with the tsc clocksource), a window whose time unit is
	// 1ms or more (a TTL of about 34ms or more) reads the counter instead: a
	// third of the cost, and no fence between one operation and the next. It
	// is recalibrated against the monotonic clock every 10ms, never strays
	// from it by more than a few microseconds, and the window adds 50µs to
	// its TTL to cover that. On a machine whose counter is not to be
	// trusted, set Now to time.Now, or build with -tags oncegate_nocounter
	// (which keeps every window on the monotonic clock; bench/window
	// compares the two clocks so).
	Now func() time.Time
}

// minCapacity is the smallest capacity a Window rounds up to: 1 MiB of
// table. Below it the bits a slot spends on its timestamp would be too few.
const minCapacity = minBuckets * keysPerBucket

const (
	slotsPerBucket = 8                  // one 64-byte cache line of uint64 slots
	keysPerBucket  = slotsPerBucket / 2 // capacity: half the slots (see the design note)
	minBucketBits  = 14
	minBuckets     = 1 << minBucketBits
	maxBucketBits  = 40

	// Slot states, two bits beside the timestamp.
	statePending   = 1 // an add in progress: not yet a member
	stateCommitted = 2 // a member, live until its stamp ages past the TTL

	stripes = 32 // stat counters are striped to keep cores off one cache line
)

// Window is a fixed-memory set of 64-bit keys with time-based expiry: a
// dedupe window. SeenOrAdd reports whether a key was added within the TTL and
// adds it if not, atomically, so of many goroutines racing on one new key
// exactly one is told it is new.
//
// A Window is safe for concurrent use by multiple goroutines. Its operations
// take no locks and do not allocate; its memory is fixed by New. There is no
// background goroutine: expired slots are reclaimed by the operations that
// pass them, and a small slice of the table is swept each time the clock
// crosses a time unit.
//
// The one exception to lock-freedom is the catch-up after the window has seen
// no operation for a long time (at least 1/8 of the timestamp range: 4 to 8
// TTLs for the smallest table, 32 to 64 for one of a million keys): the first
// operation then clears expired slots from the whole table, and operations
// that arrive meanwhile wait for it.
//
// # Guarantees
//
// While no more than Capacity keys are live, no live key is lost: each key
// has 16 candidate slots in two buckets and goes to the emptier one
// (two-choice hashing at half load), where the fullest of millions of
// buckets holds 7 of its 8 slots (simulated; TestWindowCapacity fills
// tables to capacity and checks every key). Past Capacity, adding a key
// whose candidates are all live evicts the oldest of them and counts an
// eviction. A key is never reported present that was not added: a slot and
// its bucket together identify all 64 bits of the key.
//
// A Window is a cache. In front of a durable ledger it is only a fast path:
// add a key after the ledger has committed the work, Remove it when the
// effect failed, and expect it to be empty after a restart.
type Window struct {
	// Read on every operation, written once per time unit.
	swept atomic.Uint64 // highest time unit the sweep has reached
	reset atomic.Uint32 // 1 while a catch-up clears the table
	_     [64 - 12]byte

	buckets   []bucket
	nb        uint64 // number of buckets
	bbits     uint   // floor(log2(nb))
	stampBits uint   // bbits - 3
	stampMask uint64
	idMask    uint64 // the identity's bits of a word: tag<<1 | alt, shifted left by bbits-1
	altBit    uint64 // the alt bit of a word: set in a key's second bucket
	commitBit uint64 // stateCommitted in a word

	params    scanParams // scan's parameters but the key's and the time
	ttlUnits  int64      // live iff age in units <= ttlUnits
	unitShift uint       // a unit is 1<<unitShift nanoseconds
	period    uint64
	resetLag  uint64

	clock  func() time.Time // Options.Now
	base   time.Time        // with clock
	baseNs int64            // without: monotonic nanoseconds since monoEpoch
	fast   bool             // without clock, and reading the time-stamp counter (see monoNanos)

	// Counters: each costs a locked instruction, so new keys (the common
	// case) count nothing; Stats derives what it can from the table.
	hits, evictions, expired [stripes]paddedCounter

	// testClaimed is nil but in tests of this package, which set it on
	// their window to run between a pending claim and the rival check, to
	// stage the interleavings the check resolves.
	testClaimed func(l loc, target int)
}

type bucket [slotsPerBucket]atomic.Uint64

type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

// Stats is a snapshot of a Window's counters.
type Stats struct {
	Capacity  int    // keys the window holds without eviction; the table takes 16 bytes per key
	Live      int    // keys currently live (counted by scanning the table)
	Hits      uint64 // SeenOrAdd calls that found the key live
	Evictions uint64 // live keys pushed out because their slots were full
	Expired   uint64 // slots reclaimed after their key expired
}

// New returns a Window with the given options.
func New(opts Options) (*Window, error) {
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("%w: capacity %d is negative", errInvalidOptions, opts.Capacity)
	}
	if opts.TTL < 0 || (opts.TTL > 0 && opts.TTL < 64) {
		return nil, fmt.Errorf("%w: ttl %v must be at least 64ns", errInvalidOptions, opts.TTL)
	}
	if opts.Capacity == 0 {
		opts.Capacity = defaultCapacity
	}
	if opts.TTL == 0 {
		opts.TTL = defaultTTL
	}
	nb := max(uint64(minBuckets), (uint64(opts.Capacity)+keysPerBucket-1)/keysPerBucket)
	if nb >= 1<<maxBucketBits {
		return nil, fmt.Errorf("%w: capacity %d is too large", errInvalidOptions, opts.Capacity)
	}
	// bbits is how many bits of a key the bucket index stands for: a slot
	// stores the other 64-bbits.
	bbits := uint(63 - bits.LeadingZeros64(nb))
	table, release := allocTable(nb)
	w := &Window{
		buckets:   table,
		nb:        nb,
		bbits:     bbits,
		stampBits: bbits - 3,
		stampMask: 1<<(bbits-3) - 1,
		idMask:    ^uint64(0) << (bbits - 1),
		altBit:    1 << (bbits - 1),
		commitBit: stateCommitted << (bbits - 3),
		clock:     opts.Now,
	}
	// A unit is the largest power of two of nanoseconds that is at most
	// TTL/32, so a TTL spans 32 to 64 units and a unit costs a shift.
	w.unitShift = uint(63 - bits.LeadingZeros64(uint64(opts.TTL/32)))
	unit := int64(1) << w.unitShift
	ttl := int64(opts.TTL)
	if w.clock == nil && unit >= counterMinUnit && counterUsable() {
		// The counter's time may stray from the monotonic clock's by a few
		// microseconds; the slack keeps every key for at least TTL.
		w.fast = true
		ttl += int64(counterSlack)
	}
	w.ttlUnits = (ttl + unit - 1) / unit
	w.params = scanParams{
		idMask:    w.idMask,
		commitBit: w.commitBit,
		stampMask: w.stampMask,
		lo:        uint64(w.ttlUnits) + 1,
		span:      w.stampMask>>1 - uint64(w.ttlUnits),
	}
	wrap := uint64(1) << w.stampBits
	// Stamps are compared modulo wrap as signed ages. The sweep visits every
	// bucket once per period, and an idle gap of resetLag triggers a catch-up,
	// so no stamp still in the table is ever more than wrap/2 old.
	w.period = wrap / 8
	w.resetLag = wrap / 8
	if w.clock == nil {
		w.baseNs = w.monoNanos()
	} else {
		w.base = w.clock()
	}
	if release != nil {
		// The table is unmapped when w is unreachable. Every method that
		// touches the table keeps w alive until it is done with it
		// (runtime.KeepAlive), so no pointer into the table outlives w.
		runtime.AddCleanup(w, func(release func()) { release() }, release)
	}
	return w, nil
}

// capacity returns the number of live keys the window holds without eviction.
func (w *Window) capacity() int { return int(w.nb * keysPerBucket) }

// bytes returns the memory held by the window's table.
func (w *Window) bytes() int { return int(w.nb * slotsPerBucket * 8) }

// clockSource names the clock the window reads: "counter" (the CPU's
// time-stamp counter, see Options.Now), "monotonic" (the process's
// monotonic clock) or "option" (Options.Now).
func (w *Window) clockSource() string {
	switch {
	case w.clock != nil:
		return "option"
	case w.fast:
		return "counter"
	}
	return "monotonic"
}

// ttl returns how long a key is remembered, rounded to the window's time unit.
func (w *Window) ttl() time.Duration { return time.Duration(w.ttlUnits << w.unitShift) }

// mix is a bijection on uint64 (the murmur3 finalizer), so distinct keys stay
// distinct and clustered keys spread over the table.
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// loc is where a key may live: two buckets and the identity its slots carry.
type loc struct {
	b1, b2 *bucket
	id     uint64 // the identity bits of a word for the key in b1: tag, alt bit 0
	stripe int
}

func (w *Window) locate(k uint64) loc {
	m := mix(k)
	// The first bucket is m scaled to [0, nb): keys in one bucket lie in an
	// interval of m shorter than 2^(64-bbits), so their low 64-bbits bits,
	// the tag, tell them apart.
	h1, _ := bits.Mul64(m, w.nb)
	tag := m & (1<<(64-w.bbits) - 1)
	// The second bucket is a non-zero, tag-derived step away from the
	// first, so it differs from it and the pair (bucket, tag) still names
	// one key.
	step, _ := bits.Mul64(tag*0x9e3779b97f4a7c15, w.nb-1)
	h2 := h1 + step + 1
	if h2 >= w.nb {
		h2 -= w.nb
	}
	return loc{b1: &w.buckets[h1], b2: &w.buckets[h2], id: tag << w.bbits, stripe: int(h1 % stripes)}
}

// slot returns candidate p (0..15) of l and the identity a slot there carries
// for l's key. Candidates are ordered: this order decides which of two racing
// adds of one key survives.
func (w *Window) slot(l *loc, p int) (*atomic.Uint64, uint64) {
	if p < slotsPerBucket {
		return &l.b1[p], l.id
	}
	return &l.b2[p-slotsPerBucket], l.id | w.altBit
}

// word returns the slot word of identity id (a loc's id, with or without
// the alt bit), state and stamp.
func (w *Window) word(id uint64, state uint64, stamp uint64) uint64 {
	return id | state<<w.stampBits | stamp&w.stampMask
}

func (w *Window) state(x uint64) uint64 { return x >> w.stampBits & 3 }

// age returns how many units ago x was stamped, as a signed number: a stamp
// written by a goroutine whose clock read came later than t is slightly
// negative.
func (w *Window) age(x uint64, t uint64) int64 {
	d := (t - x) & w.stampMask
	if d > w.stampMask>>1 {
		return int64(d) - int64(w.stampMask) - 1
	}
	return int64(d)
}

func (w *Window) live(x uint64, t uint64) bool { return w.age(x, t) <= w.ttlUnits }

// now returns the current time unit, having made sure the sweep has caught up
// with it.
func (w *Window) now() uint64 {
	for {
		var d time.Duration
		if w.clock == nil {
			d = time.Duration(w.monoNanos() - w.baseNs)
		} else {
			d = w.clock().Sub(w.base)
		}
		t := uint64(d) >> w.unitShift
		if d < 0 {
			t = 0
		}
		s := w.swept.Load()
		if t <= s && w.reset.Load() == 0 {
			return t
		}
		if w.advance(t) {
			return t
		}
	}
}

// monoNanos returns the monotonic nanoseconds since monoEpoch, from the
// time-stamp counter if w reads it.
func (w *Window) monoNanos() int64 {
	if w.fast {
		return monoNanos()
	}
	return int64(time.Since(monoEpoch))
}

// advance moves the sweep to unit t. It reports false if the caller must read
// the clock again (a catch-up ran or is running).
func (w *Window) advance(t uint64) bool {
	if w.reset.Load() != 0 {
		for w.reset.Load() != 0 {
			runtime.Gosched()
		}
		return false
	}
	for {
		s := w.swept.Load()
		if t <= s {
			return true
		}
		if t-s >= w.resetLag {
			w.catchUp(s, t)
			return false
		}
		if w.swept.CompareAndSwap(s, t) {
			w.sweep(s, t)
			return true
		}
	}
}

// sweep clears expired slots in the buckets whose turn falls in units (s, t].
func (w *Window) sweep(s, t uint64) {
	if t-s >= w.period {
		w.sweepRange(0, w.nb, t)
		return
	}
	from, to := w.turn(s+1), w.turn(t+1)
	if from <= to {
		w.sweepRange(from, to, t)
	} else {
		w.sweepRange(from, w.nb, t)
		w.sweepRange(0, to, t)
	}
}

// turn returns the first bucket swept in time unit x.
func (w *Window) turn(x uint64) uint64 {
	hi, lo := bits.Mul64(x%w.period, w.nb)
	q, _ := bits.Div64(hi, lo, w.period)
	return q
}

func (w *Window) sweepRange(from, to uint64, t uint64) {
	var n uint64
	for i := from; i < to; i++ {
		b := &w.buckets[i]
		for j := range b {
			x := b[j].Load()
			if x != 0 && w.state(x) == stateCommitted && !w.live(x, t) && b[j].CompareAndSwap(x, 0) {
				n++
			}
		}
	}
	if n > 0 {
		w.expired[0].n.Add(n)
	}
}

// catchUp clears the table after an idle gap. Every slot stamped at or before
// s is older than resetLag units and so expired; slots stamped after s belong
// to operations that ran concurrently and are kept.
func (w *Window) catchUp(s, t uint64) {
	if !w.reset.CompareAndSwap(0, 1) {
		return
	}
	defer w.reset.Store(0)
	if w.swept.Load() != s {
		return // someone else caught up first
	}
	var n uint64
	for i := range w.buckets {
		b := &w.buckets[i]
		for j := range b {
			x := b[j].Load()
			if x != 0 && w.state(x) == stateCommitted && w.age(x, s) >= 0 && b[j].CompareAndSwap(x, 0) {
				n++
			}
		}
	}
	w.expired[0].n.Add(n)
	for {
		cur := w.swept.Load()
		if cur >= t || w.swept.CompareAndSwap(cur, t) {
			return
		}
	}
}

// SeenOrAdd reports whether k was added within the TTL. If it was not, it adds
// k and returns false. Of any number of goroutines calling SeenOrAdd with the
// same new key at once, exactly one gets false.
func (w *Window) SeenOrAdd(k uint64) bool { return w.insert(k, false) }

// Add adds k, or restarts its TTL if it is already present.
func (w *Window) Add(k uint64) { w.insert(k, true) }

func (w *Window) insert(k uint64, refresh bool) bool {
	t := w.now()
	l := w.locate(k)
	seen := w.insertAt(t, l, refresh)
	runtime.KeepAlive(w) // see New: the table lives as long as w
	return seen
}

// touched and touchedSink give the values of SeenOrAddBatch's prefetching
// loads a use.
const touched = 0x9e3779b97f4a7c15

var touchedSink atomic.Uint64

// batchSize is how many keys SeenOrAddBatch looks up at once: enough
// independent cache misses in flight to keep the memory system busy.
const batchSize = 16

// SeenOrAddBatch calls SeenOrAdd for each of keys in order, setting seen[i]
// to its result, and returns how many were seen. seen must be at least as
// long as keys. It is faster than a loop over SeenOrAdd because it first
// touches the buckets of up to 16 keys at once, so their cache misses
// overlap instead of following one another, and reads the clock once per
// 16 keys: use it for the batches a JetStream pull consumer fetches.
func (w *Window) SeenOrAddBatch(keys []uint64, seen []bool) int {
	seen = seen[:len(keys)]
	var locs [batchSize]loc
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), batchSize)
		t := w.now()
		var acc uint64
		for i := 0; i < c; i++ {
			locs[i] = w.locate(keys[i])
			// Touch both buckets; the loads are independent, so the CPU
			// issues them all before the first one returns.
			acc += locs[i].b1[0].Load() ^ locs[i].b2[0].Load()
		}
		if acc == touched {
			// Practically never; it keeps the compiler from dropping the
			// loads, whose values are otherwise unused.
			touchedSink.Add(1)
		}
		for i := 0; i < c; i++ {
			seen[i] = w.insertAt(t, locs[i], false)
			if seen[i] {
				n++
			}
		}
		keys, seen = keys[c:], seen[c:]
	}
	runtime.KeepAlive(w)
	return n
}

// insertAt is SeenOrAdd (or, with refresh, Add) of the key at l at time t.
func (w *Window) insertAt(t uint64, l loc, refresh bool) bool {
retry:
	// Phase 1: read the 16 candidates at once (the two cache misses
	// overlap), then find k among them, or where it could go.
	var xs [2 * slotsPerBucket]uint64
	l.load(&xs)
	match, free := w.scan(&l, &xs, t)
	if match != 0 {
		p := bits.TrailingZeros32(match)
		s, id := w.slot(&l, p)
		x := xs[p]
		if w.state(x) == statePending {
			// Another goroutine is adding k right now: it, or a rival
			// with an earlier slot, will report k new.
			w.hits[l.stripe].n.Add(1)
			return true
		}
		if w.live(x, t) {
			if refresh && w.age(x, t) > 0 && !s.CompareAndSwap(x, w.word(id, stateCommitted, t)) {
				goto retry
			}
			if !refresh {
				w.hits[l.stripe].n.Add(1)
			}
			return true
		}
		// k expired: stamp it anew in place.
		if !s.CompareAndSwap(x, w.word(id, stateCommitted, t)) {
			goto retry
		}
		w.expired[l.stripe].n.Add(1)
		return false
	}

	// Phase 2: claim a slot with a pending add: the first free slot of the
	// bucket with more free slots, or else the oldest live key's slot. The
	// claim is a CAS from the word phase 1 read, so a slot that changed
	// meanwhile is not taken.
	evict := false
	var target int
	switch f1, f2 := bits.OnesCount8(uint8(free)), bits.OnesCount8(uint8(free>>slotsPerBucket)); {
	case f1 >= f2 && f1 > 0:
		target = bits.TrailingZeros32(free)
	case f2 > 0:
		target = bits.TrailingZeros32(free >> slotsPerBucket << slotsPerBucket)
	default:
		target = w.oldest(&xs, t)
		if target < 0 {
			// All 16 candidates hold adds in progress.
			runtime.Gosched()
			goto retry
		}
		evict = true
	}
	ts, tid := w.slot(&l, target)
	old := xs[target]
	pending := w.word(tid, statePending, t)
	if !ts.CompareAndSwap(old, pending) {
		goto retry
	}
	switch {
	case evict:
		w.evictions[l.stripe].n.Add(1)
	case old != 0:
		w.expired[l.stripe].n.Add(1)
	}

	if w.testClaimed != nil {
		w.testClaimed(l, target)
	}

	// Phase 3: a rival add of k may have claimed another candidate while we
	// looked. The candidate order decides: a committed k or an earlier
	// pending k wins and we withdraw; a later pending k is aborted. The
	// lines are in cache now. In the common case no candidate changed since
	// phase 1, which found no k among them, and there is nothing to decide.
	xs[target] = pending
	for !l.unchanged(&xs) {
		l.load(&xs)
		xs[target] = 0
		match, _ := w.scan(&l, &xs, t)
		if match == 0 {
			break
		}
		p := bits.TrailingZeros32(match)
		s, _ := w.slot(&l, p)
		x := xs[p]
		if st := w.state(x); (st == stateCommitted && w.live(x, t)) || (st == statePending && p < target) {
			ts.CompareAndSwap(pending, 0) // fails only if a rival aborted us
			w.hits[l.stripe].n.Add(1)
			return true
		}
		// A later pending rival, or an expired copy of k: remove it, then
		// look again.
		s.CompareAndSwap(x, 0)
		xs[target] = pending
	}

	// Phase 4: commit. This fails only if an earlier rival aborted us; it
	// then reports k new.
	if !ts.CompareAndSwap(pending, w.word(tid, stateCommitted, t)) {
		w.hits[l.stripe].n.Add(1)
		return true
	}
	return false
}

// unchanged reports whether the 16 candidate slots of l still hold xs.
func (l *loc) unchanged(xs *[2 * slotsPerBucket]uint64) bool {
	b1, b2 := l.b1, l.b2
	d := b1[0].Load() ^ xs[0] | b2[0].Load() ^ xs[8]
	d |= b1[1].Load() ^ xs[1] | b2[1].Load() ^ xs[9]
	d |= b1[2].Load() ^ xs[2] | b2[2].Load() ^ xs[10]
	d |= b1[3].Load() ^ xs[3] | b2[3].Load() ^ xs[11]
	d |= b1[4].Load() ^ xs[4] | b2[4].Load() ^ xs[12]
	d |= b1[5].Load() ^ xs[5] | b2[5].Load() ^ xs[13]
	d |= b1[6].Load() ^ xs[6] | b2[6].Load() ^ xs[14]
	d |= b1[7].Load() ^ xs[7] | b2[7].Load() ^ xs[15]
	return d == 0
}

// load reads the 16 candidate slots of l into xs.
func (l *loc) load(xs *[2 * slotsPerBucket]uint64) {
	b1, b2 := l.b1, l.b2
	// Interleaved, so that both buckets' misses are in flight together.
	xs[0], xs[8] = b1[0].Load(), b2[0].Load()
	xs[1], xs[9] = b1[1].Load(), b2[1].Load()
	xs[2], xs[10] = b1[2].Load(), b2[2].Load()
	xs[3], xs[11] = b1[3].Load(), b2[3].Load()
	xs[4], xs[12] = b1[4].Load(), b2[4].Load()
	xs[5], xs[13] = b1[5].Load(), b2[5].Load()
	xs[6], xs[14] = b1[6].Load(), b2[6].Load()
	xs[7], xs[15] = b1[7].Load(), b2[7].Load()
}

// scanParams is what classifying a key's 16 candidate words needs: the
// identities the key's words carry in its two buckets, and the numbers that
// tell a free slot. Its layout is read by scanAVX2.
type scanParams struct {
	idMask    uint64 // the identity bits of a word
	id1, id2  uint64 // the key's identity in b1 and in b2
	commitBit uint64 // stateCommitted in a word
	t         uint64 // the current time unit
	stampMask uint64
	lo        uint64 // a committed slot is free if its age a has lo <= a < lo+span:
	span      uint64 // older than the TTL, and not stamped in the future
}

// scan classifies the candidate words xs of the key at l at time t. match
// has a bit per candidate that holds the key; free a bit per candidate that
// is empty or holds an expired key. Which slots are free is as good as
// random, so both are computed without branches; on amd64 with AVX2 four
// words at a time (see scan_amd64.s). Together they are most of the
// instructions of a SeenOrAdd.
func (w *Window) scan(l *loc, xs *[2 * slotsPerBucket]uint64, t uint64) (match, free uint32) {
	// The fields that do not change come from w.params, written once: a
	// struct just built from 8-byte stores and then copied in 16-byte loads
	// (as the compiler does with a composite literal) stalls the load on
	// each store it cannot forward, which cost a tenth of a SeenOrAdd.
	p := w.params
	p.id1, p.id2, p.t = l.id, l.id|w.altBit, t
	if useAVX2 {
		return scanAVX2(xs, &p)
	}
	return scanGeneric(xs, &p)
}

// scanGeneric is scan in Go.
func scanGeneric(xs *[2 * slotsPerBucket]uint64, p *scanParams) (match, free uint32) {
	for i, x := range xs {
		id := p.id1
		if i >= slotsPerBucket {
			id = p.id2
		}
		empty := b2u(x == 0)
		// An empty slot (0) has the identity of the key whose tag is 0: it
		// must not match.
		match |= b2u(x&p.idMask == id) &^ empty << i
		dead := b2u(x&p.commitBit != 0) & b2u((p.t-x)&p.stampMask-p.lo < p.span)
		free |= (empty | dead) << i
	}
	return match, free
}

// oldest returns the candidate holding the live key stamped longest ago, or
// -1 if every candidate holds an add in progress.
func (w *Window) oldest(xs *[2 * slotsPerBucket]uint64, t uint64) int {
	p, oldest := -1, int64(0)
	for i, x := range xs {
		if x != 0 && w.state(x) == stateCommitted {
			if a := w.age(x, t); p < 0 || a > oldest {
				p, oldest = i, a
			}
		}
	}
	return p
}

// b2u converts a bool to 0 or 1 without a branch.
func b2u(b bool) uint32 {
	var u uint32
	if b {
		u = 1
	}
	return u
}

// Contains reports whether k was added within the TTL. It does not add k.
func (w *Window) Contains(k uint64) bool {
	t := w.now()
	l := w.locate(k)
	found := false
	for p := 0; p < 2*slotsPerBucket && !found; p++ {
		s, id := w.slot(&l, p)
		x := s.Load()
		found = x != 0 && x&w.idMask == id && w.state(x) == stateCommitted && w.live(x, t)
	}
	runtime.KeepAlive(w)
	return found
}

// Remove removes k and reports whether it was live. Use it when the work a
// key stood for failed and must be allowed to run again.
func (w *Window) Remove(k uint64) bool {
	t := w.now()
	l := w.locate(k)
	removed := false
	for p := 0; p < 2*slotsPerBucket; p++ {
		s, id := w.slot(&l, p)
		x := s.Load()
		if x != 0 && x&w.idMask == id && w.state(x) == stateCommitted && s.CompareAndSwap(x, 0) {
			removed = removed || w.live(x, t)
		}
	}
	runtime.KeepAlive(w)
	return removed
}

// Stats returns the window's counters. It counts live keys by scanning the
// table, which takes time in proportion to Capacity: call it from a metrics
// scrape, not per operation.
func (w *Window) Stats() Stats {
	t := w.now()
	st := Stats{Capacity: w.capacity()}
	for i := range w.buckets {
		b := &w.buckets[i]
		for j := range b {
			if x := b[j].Load(); x != 0 && w.state(x) == stateCommitted && w.live(x, t) {
				st.Live++
			}
		}
	}
	for i := 0; i < stripes; i++ {
		st.Hits += w.hits[i].n.Load()
		st.Evictions += w.evictions[i].n.Load()
		st.Expired += w.expired[i].n.Load()
	}
	return st
}
