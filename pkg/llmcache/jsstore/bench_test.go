package jsstore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/jsstore"
)

// BenchmarkLargeAnswer writes and reads back one answer of each size, side
// by side: the store as it is (one KV value up to the server's max_payload,
// chunked in the bucket past it) and a JetStream Object Store, which chunks
// every object and keeps it in a stream of its own. One op is a put and a
// get of the whole answer.
func BenchmarkLargeAnswer(b *testing.B) {
	s := natstest.RunServer(b)
	js := connect(b, s.ClientURL())
	ctx := context.Background()
	st, err := jsstore.New(ctx, js, jsstore.Options{Bucket: "bench-large"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	obs, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: "bench-large-obj"})
	if err != nil {
		b.Fatal(err)
	}
	unit := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n")
	for _, size := range []int{4 << 10, 256 << 10, 900 << 10, 4 << 20} {
		body := bytes.Repeat(unit, size/len(unit)+1)[:size]
		var k llmcache.Key
		copy(k[:], fmt.Sprintf("%016d", size))
		b.Run(fmt.Sprintf("kv/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := st.Put(ctx, k, body, 0); err != nil {
					b.Fatal(err)
				}
				v, err := st.Get(ctx, k)
				if err != nil || len(v) != size {
					b.Fatalf("get: %d bytes, %v", len(v), err)
				}
			}
		})
		b.Run(fmt.Sprintf("objectstore/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := obs.PutBytes(ctx, k.String(), body); err != nil {
					b.Fatal(err)
				}
				v, err := obs.GetBytes(ctx, k.String())
				if err != nil || len(v) != size {
					b.Fatalf("get: %d bytes, %v", len(v), err)
				}
			}
		})
	}
}

// BenchmarkMiss makes one miss per op (a prompt not asked before) through
// go-openai, the cache on the store and the stand-in model, side by side:
// a paid answer kept in memory only until the bucket has it, and kept on
// disk as well (Options.HoldDir: written before the store's write, removed
// after it).
func BenchmarkMiss(b *testing.B) {
	s := natstest.RunServer(b)
	js := connect(b, s.ClientURL())
	m, err := standin.New(standin.Options{})
	if err != nil {
		b.Fatal(err)
	}
	url, stop, err := m.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	for _, bc := range []struct {
		name string
		dir  string
	}{{"memory", ""}, {"holddir", b.TempDir()}} {
		b.Run(bc.name, func(b *testing.B) {
			c := openCache(b, js, jsstore.Options{Bucket: "bench-miss-" + bc.name}, llmcache.Options{HoldDir: bc.dir})
			cl := client(b, c, url)
			i := 0
			for b.Loop() {
				i++
				if _, err := cl.CreateChatCompletion(context.Background(), triage(fmt.Sprintf("Disk %d%% full on db-%d", i%100, i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
