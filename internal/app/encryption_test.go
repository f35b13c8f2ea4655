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

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// encConfig is the default configuration on dir with the key file.
func encConfig(t *testing.T, dir, keyFile string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.LLM.Standin = true // the alerts pipeline's triage, offline
	// The step's answers go through the cache as well as into the
	// ledger's record, so that both stores hold one.
	cfg.LLM.Cache.Share = true
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
// stored in the ledger (its record's note) and in the LLM cache, and
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

// TestKeyFilePermissions: a key file that its group or others may read
// (or write) is refused, as ssh refuses such a private key, with the
// command that fixes it; 0600 and 0400 are accepted.
func TestKeyFilePermissions(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o604, false}, {0o660, false}, {0o644, false}} {
		path := filepath.Join(t.TempDir(), "oncegate.key")
		if err := os.WriteFile(path, bytes.Repeat([]byte{0x5a}, 32), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, tt.mode); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		cfg.Encryption.KeyFile = path
		key, err := app.EncryptionKey(cfg)
		switch {
		case tt.ok && err != nil:
			t.Errorf("mode %04o: EncryptionKey error = %v; want the key", tt.mode, err)
		case !tt.ok && (!errors.Is(err, app.ErrKeyFilePermissions) || !strings.Contains(err.Error(), "chmod 600 "+path)):
			t.Errorf("mode %04o: EncryptionKey error = %v; want ErrKeyFilePermissions with \"chmod 600 %s\"", tt.mode, err, path)
		case !tt.ok && key != nil:
			t.Errorf("mode %04o: a key was returned with the error", tt.mode)
		}
	}
}

// TestEncryptedKVCache: with encryption.key_file and llm.cache.store: kv,
// the answers in the JetStream KV bucket are sealed with the key: the raw
// values, read with nats.go after the consumer stopped, do not hold the
// answer's text; a start without the key is refused.
func TestEncryptedKVCache(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "oncegate.key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{0x6b}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = dir
	cfg.NATS.Embedded.Listen = "127.0.0.1:0"
	cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
	cfg.LLM.Standin = true // the alerts pipeline's triage, offline
	cfg.Encryption.KeyFile = keyFile
	cfg.LLM.Cache.Store = config.StoreKV
	cfg.LLM.Cache.Share = true // the step's answers go through the cache
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	summary := answerSummary(t, runOneAlert(t, cfg, committed))

	s := natstest.RunServer(t, func(o *server.Options) { o.StoreDir = cfg.NATS.Embedded.StoreDir })
	_, js := natstest.Connect(t, s)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, cfg.LLM.Cache.KV.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "a.*")
	if err != nil {
		t.Fatal(err)
	}
	answers := 0
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		answers++
		for _, n := range []string{summary, "[stand-in model]"} {
			if bytes.Contains(e.Value(), []byte(n)) {
				t.Errorf("KV value %s holds %q in plain text", k, n)
			}
		}
	}
	if answers == 0 {
		t.Fatal("no answer in the KV cache bucket")
	}
	s.Shutdown()
	s.WaitForShutdown()

	// A replica without the key (and no Badger store to refuse it first)
	// is refused by the sealed bucket.
	cfg.Encryption.KeyFile, cfg.Ledger.Store = "", config.StoreKV
	a, err := app.Start(context.Background(), cfg, app.Options{NoOps: true})
	if err == nil {
		a.Close()
		t.Fatal("Start without the key on a sealed KV cache succeeded")
	}
	if !errors.Is(err, app.ErrEncryptionKey) || !strings.Contains(err.Error(), "LLM cache") {
		t.Errorf("Start without the key: %v; want ErrEncryptionKey naming the LLM cache", err)
	}
}

// TestSealedNotesInKVLedger: with ledger.store: kv, the model step's
// answer is kept in its intent's record (the note), and with
// encryption.key_file the note is sealed with the key before it reaches
// the bucket: read raw with nats.go after the consumer stopped, no value
// holds the answer's text. Without a key (the control) the record holds
// it in plain text, which shows the search finds it.
func TestSealedNotesInKVLedger(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "oncegate.key")
	if err := os.WriteFile(keyFile, bytes.Repeat([]byte{0x5e}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", keyFile} {
		dir := t.TempDir()
		cfg := config.Default()
		cfg.DataDir = dir
		cfg.NATS.Embedded.Listen = "127.0.0.1:0"
		cfg.NATS.Embedded.StoreDir = filepath.Join(dir, "nats")
		cfg.LLM.Standin = true
		cfg.Encryption.KeyFile = key
		cfg.Ledger.Store = config.StoreKV
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		summary := answerSummary(t, runOneAlert(t, cfg, committed))

		s := natstest.RunServer(t, func(o *server.Options) { o.StoreDir = cfg.NATS.Embedded.StoreDir })
		_, js := natstest.Connect(t, s)
		ctx := context.Background()
		kv, err := js.KeyValue(ctx, cfg.Ledger.KV.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		records, plain := 0, 0
		for k := range keys.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			records++
			if bytes.Contains(e.Value(), []byte(summary)) {
				plain++
				rec, err := ledgerproto.Decode(dedupe.Key{}, e.Value())
				t.Logf("key %q: record %s: note %q, result %+v (%v)", key, k, rec.Note, rec.Result, err)
			}
		}
		s.Shutdown()
		s.WaitForShutdown()
		switch {
		case records == 0:
			t.Fatalf("key %q: no record in the KV ledger", key)
		case key == "" && plain == 0:
			t.Errorf("without a key, no ledger record holds the answer %q in plain text; want its note to, or the search proves nothing", summary)
		case key != "" && plain != 0:
			t.Errorf("with a key, %d ledger records hold the answer %q in plain text; want its note sealed", plain, summary)
		}
	}
}

// answerSummary returns the last words of the stand-in model's answer in
// the effect's body: nothing in them is escaped in JSON, so a search of
// the stores' bytes finds them if they are there in plain text.
func answerSummary(t *testing.T, effect []byte) string {
	t.Helper()
	var body struct{ Answer string }
	if err := json.Unmarshal(effect, &body); err != nil {
		t.Fatalf("effect %q: %v", effect, err)
	}
	_, summary, ok := strings.Cut(body.Answer, "Summary: ")
	if !ok || len(summary) < 20 {
		t.Fatalf("effect %q: want the stand-in model's answer", effect)
	}
	return summary
}
