// Package freeport picks loopback ports for servers that must be told
// their port before they bind it (a NATS cluster's routes, a child
// process's listeners).
//
// A port found by listening on port 0 and closing the listener is in the
// kernel's ephemeral range, where any other listener on port 0, or any
// connection's source port, can take it before the server binds it — and
// again each time a restarted server binds it anew. Port draws from a range
// beside the ephemeral one instead, and never returns a port twice in a
// process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

var (
	mu     sync.Mutex
	given  map[int]bool
	lo, hi int // the range drawn from; 0: ports the kernel picks
)

// Port returns a port of 127.0.0.1 that nothing listened on a moment ago,
// outside the kernel's ephemeral range where there is room for it, and not
// returned before by this process.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if given == nil {
		given = map[int]bool{}
		lo, hi = portRange()
	}
	for range 1000 {
		if lo == 0 {
			break
		}
		p := lo + rand.IntN(hi-lo)
		if given[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		given[p] = true
		return p, nil
	}
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !given[p] {
			given[p] = true
			return p, nil
		}
	}
}

// portRange is a range of 8,000 ports below the kernel's ephemeral range,
// or above it, or none if neither has room.
func portRange() (int, int) {
	lo, hi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var a, z int
		if n, _ := fmt.Sscan(string(b), &a, &z); n == 2 && a <= z {
			lo, hi = a, z
		}
	}
	switch {
	case lo-8000 >= 10000:
		return lo - 8000, lo
	case hi+8000 <= 65535:
		return hi + 1, hi + 8001
	}
	return 0, 0
}
