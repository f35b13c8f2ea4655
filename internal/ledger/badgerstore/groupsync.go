package badgerstore

import "sync"

// groupSync coalesces concurrent fsyncs: a caller whose write is done waits
// for one sync that started after it asked, and a single sync serves every
// caller that asked before it started. Under load, N writers cost a handful
// of fsyncs instead of N.
type groupSync struct {
	sync func() error

	mu      sync.Mutex
	cond    sync.Cond
	running bool
	asked   uint64 // requests so far
	done    uint64 // requests covered by a finished sync
	err     error  // the last sync's result
}

func newGroupSync(fn func() error) *groupSync {
	g := &groupSync{sync: fn}
	g.cond.L = &g.mu
	return g
}

// Sync returns once a sync that started after the call has finished. A
// later sync covers every earlier write, so the latest result is the
// caller's.
func (g *groupSync) Sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	mine := g.asked
	for g.done < mine {
		if g.running {
			g.cond.Wait()
			continue
		}
		g.running = true
		covers := g.asked
		g.mu.Unlock()
		err := g.sync()
		g.mu.Lock()
		g.running = false
		g.done, g.err = covers, err
		g.cond.Broadcast()
	}
	return g.err
}
