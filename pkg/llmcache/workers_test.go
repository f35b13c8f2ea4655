package llmcache

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// goid returns the calling goroutine's id, read from its stack trace.
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// waitGoroutines waits, until a deadline, for the process's goroutines to
// be at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, want at most %d", runtime.NumGoroutine(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWorkersReuseTheirGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	w := newWorkers(time.Minute)
	ran := make(chan uint64)
	w.run(func() { ran <- goid() })
	first := <-ran
	// The worker is idle once it has gone back to wait; until then a fill
	// starts a goroutine of its own. One of them soon lands on it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.run(func() { ran <- goid() })
		if <-ran == first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no fill ran on the goroutine of the first one")
		}
	}
	// Fills that overlap each get a goroutine.
	release := make(chan struct{})
	ids := make(chan uint64, 8)
	for range 8 {
		w.run(func() { ids <- goid(); <-release })
	}
	seen := map[uint64]bool{}
	for range 8 {
		seen[<-ids] = true
	}
	close(release)
	if len(seen) != 8 {
		t.Errorf("8 fills at once ran on %d goroutines", len(seen))
	}
	w.stop()
	waitGoroutines(t, before)
}

func TestWorkersIdleExit(t *testing.T) {
	before := runtime.NumGoroutine()
	w := newWorkers(20 * time.Millisecond)
	done := make(chan struct{})
	w.run(func() { close(done) })
	<-done
	// Without stop, the idle worker exits on its own.
	waitGoroutines(t, before)
	w.stop()
}
