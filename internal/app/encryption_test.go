package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
)

// encConfig is the default configuration on dir with the key file.
func encConfig(t *testing.T, dir, keyFile string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.Encryption.KeyFile = keyFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runOneAlert starts Oncegate on cfg, sends it the example alert, waits
// until the alerts pipeline's stats satisfy done, and shuts everything
// down. It returns the effect's body, if one was published.
func runOneAlert(t *testing.T, cfg *config.Config, done func(consumer.PipelineStats) bool) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := app.Start(ctx, cfg, app.Options{NoOps: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- a.Run(rctx) }()
	defer func() { stop(); <-ran }()

	nc, err := nats.Connect(a.Embedded.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	effects, err := nc.SubscribeSync("effects.alerts")
	if err != nil {
		t.Fatal(err)
	}
	alert, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := nc.JetStream()
	if _, err := js.Publish("triggers.alerts", alert); err != nil {
		t.Fatal(err)
	}
	for {
		i := slices.IndexFunc(a.Consumer.Stats(), func(s consumer.PipelineStats) bool { return s.Pipeline == "alerts" })
		if i >= 0 && done(a.Consumer.Stats()[i]) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("alerts pipeline: %+v; the trigger was not settled as expected", a.Consumer.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if m, err := effects.NextMsg(time.Millisecond); err == nil {
		return m.Data
	}
	return nil
}

// committed: the effect is performed and committed (before the ack).
func committed(s consumer.PipelineStats) bool { return s.Effects >= 1 }

// badgerFilesContain reports whether the Badger stores below dataDir (the
// ledger and the LLM cache; not the embedded NATS server's) hold needle.
func badgerFilesContain(t *testing.T, dataDir string, needle []byte) (ledger, cache bool) {
	t.Helper()
	search := func(dir string) bool {
		found := false
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			found = found || bytes.Contains(b, needle)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	return search(filepath.Join(dataDir, "badger")), search(filepath.Join(dataDir, "llm-cache"))
}

// TestEncryptionAtRest: with encryption.key_file, the model's answer is
// stored in the ledger (the effect's result) and in the LLM cache, and
// its text is in neither store's files (without a key it is in both,
// which shows the search finds it); starting again without the key, or
// with another, fails with ErrEncryptionKey, and with the key it works.
func TestEncryptionAtRest(t *testing.T) {
	keyDir := t.TempDir()
	keyFile := filepath.Join(keyDir, "oncegate.key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{0xa5}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	otherKey := filepath.Join(keyDir, "other.key")
	if err := os.WriteFile(otherKey, bytes.Repeat([]byte{0x3c}, 32), 0o600); err != nil {
		t.Fatal(err)
	}

	// The control: without a key, the answer is readable in both stores.
	plainDir := t.TempDir()
	effect := runOneAlert(t, encConfig(t, plainDir, ""), committed)
	var body struct{ Answer string }
	if err := json.Unmarshal(effect, &body); err != nil {
		t.Fatalf("effect %q: %v", effect, err)
	}
	_, summary, ok := strings.Cut(body.Answer, "Summary: ")
	if !strings.HasPrefix(body.Answer, "[stand-in model]") || !ok || len(summary) < 20 {
		t.Fatalf("effect %q: want the stand-in model's answer", effect)
	}
	needle := []byte(summary) // the answer's last words: nothing JSON escapes
	if l, c := badgerFilesContain(t, plainDir, needle); !l || !c {
		t.Fatalf("without a key, %q is in the ledger's files: %v, the cache's: %v; want both, or the search below proves nothing", needle, l, c)
	}

	encDir := t.TempDir()
	effect = runOneAlert(t, encConfig(t, encDir, keyFile), committed)
	if !bytes.Contains(effect, needle) {
		t.Fatalf("effect %q; want the same answer as without a key", effect)
	}
	for _, n := range [][]byte{needle, []byte("[stand-in model]")} {
		if l, c := badgerFilesContain(t, encDir, n); l || c {
			t.Errorf("with a key, %q is in plain text in the ledger's files: %v, the cache's: %v", n, l, c)
		}
	}

	for _, tt := range []struct {
		name, dir, key, store string
	}{
		{"encrypted, started without the key", encDir, "", "ledger"},
		{"encrypted, started with another key", encDir, otherKey, "ledger"},
		{"plain, started with a key", plainDir, keyFile, "ledger"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := app.Start(context.Background(), encConfig(t, tt.dir, tt.key), app.Options{NoOps: true})
			if err == nil {
				a.Close()
				t.Fatal("Start succeeded; want ErrEncryptionKey")
			}
			if !errors.Is(err, app.ErrEncryptionKey) || !strings.Contains(err.Error(), tt.store) {
				t.Errorf("Start: %v; want ErrEncryptionKey naming the %s", err, tt.store)
			}
		})
	}

	// With the key, the encrypted ledger opens and remembers the alert:
	// sent again, it is a duplicate.
	runOneAlert(t, encConfig(t, encDir, keyFile), func(s consumer.PipelineStats) bool { return s.DuplicatesLedger >= 1 })

	short := filepath.Join(keyDir, "short.key")
	if err := os.WriteFile(short, []byte("0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Start(context.Background(), encConfig(t, t.TempDir(), short), app.Options{NoOps: true}); err == nil || !strings.Contains(err.Error(), "17 bytes") {
		t.Errorf("a 17-byte key file: Start error = %v; want it to say 17 bytes", err)
	}
}
