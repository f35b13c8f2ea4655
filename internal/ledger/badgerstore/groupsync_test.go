package badgerstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGroupSync(t *testing.T) {
	var syncs, writes atomic.Int64
	var covered atomic.Int64 // writes that had happened when the last sync started
	g := newGroupSync(func() error {
		syncs.Add(1)
		covered.Store(writes.Load())
		time.Sleep(200 * time.Microsecond) // an fsync takes a while: requests pile up
		return nil
	})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				w := writes.Add(1)
				if err := g.Sync(); err != nil {
					t.Error(err)
				}
				// The sync that released us started after our write.
				if c := covered.Load(); c < w {
					t.Errorf("Sync returned after a sync that covered %d writes; ours was write %d", c, w)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := syncs.Load(); n >= 6400 || n == 0 {
		t.Errorf("%d syncs for 6400 requests", n)
	}
	t.Logf("%d syncs for 6400 requests", syncs.Load())

	boom := errors.New("disk on fire")
	bad := newGroupSync(func() error { return boom })
	if err := bad.Sync(); !errors.Is(err, boom) {
		t.Errorf("Sync error = %v; want %v", err, boom)
	}
}
