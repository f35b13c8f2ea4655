package consumer

import (
	"sync"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// flight is work on an intent this process holds.
type flight struct {
	done      chan struct{}      // closed when the work is over; made when a duplicate first waits
	committed bool               // set before done is closed
	response  []byte             // the committed result's response, for replies
	fp        dedupe.Fingerprint // the payload the work was done for
}

// flights are the intents a gate's work holds in this process, by ledger
// key.
type flights struct {
	mu sync.Mutex
	m  map[dedupe.Key]*flight
}

// start records the work of held as in flight.
func (fs *flights) start(held []*Trigger) {
	if len(held) == 0 {
		return
	}
	fs.mu.Lock()
	if fs.m == nil {
		fs.m = make(map[dedupe.Key]*flight)
	}
	for _, t := range held {
		fs.m[t.key] = &flight{}
	}
	fs.mu.Unlock()
}

// get returns the flight of key, ready to be waited on, or nil.
func (fs *flights) get(key dedupe.Key) *flight {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.m[key]
	if f != nil && f.done == nil {
		f.done = make(chan struct{})
	}
	return f
}

// end records the work of held as over, committed or not.
func (fs *flights) end(held []*Trigger) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, t := range held {
		f := fs.m[t.key]
		if f == nil {
			continue
		}
		delete(fs.m, t.key)
		if f.done == nil {
			continue // no duplicate waited
		}
		f.committed = t.committed
		if t.committed && t.v.kind == settleAck {
			f.response, f.fp = t.v.reply, t.fp
		}
		close(f.done)
	}
}
