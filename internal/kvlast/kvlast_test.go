package kvlast_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/kvlast"
	"github.com/oncegate/oncegate/internal/natstest"
)

func TestGet(t *testing.T) {
	s := natstest.RunServer(t)
	nc, js := natstest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "things"})
	if err != nil {
		t.Fatal(err)
	}
	r := kvlast.NewReader(nc, js.Options(), "things")

	if e, err := r.Get(ctx, "a"); err != nil || e.Found || e.Revision != 0 || e.Value != nil {
		t.Fatalf("never written: %+v, %v; want not found at revision 0", e, err)
	}
	rev, err := kv.Put(ctx, "a", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "b", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if e, err := r.Get(ctx, "a"); err != nil || !e.Found || e.Revision != rev || string(e.Value) != "one" {
		t.Fatalf("written: %+v, %v; want %q at revision %d", e, err, "one", rev)
	}
	rev2, err := kv.Update(ctx, "a", []byte("two"), rev)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := r.Get(ctx, "a"); err != nil || !e.Found || e.Revision != rev2 || string(e.Value) != "two" {
		t.Fatalf("updated: %+v, %v; want %q at revision %d", e, err, "two", rev2)
	}
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	del, err := r.Get(ctx, "a")
	if err != nil || del.Found || del.Value != nil || del.Revision <= rev2 {
		t.Fatalf("deleted: %+v, %v; want not found at the marker's revision, after %d", del, err, rev2)
	}
	// A write expecting the marker's revision is accepted: it is the one a
	// compare-and-set must expect.
	if _, err := kv.Update(ctx, "a", []byte("three"), del.Revision); err != nil {
		t.Fatalf("update expecting the marker's revision %d: %v", del.Revision, err)
	}
	if err := kv.Purge(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if e, err := r.Get(ctx, "b"); err != nil || e.Found || e.Revision == 0 {
		t.Fatalf("purged: %+v, %v; want not found at the marker's revision", e, err)
	}

	var apiErr *jetstream.APIError
	if _, err := kvlast.NewReader(nc, js.Options(), "nothing").Get(ctx, "a"); !errors.As(err, &apiErr) {
		t.Fatalf("a bucket that does not exist: %v; want the server's API error", err)
	}
}

func TestAPIPrefix(t *testing.T) {
	for _, tt := range []struct {
		o    jetstream.JetStreamOptions
		want string
	}{
		{jetstream.JetStreamOptions{}, "$JS.API."},
		{jetstream.JetStreamOptions{APIPrefix: "tenant.JS.API"}, "tenant.JS.API."},
		{jetstream.JetStreamOptions{APIPrefix: "tenant.JS.API."}, "tenant.JS.API."},
		{jetstream.JetStreamOptions{Domain: "hub"}, "$JS.hub.API."},
	} {
		if got := kvlast.APIPrefix(tt.o); got != tt.want {
			t.Errorf("APIPrefix(%+v) = %q; want %q", tt.o, got, tt.want)
		}
	}
}
