package main

import (
	"bytes"
	"context"
	"errors"
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
