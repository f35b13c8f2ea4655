package natsrun_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/oncegate/oncegate/internal/natsrun"
)

// The consumer with no NATS URL: start the embedded server on loopback,
// connect to it like to any other, and shut both down in order.
func ExampleStartEmbedded() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dataDir, err := os.MkdirTemp("", "oncegate-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dataDir)
	logger := slog.New(slog.DiscardHandler)

	// Port 0 picks a free port; the default is 127.0.0.1:4222.
	e, err := natsrun.StartEmbedded(dataDir, natsrun.Options{Listen: "127.0.0.1:0", Logger: logger})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Shutdown(ctx)

	nc, err := natsrun.Connect(ctx, e.ClientURL(), natsrun.Options{Name: "example", Logger: logger})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	sub, _ := nc.SubscribeSync("hello")
	_ = nc.Publish("hello", []byte("world"))
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s %s\n", m.Subject, m.Data)
	// Output: hello world
}

func ExampleRedact() {
	fmt.Println(natsrun.Redact("nats://alice:s3cret@nats.example.com:4222"))
	fmt.Println(natsrun.Redact("nats://t0ken@nats.example.com:4222"))
	// Output:
	// nats://alice:xxxxx@nats.example.com:4222
	// nats://xxxxx@nats.example.com:4222
}
