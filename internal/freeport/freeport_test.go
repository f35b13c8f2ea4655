package freeport

import (
	"fmt"
	"net"
	"testing"
)

// TestPort: the ports differ, lie outside the kernel's ephemeral range
// (where there is room beside it), and can be listened on.
func TestPort(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d returned twice", p)
		}
		seen[p] = true
		if lo != 0 && (p < lo || p >= hi) {
			t.Errorf("port %d outside the range [%d, %d)", p, lo, hi)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("listening on port %d: %v", p, err)
		}
		ln.Close()
	}
}
