package demo

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// demoQuiet is how long the demo may print nothing before it prints a
// progress line.
const demoQuiet = 3 * time.Second

// demoProgress writes the demo's output and, whenever nothing has been
// written for quiet, a progress line: where the run is (publishing, the
// ingress, settling) and how far. A long run (-alerts 5000, a slow
// settle) so says what it is doing at least every few seconds; a short
// one prints its usual lines and a progress line only where it waits.
type demoProgress struct {
	out   io.Writer
	quiet time.Duration
	start time.Time

	mu   sync.Mutex
	last time.Time // of the last write

	phase     atomic.Pointer[string]
	published atomic.Int64 // triggers published so far
	total     atomic.Int64 // triggers to publish
	unsettled atomic.Int64 // triggers not yet acked or termed, while settling

	stop, done chan struct{}
	once       sync.Once
}

// startDemoProgress starts watching for quiet spells; Stop ends it.
func startDemoProgress(out io.Writer, quiet time.Duration) *demoProgress {
	now := time.Now()
	p := &demoProgress{out: out, quiet: quiet, start: now, last: now, stop: make(chan struct{}), done: make(chan struct{})}
	p.setPhase("starting")
	go p.loop()
	return p
}

// Write writes b to the output and restarts the quiet spell.
func (p *demoProgress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last = time.Now()
	return p.out.Write(b)
}

func (p *demoProgress) setPhase(s string) { p.phase.Store(&s) }

// Stop stops the progress lines and waits for the last one to be written.
func (p *demoProgress) Stop() {
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

func (p *demoProgress) loop() {
	defer close(p.done)
	t := time.NewTicker(p.quiet / 6)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.mu.Lock()
			if now.Sub(p.last) >= p.quiet {
				fmt.Fprintf(p.out, "  ... %4.1fs %s\n", now.Sub(p.start).Seconds(), p.line())
				p.last = now
			}
			p.mu.Unlock()
		}
	}
}

// line describes where the run is.
func (p *demoProgress) line() string {
	phase := *p.phase.Load()
	published, total := p.published.Load(), p.total.Load()
	switch phase {
	case "publishing":
		return fmt.Sprintf("publishing: %d of %d triggers published", published, total)
	case "settling":
		return fmt.Sprintf("settling: %d triggers not yet acked or dead-lettered (retries wait out their backoff)", p.unsettled.Load())
	}
	return phase
}
