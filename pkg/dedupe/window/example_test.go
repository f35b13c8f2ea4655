package window_test

import (
	"fmt"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe/window"
)

// A Window drops repeats of a key seen within its TTL.
func ExampleWindow() {
	w, err := window.New(window.Options{Capacity: 100_000, TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	for _, k := range []uint64{7, 9, 7, 7, 11} {
		if w.SeenOrAdd(k) {
			fmt.Println(k, "duplicate")
			continue
		}
		fmt.Println(k, "new")
	}
	// Output:
	// 7 new
	// 9 new
	// 7 duplicate
	// 7 duplicate
	// 11 new
}

// A key is forgotten once its TTL has passed; with Options.Now a test
// moves time instead of waiting for it.
func ExampleOptions_now() {
	now := time.Unix(1_764_400_000, 0)
	w, err := window.New(window.Options{TTL: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		panic(err)
	}
	fmt.Println("first:", w.SeenOrAdd(42))
	now = now.Add(30 * time.Second)
	fmt.Println("after 30s:", w.SeenOrAdd(42))
	now = now.Add(2 * time.Minute)
	fmt.Println("after 2m30s:", w.SeenOrAdd(42))
	// Output:
	// first: false
	// after 30s: true
	// after 2m30s: false
}
