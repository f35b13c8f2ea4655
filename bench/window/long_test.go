package main

import (
	"github.com/oncegate/oncegate/bench/window/altset"

	"context"
	"io"
	"testing"
	"time"
)

// TestLongEqualClockExpires runs the long-running mode's sets on the
// bench's clock through several TTLs of keys: no duplicate of a key younger
// than the TTL may be reported new, no new key seen, and the window, made
// for exactly the live keys, must evict nothing.
func TestLongEqualClockExpires(t *testing.T) {
	impls := "window,window-batch,xsync"
	if raceOn {
		impls = "window,xsync" // window-batch differs only in its loop, and the race detector makes every operation slow
	}
	cfg, err := parseLongFlags([]string{"-long", "-live", "65536", "-procs", "2", "-clock", "equal", "-impl", impls}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range cfg.impls {
		ls := &longSet{impl: im, ttl: equalTTL}
		if err := ls.build(cfg, 0.1, uint64(i)); err != nil {
			t.Fatal(err)
		}
		sm, err := ls.runFresh(context.Background(), 9*cfg.live/4)
		if err != nil {
			t.Fatal(err)
		}
		if sm.dups < cfg.live/20 {
			t.Fatalf("%s: only %d duplicates in %d operations", im.Name, sm.dups, sm.ops)
		}
		if sm.missed != 0 || sm.falsePos != 0 {
			t.Errorf("%s: %d of %d duplicates reported new, %d new keys reported seen", im.Name, sm.missed, sm.dups, sm.falsePos)
		}
		if w := windowOf(ls.s); w != nil {
			st := w.Stats()
			if st.Evictions != 0 {
				t.Errorf("%s: %d evictions", im.Name, st.Evictions)
			}
			// Keys expired and were reclaimed: the table holds about one
			// TTL of keys, not two and a quarter.
			if st.Live > cfg.live*11/10 || st.Expired == 0 {
				t.Errorf("%s: %d live keys in the table, %d reclaimed, want about %d live", im.Name, st.Live, st.Expired, cfg.live)
			}
		}
	}
}

// TestLongStreamDuplicatesAreYoung checks the generator on its own clock:
// every duplicate repeats a key added less than the TTL ago.
func TestLongStreamDuplicatesAreYoung(t *testing.T) {
	const live = 1000
	vc := new(vclock)
	s := newStream(live, 0.5, time.Minute, 1, vc)
	added := map[uint64]int64{} // key -> clock when added
	lanes := altset.NewLanes(2, 100)
	src := [][]uint64{make([]uint64, 100), make([]uint64, 100)}
	for range 200 {
		now := vc.ns.Load()
		s.next(lanes, src, time.Time{})
		for i, l := range lanes {
			for j, k := range l.Keys {
				if l.Dup[j] {
					at, ok := added[k]
					if !ok {
						t.Fatalf("duplicate %x was never added", k)
					}
					if altset.Key(1, src[i][j]) != k {
						t.Fatalf("duplicate %x: source position %d holds another key", k, src[i][j])
					}
					if age := time.Duration(now - at); age >= time.Minute {
						t.Fatalf("duplicate %x is %v old, TTL 1m", k, age)
					}
				} else {
					if _, ok := added[k]; ok {
						t.Fatalf("new key %x was added before", k)
					}
					added[k] = now
				}
			}
		}
	}
}

func TestLongFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-long", "-clock", "equal", "-impl", "window,otter,xsync"}, // otter cannot read the bench's clock
		{"-long", "-impl", "window"},                                // no reference
		{"-long", "-clock", "sometimes"},
		{"-long", "-dup", "95"},
	} {
		if _, err := parseLongFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
