package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	p := &cfg.Pipelines[0]
	keyer, err := dedupe.NewKeyer(consumer.KeySpec(p))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	in, err := keyer.Intent(payload)
	if err != nil {
		t.Fatal(err)
	}
	// One committed record, one pending.
	db, err := badgerstore.Open(cfg.BadgerDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := badgerstore.New(db, badgerstore.Options{Options: app.LedgerOptions(cfg.Ledger)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	claim, err := l.Begin(ctx, in.Key, ledger.BeginOptions{Owner: "test#ONCEGATE:7", Fingerprint: in.Fingerprint, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(ctx, in.Key, claim.Lease.Token, ledger.Result{DownstreamID: "INC-1042", Response: []byte(`{"answer":"page now"}`)}); err != nil {
		t.Fatal(err)
	}
	var other dedupe.Key
	other[0] = 0xab
	if _, err := l.Begin(ctx, other, ledger.BeginOptions{Owner: "worker-2#ONCEGATE:9", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	db.Close()

	out, _, err := runCmd(t, string(payload), "inspect", "-data", dir, "key", "-pipeline", "alerts")
	if err != nil {
		t.Fatalf("inspect key: %v", err)
	}
	for _, want := range []string{"key:         " + in.Key.String(), "ledger:      committed", "downstream:  INC-1042", "page now"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect key output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCmd(t, "", "inspect", "-data", dir, "record", other.String())
	if err != nil || !strings.Contains(out, "pending") {
		t.Errorf("inspect record: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "", "inspect", "-data", dir, "pending")
	if err != nil || !strings.Contains(out, other.String()) || !strings.Contains(out, "worker-2") || !strings.Contains(out, "1 pending") {
		t.Errorf("inspect pending: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, "", "inspect", "-data", dir, "cache")
	if err != nil || !strings.Contains(out, "answers:        0") {
		t.Errorf("inspect cache: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, "{", "inspect", "-data", dir, "key"); err == nil || !strings.Contains(err.Error(), "dead-lettered") {
		t.Errorf("inspect key of a bad payload: %v", err)
	}
	if _, _, err := runCmd(t, "", "inspect", "-data", dir, "record", "nothex"); err == nil {
		t.Error("inspect record nothex: no error")
	}
	// A Badger ledger in use is reported as such.
	db, err = badgerstore.Open(cfg.BadgerDir(), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, _, err := runCmd(t, "", "inspect", "-data", filepath.Clean(dir), "pending"); err == nil || !strings.Contains(err.Error(), "running consumer") {
		t.Errorf("inspect on a held ledger: %v", err)
	}
}

// TestInspectMissingData: a mistyped -data is an error, and no directory
// is created for it; inspect once answered "no record" with exit 0.
func TestInspectMissingData(t *testing.T) {
	typo := filepath.Join(t.TempDir(), "TYPO")
	for _, args := range [][]string{
		{"inspect", "-data", typo, "record", strings.Repeat("ab", 16)},
		{"inspect", "-data", typo, "pending"},
		{"inspect", "-data", typo, "cache"},
	} {
		_, _, err := runCmd(t, "", args...)
		if err == nil || !strings.Contains(err.Error(), "no Oncegate data") {
			t.Errorf("consumer %s = %v; want an error naming the missing data", strings.Join(args, " "), err)
		}
	}
	if _, err := os.Stat(typo); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("inspect created %s (%v)", typo, err)
	}
}
