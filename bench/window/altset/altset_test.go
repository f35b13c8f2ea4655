package altset

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newSets(t *testing.T, capacity int, ttl time.Duration) map[string]Set {
	t.Helper()
	sets := make(map[string]Set)
	for _, impl := range Alternatives() {
		s, err := impl.New(capacity, ttl)
		if err != nil {
			t.Fatalf("%s: New(%d, %v) error = %v", impl.Name, capacity, ttl, err)
		}
		t.Cleanup(func() { Close(s) })
		sets[impl.Name] = s
	}
	return sets
}

func TestSeenOrAdd(t *testing.T) {
	const n = 10_000
	for name, s := range newSets(t, n, time.Hour) {
		t.Run(name, func(t *testing.T) {
			for pos := range uint64(n) {
				if s.SeenOrAdd(Key(1, pos)) {
					t.Fatalf("first SeenOrAdd(key %d) = true; want false", pos)
				}
			}
			for pos := range uint64(n) {
				if !s.SeenOrAdd(Key(1, pos)) {
					t.Fatalf("second SeenOrAdd(key %d) = false; want true", pos)
				}
			}
		})
	}
}

// TestSeenOrAddRace checks that of goroutines racing on a new key exactly one
// is told it is new.
func TestSeenOrAddRace(t *testing.T) {
	const keys, racers = 200, 8
	for name, s := range newSets(t, keys, time.Hour) {
		t.Run(name, func(t *testing.T) {
			for pos := range uint64(keys) {
				k := Key(2, pos)
				var added atomic.Int32
				var wg sync.WaitGroup
				for range racers {
					wg.Go(func() {
						if !s.SeenOrAdd(k) {
							added.Add(1)
						}
					})
				}
				wg.Wait()
				if got := added.Load(); got != 1 {
					t.Fatalf("key %d: %d of %d racers got false; want 1", pos, got, racers)
				}
			}
		})
	}
}

// fakeClock sets the clock of a two-generation set made for ttl to one a
// test moves, starting at 0.
func fakeClock(t *testing.T, s Set, ttl time.Duration, now *atomic.Int64) {
	t.Helper()
	f := func() int64 { return now.Load() }
	switch s := s.(type) {
	case *Xsync:
		s.clock.fake, s.rot = f, newRotation(ttl, 0)
	case *SyncMap:
		s.clock.fake, s.rot = f, newRotation(ttl, 0)
	case *MutexMap:
		s.clock.fake, s.next = f, int64(ttl)
	default:
		t.Fatalf("%T has no clock to fake", s)
	}
}

func TestExpiry(t *testing.T) {
	const ttl = time.Second
	tests := []struct {
		name string
		new  func() Set
		// forgetBy is when a key added at 0 is forgotten at the latest;
		// every set remembers it until ttl.
		forgetBy time.Duration
	}{
		{"xsync", func() Set { return NewXsync(16, ttl) }, 2 * ttl},
		{"syncmap", func() Set { return NewSyncMap(16, ttl) }, ttl},
		{"mutexmap", func() Set { return NewMutexMap(16, ttl) }, ttl},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now atomic.Int64
			s := tt.new()
			fakeClock(t, s, ttl, &now)
			if s.SeenOrAdd(1) {
				t.Fatalf("SeenOrAdd(1) at 0 = true; want false")
			}
			// Step through two TTLs, touching another key so the
			// generations swap, and find when key 1 is forgotten.
			forgot := time.Duration(-1)
			for at := time.Duration(0); at <= 3*ttl; at += ttl / 10 {
				now.Store(int64(at))
				s.SeenOrAdd(2 + uint64(at))
				if forgot < 0 && !s.SeenOrAdd(1) {
					forgot = at
				}
			}
			if forgot < ttl || forgot > tt.forgetBy {
				t.Errorf("key added at 0 forgotten at %v; want within [%v, %v]", forgot, ttl, tt.forgetBy)
			}
		})
	}
}

