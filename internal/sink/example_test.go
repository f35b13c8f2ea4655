package sink_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/oncegate/oncegate/internal/sink"
)

func ExampleFile() {
	dir, err := os.MkdirTemp("", "oncegate-effects")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := sink.NewFile(sink.FileOptions{Dir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	ctx := context.Background()
	e := sink.Effect{Key: "9f86d081884c7d659a2feaa0c55ad015", Body: []byte(`{"to":"ops","text":"disk full"}`)}

	// The first delivery writes the file; a retry finds it there.
	for range 2 {
		res, err := s.Deliver(ctx, e)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("duplicate:", res.Duplicate)
	}
	b, err := os.ReadFile(s.Path(e.Key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))

	// The same key for other work is refused for good.
	e.Body = []byte(`{"to":"ops","text":"disk fine"}`)
	_, err = s.Deliver(ctx, e)
	fmt.Println(errors.Is(err, sink.ErrKeyConflict), errors.Is(err, sink.ErrPermanent))
	// Output:
	// duplicate: false
	// duplicate: true
	// {"to":"ops","text":"disk full"}
	// true true
}
