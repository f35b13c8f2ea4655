package window

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock { return &fakeClock{} }

func (c *fakeClock) Now() time.Time                        { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration)               { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)                       { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Elapsed(since time.Time) time.Duration { return c.Now().Sub(since) }

func newTestWindow(t testing.TB, capacity int, ttl time.Duration, c *fakeClock) *Window {
	t.Helper()
	opts := Options{Capacity: capacity, TTL: ttl}
	if c != nil {
		opts.Now = c.Now
	}
	w, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return w
}

func TestWindowOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts Options
		ok   bool
	}{
		{"zero means defaults", Options{}, true},
		{"negative capacity", Options{Capacity: -1}, false},
		{"negative ttl", Options{TTL: -time.Second}, false},
		{"ttl below 64ns", Options{TTL: 10}, false},
		{"tiny capacity rounds up", Options{Capacity: 1, TTL: time.Second}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, err := New(tt.opts)
			if tt.ok != (err == nil) {
				t.Fatalf("New(%+v) error = %v; want ok=%v", tt.opts, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errInvalidOptions) {
				t.Errorf("New(%+v) error = %v; want it to wrap errInvalidOptions", tt.opts, err)
			}
			if err == nil && w.capacity() < max(tt.opts.Capacity, minCapacity) {
				t.Errorf("Capacity() = %d; want >= %d", w.capacity(), max(tt.opts.Capacity, minCapacity))
			}
		})
	}
	w := newTestWindow(t, 0, 0, nil)
	if got, want := w.capacity(), defaultCapacity; got != want {
		t.Errorf("default Capacity() = %d; want %d", got, want)
	}
	if got, want := w.ttl(), defaultTTL; got < want || got > want+want/16 {
		t.Errorf("default TTL() = %v; want within [%v, %v]", got, want, want+want/16)
	}
	if got := w.bytes() / w.capacity(); got != 16 {
		t.Errorf("bytes per key at capacity = %d; want 16", got)
	}
}

func TestWindowBasic(t *testing.T) {
	w := newTestWindow(t, 0, time.Minute, newFakeClock())
	for _, k := range []uint64{0, 1, 42, 1 << 63, ^uint64(0)} {
		if w.Contains(k) {
			t.Errorf("Contains(%#x) on empty window = true", k)
		}
		if w.SeenOrAdd(k) {
			t.Errorf("first SeenOrAdd(%#x) = true; want false", k)
		}
		if !w.SeenOrAdd(k) {
			t.Errorf("second SeenOrAdd(%#x) = false; want true", k)
		}
		if !w.Contains(k) {
			t.Errorf("Contains(%#x) after add = false", k)
		}
		if !w.Remove(k) {
			t.Errorf("Remove(%#x) = false; want true", k)
		}
		if w.Contains(k) || w.Remove(k) {
			t.Errorf("key %#x still present after Remove", k)
		}
		w.Add(k)
		if !w.Contains(k) {
			t.Errorf("Contains(%#x) after Add = false", k)
		}
	}
	st := w.Stats()
	if st.Live != 5 || st.Hits != 5 || st.Evictions != 0 {
		t.Errorf("Stats() = %+v; want Live 5, Hits 5, Evictions 0", st)
	}
}

func TestWindowExpiry(t *testing.T) {
	const ttl = time.Second
	c := newFakeClock()
	w := newTestWindow(t, 0, ttl, c)
	for _, start := range []time.Duration{0, 123456789, 7 * time.Hour} {
		c.Set(time.Unix(0, int64(start)))
		k := uint64(start) + 1
		if w.SeenOrAdd(k) {
			t.Fatalf("SeenOrAdd(%d) at %v = true; want false", k, start)
		}
		c.Advance(ttl - 1)
		if !w.Contains(k) || !w.SeenOrAdd(k) {
			t.Fatalf("key %d forgotten before its TTL", k)
		}
		c.Advance(ttl/16 + 2)
		if w.Contains(k) {
			t.Fatalf("key %d still present after TTL + TTL/16", k)
		}
		if w.SeenOrAdd(k) {
			t.Fatalf("SeenOrAdd(%d) after expiry = true; want false (re-added)", k)
		}
		if !w.SeenOrAdd(k) {
			t.Fatalf("SeenOrAdd(%d) right after re-add = false", k)
		}
		// Add restarts the TTL; SeenOrAdd does not.
		c.Advance(ttl / 2)
		w.Add(k)
		c.Advance(ttl/2 + ttl/4)
		if !w.Contains(k) {
			t.Fatalf("key %d expired although Add restarted its TTL", k)
		}
	}
}

