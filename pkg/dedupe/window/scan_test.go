package window

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"
)

// scanInputs returns the candidate words of a key at time t built from
// rnd: a mix of empty slots, the key's own words in either bucket in both
// states and at ages around the TTL, other keys' words and random words, so
// that every clause of scan's classification is exercised.
func scanInputs(w *Window, l *loc, t uint64, rnd []byte) (xs [2 * slotsPerBucket]uint64) {
	ttl := uint64(w.ttlUnits)
	for i := range xs {
		var r uint64
		if len(rnd) >= 8 {
			r, rnd = binary.LittleEndian.Uint64(rnd), rnd[8:]
		}
		// Ages that straddle the TTL, the half range and the future.
		age := []uint64{0, 1, ttl - 1, ttl, ttl + 1, ttl + 2, w.stampMask >> 1, w.stampMask>>1 + 1, w.stampMask, r >> 20}[r>>4%10]
		// A word in a table is 0 or has state pending or committed.
		state := 1 + r>>2&1
		switch r % 6 {
		case 0:
			xs[i] = 0
		case 1:
			xs[i] = w.word(l.id, state, t-age)
		case 2:
			xs[i] = w.word(l.id|w.altBit, state, t-age)
		case 3:
			xs[i] = w.word(r>>8&w.idMask, state, t-age)
		default:
			xs[i] = r&^(3<<w.stampBits) | state<<w.stampBits
		}
	}
	return xs
}

// checkScan compares scanAVX2 (where the CPU has it) and scanGeneric with
// a slot-by-slot statement of what scan must return.
func checkScan(t *testing.T, w *Window, k, t0 uint64, rnd []byte) {
	t.Helper()
	l := w.locate(k)
	t0 &= w.stampMask
	xs := scanInputs(w, &l, t0, rnd)
	p := scanParams{
		idMask: w.idMask, id1: l.id, id2: l.id | w.altBit, commitBit: w.commitBit,
		t: t0, stampMask: w.stampMask, lo: uint64(w.ttlUnits) + 1, span: w.stampMask>>1 - uint64(w.ttlUnits),
	}
	var wantMatch, wantFree uint32
	for i, x := range xs {
		_, id := w.slot(&l, i)
		if x != 0 && x&w.idMask == id {
			wantMatch |= 1 << i
		}
		if x == 0 || (w.state(x) == stateCommitted && w.age(x, t0) > w.ttlUnits && w.age(x, t0) >= 0) {
			wantFree |= 1 << i
		}
	}
	if m, f := scanGeneric(&xs, &p); m != wantMatch || f != wantFree {
		t.Fatalf("scanGeneric(%#x) = %#x, %#x; want %#x, %#x", xs, m, f, wantMatch, wantFree)
	}
	if useAVX2 {
		if m, f := scanAVX2(&xs, &p); m != wantMatch || f != wantFree {
			t.Fatalf("scanAVX2(%#x) = %#x, %#x; want %#x, %#x", xs, m, f, wantMatch, wantFree)
		}
	}
}

// scanTestWindows are windows of the smallest table and of a large one:
// their words split the bits differently.
func scanTestWindows(t testing.TB) []*Window {
	var ws []*Window
	for _, c := range []int{minCapacity, 1 << 24} {
		w, err := New(Options{Capacity: c, TTL: time.Minute, Now: newFakeClock().Now})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return ws
}

func TestScan(t *testing.T) {
	if !useAVX2 {
		t.Log("no AVX2 here: checking scanGeneric only")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := make([]byte, 8*2*slotsPerBucket)
	for _, w := range scanTestWindows(t) {
		for range 20000 {
			for i := range rnd {
				rnd[i] = byte(rng.Uint32())
			}
			checkScan(t, w, rng.Uint64(), rng.Uint64(), rnd)
		}
	}
}

func FuzzScan(f *testing.F) {
	f.Add(uint64(0), uint64(0), []byte{})
	f.Add(uint64(1)<<63, uint64(12345), make([]byte, 128))
	ws := scanTestWindows(f)
	f.Fuzz(func(t *testing.T, k, now uint64, rnd []byte) {
		for _, w := range ws {
			checkScan(t, w, k, now, rnd)
		}
	})
}

// TestWindowGenericScan runs the window's tests with scanGeneric, as on a
// CPU without AVX2.
func TestWindowGenericScan(t *testing.T) {
	if !useAVX2 {
		t.Skip("scanGeneric is the only scan here: the other tests ran it")
	}
	useAVX2 = false
	defer func() { useAVX2 = true }()
	for name, test := range map[string]func(*testing.T){
		"Basic":        TestWindowBasic,
		"Expiry":       TestWindowExpiry,
		"Capacity":     TestWindowCapacity,
		"OverCapacity": TestWindowOverCapacity,
		"RaceOneKey":   TestWindowRaceOneKey,
		"RaceManyKeys": TestWindowRaceManyKeys,
		"RivalCheck":   TestWindowRivalCheck,
		"Batch":        TestWindowSeenOrAddBatch,
	} {
		t.Run(name, test)
	}
}

// TestAllocTable checks a table's memory: zeroed, and a large table
// aligned to huge pages, so its buckets are cache-line aligned.
func TestAllocTable(t *testing.T) {
	for _, nb := range []uint64{minBuckets, 1 << 16, 1<<16 + 3} {
		table, release := allocTable(nb)
		if uint64(len(table)) != nb {
			t.Fatalf("allocTable(%d): %d buckets", nb, len(table))
		}
		if addr := uintptr(unsafe.Pointer(&table[0])); addr%64 != 0 {
			t.Errorf("allocTable(%d) at %#x: not cache-line aligned", nb, addr)
		}
		for i := range table {
			for j := range table[i] {
				if table[i][j].Load() != 0 {
					t.Fatalf("allocTable(%d): bucket %d slot %d not zero", nb, i, j)
				}
				table[i][j].Store(uint64(i))
			}
		}
		if release != nil {
			release()
		}
	}
}
