package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
)

// TestAdminOpensTheLedgerAsStartDoes: a command run with no consumer opens
// the ledger the way the consumer's Start does (app.OpenLedger), so the
// two cannot drift: a Badger ledger written with one encryption key and
// opened with another is the same ErrEncryptionKey, naming the ledger,
// from both (the admin path once returned Badger's bare error), and with
// the right key both open it.
func TestAdminOpensTheLedgerAsStartDoes(t *testing.T) {
	keyDir := t.TempDir()
	keys := map[string]string{}
	for name, b := range map[string]byte{"right": 0xa5, "wrong": 0x3c} {
		keys[name] = filepath.Join(keyDir, name+".key")
		if err := os.WriteFile(keys[name], bytes.Repeat([]byte{b}, 32), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := writeConfig(t, `
data_dir: %s
metrics: {listen: ""}
nats: {embedded: {listen: "127.0.0.1:0"}}
pipelines:
  - name: orders
    subject: triggers.orders
    key: {fields: [/order]}
    effect: {sink: jetstream, subject: effects.orders}
`)
	load := func(key string) *config.Config {
		t.Helper()
		cfg, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Encryption.KeyFile = keys[key]
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The consumer writes its ledger with the right key, and stops.
	a, err := app.Start(ctx, load("right"), app.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	a, startErr := app.Start(ctx, load("wrong"), app.Options{})
	if startErr == nil {
		a.Close()
		t.Fatal("Start with the wrong key succeeded; want ErrEncryptionKey")
	}
	conn, adminErr := openAdmin(ctx, load("wrong"), "test")
	if adminErr == nil {
		conn.close()
		t.Fatal("the admin path with the wrong key opened the ledger; want ErrEncryptionKey")
	}
	for _, tt := range []struct {
		path string
		err  error
	}{{"Start", startErr}, {"openAdmin", adminErr}} {
		if !errors.Is(tt.err, app.ErrEncryptionKey) || !strings.Contains(tt.err.Error(), "the ledger in") {
			t.Errorf("%s with the wrong key: %v; want ErrEncryptionKey naming the ledger", tt.path, tt.err)
		}
	}

	conn, err = openAdmin(ctx, load("right"), "test")
	if err != nil {
		t.Fatalf("the admin path with the right key: %v", err)
	}
	defer conn.close()
	if conn.remote {
		t.Error("the admin path reached a consumer; none runs")
	}
}

// TestLedgerOpenedInOnePlace: the ledger's stores are opened by
// app.OpenLedger alone (internal/app/ledger.go): no other file of the
// commands or of package app imports them, so that Start and the admin
// commands open the ledger one way.
func TestLedgerOpenedInOnePlace(t *testing.T) {
	stores := []string{"internal/ledger/badgerstore", "internal/ledger/jskvstore"}
	for _, dir := range []string{".", filepath.Join("..", "..", "internal", "app")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") || filepath.Base(name) == "ledger.go" && dir != "." {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, s := range stores {
					if strings.HasSuffix(path, "/"+s) {
						t.Errorf("%s imports %s: open the ledger with app.OpenLedger", name, path)
					}
				}
			}
		}
	}
}

// TestRetryOpenBoundsEachAttempt checks that a command opening the stores
// itself does not give one attempt the whole of storeOpenTimeout: a
// request a cluster dropped while it had no leader is never answered (the
// cluster soak's redrive command once failed so, "opening bucket
// oncegate-ledger: context deadline exceeded" after its minute, with a
// majority of the nodes up). The attempt is given up after
// storeAttemptTimeout, another server of the pool is tried (moveOn), and
// the next attempt opens the store.
func TestRetryOpenBoundsEachAttempt(t *testing.T) {
	start := time.Now()
	var attempts, moved int
	var firstBound time.Duration
	err := retryOpen(context.Background(), func() { moved++ }, func(ctx context.Context) error {
		attempts++
		if attempts > 1 {
			return nil
		}
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("an attempt without a deadline")
		}
		firstBound = d.Sub(start)
		<-ctx.Done() // a request never answered
		return fmt.Errorf("jskv: opening bucket: %w", ctx.Err())
	})
	if err != nil {
		t.Fatalf("retryOpen: %v; want the second attempt's success", err)
	}
	if attempts != 2 || moved != 1 {
		t.Errorf("%d attempts, %d moves to another server; want 2 and 1", attempts, moved)
	}
	if firstBound > storeAttemptTimeout+time.Second {
		t.Errorf("the first attempt was given %v; want at most storeAttemptTimeout (%v), not storeOpenTimeout (%v)", firstBound, storeAttemptTimeout, storeOpenTimeout)
	}

	// An error that is not transient ends it at once.
	attempts = 0
	refused := errors.New("jskv: bucket has the wrong replicas")
	if err := retryOpen(context.Background(), func() {}, func(context.Context) error { attempts++; return refused }); !errors.Is(err, refused) || attempts != 1 {
		t.Errorf("a permanent error: %v after %d attempts; want it after 1", err, attempts)
	}
}
