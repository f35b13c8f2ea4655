package window

import (
	"sync"
	"testing"
	"time"
)

// TestMonoNanos checks the window's default clock against the monotonic
// clock over several calibration spans, from two goroutines: every reading
// lies between the monotonic readings taken around it, give or take a few
// microseconds (counterSlack is what a window allows for).
func TestMonoNanos(t *testing.T) {
	const tolerance = 20 * time.Microsecond
	usable := counterUsable()
	t.Logf("time-stamp counter usable: %v", usable)
	var wg sync.WaitGroup
	cals := make([]map[*calibration]bool, 2)
	for g := range cals {
		cals[g] = map[*calibration]bool{}
		wg.Go(func() {
			deadline := time.Now().Add(12 * counterSpan)
			n := 0
			for time.Now().Before(deadline) {
				a := time.Since(monoEpoch)
				m := time.Duration(monoNanos())
				b := time.Since(monoEpoch)
				if m < a-tolerance || m > b+tolerance {
					t.Errorf("monoNanos read %v between monotonic readings %v and %v", m, a, b)
					return
				}
				if c := counter.cal.Load(); c != nil {
					cals[g][c] = true
				}
				n++
			}
			t.Logf("goroutine %d: %d readings", g, n)
		})
	}
	wg.Wait()
	if !usable {
		return
	}
	// Calibrations were made, and renewed: a span is 10ms.
	seen := map[*calibration]bool{}
	for _, m := range cals {
		for c := range m {
			seen[c] = true
		}
	}
	if len(seen) < 5 {
		t.Errorf("%d calibrations over %v; want one per %v", len(seen), 12*counterSpan, counterSpan)
	}
	if c := counter.cal.Load(); c != nil {
		t.Logf("counter at %.4f GHz, span %d ticks", float64(1<<32)/float64(c.mult), c.span)
	}
}

// TestWindowDefaultClock checks, on the real clock, that a window remembers
// keys for at least its TTL and then forgets them. With a 64ms TTL the time
// unit is about 1ms, so the window reads the counter where it can.
func TestWindowDefaultClock(t *testing.T) {
	const ttl = 64 * time.Millisecond
	w, err := New(Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if w.fast != counterUsable() {
		t.Fatalf("window reads the counter: %v; usable: %v", w.fast, counterUsable())
	}
	const n = 20
	added := make([]time.Time, n)
	gone := make([]bool, n)
	left := n
	deadline := time.Now().Add(20 * ttl)
	for i := 0; left > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d keys still remembered %v after they were added", left, n, 20*ttl)
		}
		if i < n {
			added[i] = time.Now()
			if w.SeenOrAdd(uint64(i) + 1) {
				t.Fatalf("key %d reported seen when first added", i+1)
			}
			i++
		}
		for j := range i {
			if gone[j] || w.Contains(uint64(j)+1) {
				continue
			}
			if held := time.Since(added[j]); held < ttl {
				t.Fatalf("key %d forgotten %v after it was added; the TTL is %v", j+1, held, ttl)
			}
			gone[j] = true
			left--
		}
	}
}

// TestCounterBroken checks that a counter whose rate moves between two
// calibrations is given up, and that the clock then is the monotonic one.
func TestCounterBroken(t *testing.T) {
	if !counterUsable() {
		t.Skip("no time-stamp counter clock on this machine")
	}
	deadline := time.Now().Add(time.Second)
	for counter.cal.Load() == nil {
		if time.Now().After(deadline) {
			t.Fatal("no calibration within 1s")
		}
		monoNanos()
	}
	defer func() {
		counter.cal.Store(nil)
		counter.broken.Store(false)
	}()
	// A calibration at twice the true rate, and already expired: the next
	// reading recalibrates and finds the rate halved.
	c := *counter.cal.Load()
	c.mult *= 2
	c.tick = readCounter() - c.span
	counter.cal.Store(&c)
	a := time.Since(monoEpoch)
	m := time.Duration(monoNanos())
	b := time.Since(monoEpoch)
	if !counter.broken.Load() || counter.cal.Load() != nil {
		t.Fatalf("after a rate change: broken %v, calibration %+v", counter.broken.Load(), counter.cal.Load())
	}
	if m < a || m > b {
		t.Fatalf("monoNanos read %v between monotonic readings %v and %v", m, a, b)
	}
	if monoNanos(); counter.cal.Load() != nil {
		t.Fatal("a broken counter was calibrated again")
	}
}

// TestClockSource checks which clock a window reads: Options.Now when set;
// the counter for a window of a minute where this machine's monotonic clock
// is kept with it (not in an oncegate_nocounter build: see
// TestNoCounterBuild); the monotonic clock for a unit under counterMinUnit.
func TestClockSource(t *testing.T) {
	wantMinute := "monotonic"
	if hasCounter && kernelKeepsTimeWithCounter() && !counter.broken.Load() {
		wantMinute = "counter"
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"a minute", Options{TTL: time.Minute}, wantMinute},
		{"a unit under counterMinUnit", Options{TTL: 32 * (counterMinUnit - 1)}, "monotonic"},
		{"Options.Now", Options{TTL: time.Minute, Now: time.Now}, "option"},
	}
	for _, tt := range tests {
		w, err := New(tt.opts)
		if err != nil {
			t.Fatal(err)
		}
		if src := w.clockSource(); src != tt.want {
			t.Errorf("%s: the window reads the %s clock; want %s", tt.name, src, tt.want)
		}
	}
}
