package procstat

import (
	"runtime"
	"testing"
	"time"
)

func TestCPUAndRSS(t *testing.T) {
	c0 := CPU()
	deadline := time.Now().Add(50 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		n++
	}
	if c1 := CPU(); c1 <= c0 {
		t.Errorf("CPU went from %v to %v over 50ms of spinning", c0, c1)
	}
	if runtime.GOOS != "linux" {
		t.Skip("RSS reads /proc")
	}
	r0 := RSS()
	b := make([]byte, 64<<20)
	for i := range b {
		b[i] = byte(i)
	}
	if r1 := RSS(); r0 == 0 || r1 < r0+32<<20 {
		t.Errorf("RSS %d before and %d after touching 64 MiB; want at least 32 MiB more", r0, r1)
	}
	runtime.KeepAlive(b)
}
