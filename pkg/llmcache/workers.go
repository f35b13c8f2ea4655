package llmcache

import (
	"sync"
	"time"
)

// workerIdle is how long a fill's goroutine waits for the next fill before
// it exits.
const workerIdle = 2 * time.Second

// workers runs the fills on goroutines that outlive them. A fill's
// goroutine grows its stack as it calls the model and decodes the answer;
// a new goroutine per miss paid for that growth, a stack copied several
// times over, on every miss (BenchmarkMiss). An idle worker takes the next
// fill, or exits after its idle time or when stop is called.
type workers struct {
	idle time.Duration
	next chan func() // unbuffered: a send succeeds only when a worker waits
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newWorkers(idle time.Duration) *workers {
	return &workers{idle: idle, next: make(chan func()), quit: make(chan struct{})}
}

// run runs f on an idle worker, or on a new one if none waits.
func (w *workers) run(f func()) {
	select {
	case w.next <- f:
	default:
		w.wg.Add(1)
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	defer w.wg.Done()
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		f()
		f = nil
		idle.Reset(w.idle)
		select {
		case f = <-w.next:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}

// stop makes the idle workers exit and waits for every worker to; the
// caller has made sure that no fill runs or starts.
func (w *workers) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}
