package badgerstore

import (
	"sync/atomic"
	"time"
)

// fakeClock is a Clock that moves only when told to.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock { return &fakeClock{} }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func (c *fakeClock) Set(t time.Time)         { c.ns.Store(t.UnixNano()) }