// TestWindowIdleGap jumps the clock by gaps around and past the timestamp
// range, where a careless design would see ancient stamps as fresh.
func TestWindowIdleGap(t *testing.T) {
	const ttl = time.Second
	c := newFakeClock()
	w := newTestWindow(t, 0, ttl, c)
	unit := time.Duration(1) << w.unitShift
	wrap := time.Duration(w.stampMask+1) * unit
	keys := make([]uint64, 1000)
	for i := range keys {
		keys[i] = rand.Uint64()
	}
	for _, gap := range []time.Duration{2 * ttl, wrap / 8, wrap / 2, wrap - unit, wrap, wrap + unit, 3 * wrap, 1000 * wrap} {
		for _, k := range keys {
			w.SeenOrAdd(k)
		}
		c.Advance(gap)
		for _, k := range keys {
			if w.Contains(k) {
				t.Fatalf("after an idle gap of %v (wrap %v), key %#x is reported live", gap, wrap, k)
			}
		}
		if live := w.Stats().Live; live != 0 {
			t.Fatalf("after an idle gap of %v, Stats().Live = %d; want 0", gap, live)
		}
	}
}

// TestWindowSweep checks that slots of keys nobody asks about again are
// reclaimed as time passes, without any operation touching them.
func TestWindowSweep(t *testing.T) {
	const ttl = time.Second
	c := newFakeClock()
	w := newTestWindow(t, 0, ttl, c)
	n := w.capacity() / 2
	for i := 0; i < n; i++ {
		w.SeenOrAdd(uint64(i))
	}
	// Step through more than a full sweep period, one unit at a time, with
	// one unrelated operation per unit.
	unit := time.Duration(1) << w.unitShift
	for i := uint64(0); i < w.period+uint64(w.ttlUnits)+2; i++ {
		c.Advance(unit)
		w.Contains(1 << 62)
	}
	occupied := 0
	for i := range w.buckets {
		for j := range w.buckets[i] {
			if w.buckets[i][j].Load() != 0 {
				occupied++
			}
		}
	}
	if occupied != 0 {
		t.Errorf("%d slots still occupied a full sweep period after all keys expired", occupied)
	}
	if st := w.Stats(); st.Expired != uint64(n) {
		t.Errorf("Stats().Expired = %d; want %d", st.Expired, n)
	}
}

// TestWindowCapacity fills the window to its capacity with random keys and
// checks that none is lost.
func TestWindowCapacity(t *testing.T) {
	capacities := []int{minCapacity, 1 << 20}
	if raceEnabled || testing.Short() {
		capacities = capacities[:1]
	}
	for _, capacity := range capacities {
		w := newTestWindow(t, capacity, time.Hour, newFakeClock())
		rng := rand.New(rand.NewPCG(uint64(capacity), 7))
		keys := make([]uint64, w.capacity())
		for i := range keys {
			keys[i] = rng.Uint64()
			if w.SeenOrAdd(keys[i]) {
				t.Fatalf("capacity %d: SeenOrAdd of new key %d/%d = true", capacity, i, len(keys))
			}
		}
		missing := 0
		for _, k := range keys {
			if !w.Contains(k) {
				missing++
			}
		}
		st := w.Stats()
		if missing != 0 || st.Evictions != 0 || st.Live != len(keys) {
			t.Errorf("capacity %d: %d keys missing, Stats() = %+v; want none missing, no evictions, Live %d",
				w.capacity(), missing, st, len(keys))
		}
	}
}

// TestWindowOverCapacity adds twice the capacity over time and checks that
// what is evicted is old: the most recent quarter of the keys all survive.
func TestWindowOverCapacity(t *testing.T) {
	c := newFakeClock()
	w := newTestWindow(t, minCapacity, time.Hour, c)
	n := 2 * w.capacity()
	keys := make([]uint64, n)
	for i := range keys {
		keys[i] = rand.Uint64()
		w.SeenOrAdd(keys[i])
		if i%1024 == 0 {
			c.Advance(time.Minute / 16)
		}
	}
	st := w.Stats()
	if st.Evictions == 0 {
		t.Fatalf("Stats().Evictions = 0 after adding %d keys to capacity %d", n, w.capacity())
	}
	if got, want := st.Live+int(st.Evictions), n; got != want {
		t.Errorf("Live %d + Evictions %d = %d; want %d", st.Live, st.Evictions, got, want)
	}
	lost := 0
	for _, k := range keys[n-n/4:] {
		if !w.Contains(k) {
			lost++
		}
	}
	if lost != 0 {
		t.Errorf("%d of the newest %d keys were evicted; want oldest first", lost, n/4)
	}
}