// TestStaleGeneration checks that after an idle gap of more than two TTLs a
// two-generation set forgets everything.
func TestStaleGeneration(t *testing.T) {
	const ttl = time.Second
	for name, s := range map[string]Set{
		"xsync":    NewXsync(16, ttl),
		"syncmap":  NewSyncMap(16, ttl),
		"mutexmap": NewMutexMap(16, ttl),
	} {
		t.Run(name, func(t *testing.T) {
			var now atomic.Int64
			fakeClock(t, s, ttl, &now)
			now.Store(int64(ttl / 2))
			s.SeenOrAdd(1)
			now.Store(int64(2*ttl + ttl/2))
			if s.SeenOrAdd(1) {
				t.Errorf("SeenOrAdd(1) two TTLs after adding it = true; want false")
			}
		})
	}
}

func TestWorkload(t *testing.T) {
	for _, dup := range []float64{0, 0.1, 0.9, 1} {
		const live = 4_000
		w := NewWorkload(live, dup, 7)
		s := NewMutexMap(w.MaxKeys(), time.Hour)
		if seen := w.Prefill(s); seen != 0 {
			t.Fatalf("dup %v: Prefill reported %d keys seen; want 0", dup, seen)
		}
		// added is the history: key → position.
		added := make(map[uint64]uint64)
		for pos := range uint64(live) {
			added[Key(7, pos)] = pos
		}
		lanes := NewLanes(2, min(w.RoundSize(2), 1000))
		ops, dups, rounds := 0, 0, 0
		for w.Next(lanes) {
			rounds++
			hist := uint64(len(added))
			fresh := 0
			for _, l := range lanes {
				fresh += len(l.Keys) - l.Dups
			}
			for _, l := range lanes {
				if got := l.DupsIn(len(l.Keys)); got != l.Dups {
					t.Fatalf("dup %v: lane Dups = %d; DupsIn counts %d", dup, l.Dups, got)
				}
				for i, k := range l.Keys {
					pos, ok := added[k]
					switch {
					case l.Dup[i] && !ok:
						t.Fatalf("dup %v: duplicate %#x was never added", dup, k)
					case l.Dup[i] && (pos >= hist || hist-pos > uint64(live-fresh)):
						t.Fatalf("dup %v: duplicate at position %d of %d is not among the newest %d", dup, pos, hist, live-fresh)
					case !l.Dup[i] && ok && pos < hist:
						t.Fatalf("dup %v: fresh key %#x was added before, at position %d", dup, k, pos)
					}
				}
			}
			for _, l := range lanes {
				for i, k := range l.Keys {
					if !l.Dup[i] {
						if _, ok := added[k]; ok {
							t.Fatalf("dup %v: fresh key %#x appears twice in a round", dup, k)
						}
						added[k] = uint64(len(added))
					}
				}
				ops += len(l.Keys)
				dups += l.Dups
			}
			if w.Fresh() > w.Budget() {
				t.Fatalf("dup %v: %d fresh keys; budget %d", dup, w.Fresh(), w.Budget())
			}
			if rounds == 20 {
				break
			}
		}
		if rounds < 2 {
			t.Errorf("dup %v: %d rounds fit the budget; want at least 2", dup, rounds)
		}
		if got := float64(dups) / float64(ops); got < dup-0.02 || got > dup+0.02 {
			t.Errorf("dup %v: duplicates are %.3f of operations", dup, got)
		}
	}
}

func TestParseCount(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"64K", 64_000}, {"1M", 1_000_000}, {"10M", 10_000_000}, {"1234", 1234},
	}
	for _, tt := range tests {
		got, err := ParseCount(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
		if s := FormatCount(tt.want); s != tt.in {
			t.Errorf("FormatCount(%d) = %q; want %q", tt.want, s, tt.in)
		}
	}
	for _, in := range []string{"", "0", "-1M", "1G", "M"} {
		if n, err := ParseCount(in); err == nil {
			t.Errorf("ParseCount(%q) = %d, nil; want an error", in, n)
		}
	}
}
