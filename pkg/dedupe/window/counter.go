package window

import (
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The window's default clock. A window reads the time on every operation,
// and on a 2-core VM time.Since, a vDSO call behind a fence, was about a
// tenth of a SeenOrAdd. Where the kernel itself keeps time with the CPU's
// time-stamp counter (Linux on amd64 with the tsc clocksource: the counter
// is invariant and synchronized across CPUs), the window reads the counter
// instead and converts it with a calibration against the monotonic clock.
// The calibration is redone every counterSpan, from a new anchor, so the
// converted time never strays from the monotonic clock by more than the
// rate's error (from a baseline of counterSpan or more, plus NTP's slew of
// at most 500 ppm) over one span: a few microseconds. A window that reads
// the counter adds counterSlack to its TTL to cover that, and only windows
// whose time unit is at least counterMinUnit read it.

const (
	counterSpan    = 10 * time.Millisecond
	counterSlack   = 50 * time.Microsecond
	counterMinUnit = 1 << 20 // ns, about 1 ms
)

// monoEpoch is the origin of monoNanos.
var monoEpoch = time.Now()

// calibration converts counter readings into nanoseconds since monoEpoch
// for span ticks after its anchor.
type calibration struct {
	tick uint64 // the counter at the anchor
	ns   int64  // nanoseconds since monoEpoch at the anchor
	mult uint64 // nanoseconds per tick, times 2^32
	span uint64 // ticks after tick for which the calibration is used
}

var counter struct {
	cal atomic.Pointer[calibration] // nil until calibrated, and if unusable

	once   sync.Once
	usable bool // decided once: see counterUsable

	// broken is set when a calibration disagreed with the one before: the
	// counter is not used again.
	broken atomic.Bool

	mu    sync.Mutex // taken by one recalibration at a time
	tick0 uint64     // the first anchor, the baseline of every rate
	ns0   int64
}

// counterUsable reports whether the time-stamp counter may stand in for the
// monotonic clock on this machine. It is decided once.
func counterUsable() bool {
	counter.once.Do(func() {
		counter.usable = hasCounter && kernelKeepsTimeWithCounter()
	})
	return counter.usable
}

// monoNanos returns the nanoseconds since monoEpoch: from the counter when
// a calibration is current, else from the monotonic clock (recalibrating).
// Only windows call it, and only if counterUsable.
func monoNanos() int64 {
	if c := counter.cal.Load(); c != nil {
		// Unsigned: a counter behind the anchor is past the span too.
		if d := readCounter() - c.tick; d < c.span {
			hi, lo := bits.Mul64(d, c.mult)
			return c.ns + int64(hi<<32|lo>>32)
		}
	}
	return recalibrate()
}

// recalibrate reads the monotonic clock and, unless another goroutine is at
// it, anchors a new calibration there.
func recalibrate() int64 {
	if counter.broken.Load() || !counter.mu.TryLock() {
		return int64(time.Since(monoEpoch))
	}
	defer counter.mu.Unlock()
	if counter.tick0 != 0 {
		if ns := int64(time.Since(monoEpoch)); ns-counter.ns0 < int64(counterSpan) {
			return ns // too short a baseline for a rate yet
		}
	}
	tick, ns, ok := anchor()
	if !ok {
		return ns
	}
	if counter.tick0 == 0 {
		counter.tick0, counter.ns0 = tick, ns
		return ns
	}
	dn := ns - counter.ns0
	if tick <= counter.tick0 || tick-counter.tick0 <= uint64(dn)>>32 {
		return ns // no usable pair this time
	}
	dt := tick - counter.tick0
	// mult = dn * 2^32 / dt; dn < 2^63 and dt > dn>>32, so it fits.
	mult, _ := bits.Div64(uint64(dn)>>32, uint64(dn)<<32, dt)
	span := uint64(float64(dt) * float64(counterSpan) / float64(dn))
	if prev := counter.cal.Load(); prev != nil && (mult > prev.mult+prev.mult/100 || mult < prev.mult-prev.mult/100) {
		// The rate moved by over 1%: the counter is not the steady clock
		// the kernel said it was. Stop using it.
		counter.broken.Store(true)
		counter.cal.Store(nil)
		return ns
	}
	counter.cal.Store(&calibration{tick: tick, ns: ns, mult: mult, span: span})
	return ns
}

// anchorBracket bounds, in ticks, how far apart the counter reads around
// an anchor's clock read may be: a few microseconds at the rates counters
// run at (1 to 5 GHz). A wider pair was interrupted and is not used.
const anchorBracket = 20_000

// anchor reads the counter and the monotonic clock as a pair: of three
// tries, the one whose clock read the two counter reads bracket most
// tightly, so a goroutine preempted in the middle of one does not skew it.
// ok is false if none was tight.
func anchor() (tick uint64, ns int64, ok bool) {
	best := uint64(anchorBracket)
	ns = int64(time.Since(monoEpoch))
	for range 3 {
		a := readCounter()
		n := int64(time.Since(monoEpoch))
		b := readCounter()
		if b >= a && b-a <= best {
			best, tick, ns, ok = b-a, a+(b-a)/2, n, true
		}
	}
	return tick, ns, ok
}