// TestWindowRaceOneKey has many goroutines add one key at once: exactly one
// must be told the key is new.
func TestWindowRaceOneKey(t *testing.T) {
	w := newTestWindow(t, 0, time.Hour, nil)
	const goroutines = 64
	for round := 0; round < 200; round++ {
		k := rand.Uint64()
		var fresh atomic.Int32
		var start, done sync.WaitGroup
		start.Add(1)
		for g := 0; g < goroutines; g++ {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				if !w.SeenOrAdd(k) {
					fresh.Add(1)
				}
			}()
		}
		start.Done()
		done.Wait()
		if n := fresh.Load(); n != 1 {
			t.Fatalf("round %d: %d goroutines got false from SeenOrAdd(%#x); want exactly 1", round, n, k)
		}
	}
}

// TestWindowRaceManyKeys has goroutines add overlapping key sets in different
// orders, on a small table so that keys compete for slots, then again after
// the keys expired: in each round every key is new to exactly one caller.
func TestWindowRaceManyKeys(t *testing.T) {
	c := newFakeClock()
	w := newTestWindow(t, minCapacity, time.Second, c)
	goroutines := 8 * runtime.GOMAXPROCS(0)
	keys := make([]uint64, w.capacity()/2)
	for i := range keys {
		keys[i] = rand.Uint64()
	}
	if testing.Short() {
		keys = keys[:4096]
	}
	for round := 0; round < 3; round++ {
		fresh := make([]atomic.Int32, len(keys))
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(round)))
				order := rng.Perm(len(keys))
				for _, i := range order {
					if !w.SeenOrAdd(keys[i]) {
						fresh[i].Add(1)
					}
				}
			}(uint64(g))
		}
		wg.Wait()
		for i := range fresh {
			if n := fresh[i].Load(); n != 1 {
				t.Fatalf("round %d: key %d was new to %d callers; want 1", round, i, n)
			}
		}
		if st := w.Stats(); st.Live != len(keys) || st.Evictions != 0 {
			t.Fatalf("round %d: Stats() = %+v; want Live %d and no evictions", round, st, len(keys))
		}
		c.Advance(2 * time.Second) // every key expires
	}
}

// TestWindowRaceWithRemove mixes adds, lookups and removes with a clock that
// moves while they run, so that keys expire and slots are swept under the
// operations' feet; it looks for races (run it with -race) and checks that
// the counters stay consistent. Time moves with the operations, not with the
// wall clock, so that a slow run (-race) sees the same amount of expiry.
func TestWindowRaceWithRemove(t *testing.T) {
	c := newFakeClock()
	w := newTestWindow(t, minCapacity, time.Millisecond, c)
	var workers sync.WaitGroup
	for g := 0; g < 4; g++ {
		workers.Add(1)
		go func(g int) {
			defer workers.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			n := 50000
			if raceEnabled {
				n = 10000
			}
			for i := 0; i < n; i++ {
				c.Advance(250 * time.Nanosecond)
				k := rng.Uint64N(4096)
				switch rng.IntN(4) {
				case 0:
					w.Remove(k)
				case 1:
					w.Contains(k)
				case 2:
					w.Add(k)
				default:
					w.SeenOrAdd(k)
				}
			}
		}(g)
	}
	workers.Wait()
	if st := w.Stats(); st.Live > 4096 {
		t.Errorf("Stats().Live = %d; want at most the 4096 distinct keys", st.Live)
	}
}

func TestWindowNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	w := newTestWindow(t, 0, time.Minute, nil)
	var k uint64
	allocs := testing.AllocsPerRun(10000, func() {
		k++
		w.SeenOrAdd(k)
		w.SeenOrAdd(k)
		w.Contains(k)
	})
	if allocs != 0 {
		t.Errorf("SeenOrAdd/Contains allocate %v times per run; want 0", allocs)
	}
}

// TestWindowRaceWithChurn races adds of the same keys while other keys
// sharing their buckets come and go, so that racing adds see different free
// slots and claim different ones: the case the rival check exists for.
func TestWindowRaceWithChurn(t *testing.T) {
	w := newTestWindow(t, minCapacity, time.Hour, nil)
	fillers := make([]uint64, w.capacity()/2)
	for i := range fillers {
		fillers[i] = rand.Uint64()
		w.SeenOrAdd(fillers[i])
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			for range 64 {
				k := fillers[rng.IntN(len(fillers))]
				if rng.IntN(2) == 0 {
					w.Remove(k)
				} else {
					w.Add(k)
				}
			}
		}
	}()
	defer func() { close(stop); churn.Wait() }()

	// Fillers and one round's keys together stay within capacity (each round
	// removes its keys at the end): no key may be evicted, so each must be
	// new exactly once.
	rounds, perRound := 400, 2048
	if raceEnabled || testing.Short() {
		rounds = 40
	}
	for round := 0; round < rounds; round++ {
		keys := make([]uint64, perRound)
		for i := range keys {
			keys[i] = rand.Uint64()
		}
		fresh := make([]atomic.Int32, len(keys))
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for j := range keys {
					i := j
					if g%2 == 1 {
						i = len(keys) - 1 - j
					}
					if !w.SeenOrAdd(keys[i]) {
						fresh[i].Add(1)
					}
				}
			}(g)
		}
		wg.Wait()
		for i := range fresh {
			if n := fresh[i].Load(); n != 1 {
				t.Fatalf("round %d: key %d was new to %d callers; want 1", round, i, n)
			}
			w.Remove(keys[i])
		}
	}
}

