// Package window is a fixed-memory, lock-free set of recently seen 64-bit
// keys with time-based expiry, for dropping repeats at memory speed.
//
//	w, err := window.New(window.Options{Capacity: 1 << 20, TTL: 10 * time.Minute})
//	if err != nil {
//		return err
//	}
//	for msg := range msgs {
//		if w.SeenOrAdd(xxhash.Sum64(msg.ID)) {
//			continue // a repeat within the TTL: drop it
//		}
//		handle(msg)
//	}
//
// A [Window] takes tens of millions of operations a second across cores: no
// allocation, no mutex, no background goroutine, 16 bytes per key at
// capacity. See the type's documentation for its guarantees.
//
// A Window is a cache. In front of a durable ledger (package dedupe) it is
// only a fast path: add a key (64 bits of a dedupe.Key, such as
// binary.LittleEndian.Uint64(key[:8])) after the ledger has committed its
// work, remove it when the effect failed, and expect the window to be empty
// after a restart.
//
// The package imports nothing outside the standard library and
// golang.org/x/sys/cpu (and a hook of Oncegate's benchmarks).
package window