// TestWindowRivalCheck stages, between an add's claim and its rival check,
// each kind of rival a racing add can leave in another candidate slot.
func TestWindowRivalCheck(t *testing.T) {
	for _, tt := range []struct {
		name      string
		rival     func(w *Window, target int) (p int, state uint64)
		wantSeen  bool
		wantRival bool // the rival's slot still holds k afterwards
	}{
		{"later pending rival is aborted", func(w *Window, target int) (int, uint64) { return 15, statePending }, false, false},
		{"earlier pending rival wins", func(w *Window, target int) (int, uint64) { return target - 1, statePending }, true, true},
		{"committed rival wins", func(w *Window, target int) (int, uint64) { return 15, stateCommitted }, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeClock()
			c.Advance(time.Hour)
			w := newTestWindow(t, 0, time.Minute, c)
			const k = 12345
			l := w.locate(k)
			// Occupy the first slot of each bucket with other keys' pending
			// adds, so the add claims slot 1 and slot 0 is free for a rival.
			other := uint64(1<<3) << w.bbits // another key's identity
			l.b1[0].Store(w.word(other, statePending, 0))
			l.b2[0].Store(w.word(other|w.altBit, statePending, 0))
			rivalP := -1
			w.testClaimed = func(hl loc, target int) {
				w.testClaimed = nil
				p, state := tt.rival(w, target)
				if p == target-1 {
					p = 0 // the free slot before the claim in its bucket
					if target >= slotsPerBucket {
						p = slotsPerBucket
					}
				}
				s, id := w.slot(&hl, p)
				s.Store(w.word(id, state, uint64(c.Now().Sub(w.base))>>w.unitShift))
				rivalP = p
			}
			if got := w.SeenOrAdd(k); got != tt.wantSeen {
				t.Errorf("SeenOrAdd = %v; want %v", got, tt.wantSeen)
			}
			rs, rid := w.slot(&l, rivalP)
			x := rs.Load()
			got := x != 0 && x&w.idMask == rid
			if got != tt.wantRival {
				t.Errorf("rival slot holds k afterwards = %v; want %v", got, tt.wantRival)
			}
			// Whatever happened, k is present exactly once.
			copies := 0
			for p := 0; p < 2*slotsPerBucket; p++ {
				s, id := w.slot(&l, p)
				if x := s.Load(); x != 0 && x&w.idMask == id {
					copies++
				}
			}
			if copies != 1 {
				t.Errorf("%d copies of k in its slots; want 1", copies)
			}
		})
	}
}

// TestWindowSeenOrAddBatch checks that a batch gives the answers of a loop
// over SeenOrAdd, repeats within one batch included.
func TestWindowSeenOrAddBatch(t *testing.T) {
	c := newFakeClock()
	batch := newTestWindow(t, 0, time.Minute, c)
	single := newTestWindow(t, 0, time.Minute, c)
	rng := rand.New(rand.NewPCG(3, 4))
	pool := make([]uint64, 500)
	for i := range pool {
		pool[i] = rng.Uint64()
	}
	for round := 0; round < 200; round++ {
		keys := make([]uint64, rng.IntN(40))
		for i := range keys {
			keys[i] = pool[rng.IntN(len(pool))]
		}
		seen := make([]bool, len(keys))
		n := batch.SeenOrAddBatch(keys, seen)
		want := 0
		for i, k := range keys {
			w := single.SeenOrAdd(k)
			if w {
				want++
			}
			if seen[i] != w {
				t.Fatalf("round %d: SeenOrAddBatch seen[%d] (key %#x) = %v; SeenOrAdd says %v", round, i, k, seen[i], w)
			}
		}
		if n != want {
			t.Fatalf("round %d: SeenOrAddBatch = %d; want %d", round, n, want)
		}
		c.Advance(time.Second)
	}
}
