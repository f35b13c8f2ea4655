package llmcache_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
)

// openBadger opens a Badger database in a directory of its own, closed at
// cleanup.
func openBadger(t *testing.T) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// storeCache returns a cache on db with opts, closed at cleanup.
func storeCache(t *testing.T, db *badger.DB, opts llmcache.Options) *llmcache.Cache {
	t.Helper()
	c, err := llmcache.NewStore(badgerstore.New(db, badgerstore.Options{}), opts)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stranded pays for an answer whose store cannot take it (its database
// closed under the cache), so that it is left in hold, and returns the
// answer and its key.
func stranded(t *testing.T, m *model, hold string, key []byte) (string, llmcache.Key) {
	t.Helper()
	db := openBadger(t)
	c := storeCache(t, db, llmcache.Options{HoldDir: hold, HoldKey: key})
	db.Close()
	r, err := client(t, c, m.URL, "sk-test").CreateChatCompletion(context.Background(), triage("Error rate 7% on checkout"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	var k llmcache.Key
	raw, err := hex.DecodeString(r.Header().Get(llmcache.HeaderCacheKey))
	if err != nil || len(raw) != len(k) {
		t.Fatalf("cache key %q", r.Header().Get(llmcache.HeaderCacheKey))
	}
	copy(k[:], raw)
	if _, err := os.Stat(filepath.Join(hold, k.String())); err != nil {
		t.Fatalf("the paid answer is not in HoldDir: %v", err)
	}
	return r.Choices[0].Message.Content, k
}

// waitStored waits until c's store has an answer for k.
func waitStored(t *testing.T, c *llmcache.Cache, k llmcache.Key) *llmhook.Answer {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, ok, err := llmhook.Get(c, k)
		if err == nil && ok {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer stored for %v after 10s (err %v)", k, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHoldDir: an answer paid for whose store did not take it is kept in
// HoldDir (sealed with HoldKey) and stored by the next cache opened on the
// directory, which then serves it; a file that does not open (another key,
// or cut short) is removed, and an answer another process stored
// meanwhile is not overwritten.
func TestHoldDir(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	for _, tc := range []struct {
		name          string
		key, nextKey  []byte
		cut           bool // the file cut short, as by a death mid-write
		storedBefore  bool // another process stored an answer for the key first
		wantReclaimed bool
	}{
		{name: "plain", wantReclaimed: true},
		{name: "sealed", key: key, nextKey: key, wantReclaimed: true},
		{name: "another key", key: key, nextKey: bytes.Repeat([]byte{8}, 32)},
		{name: "no key for a sealed file", key: key},
		{name: "cut short", cut: true},
		{name: "stored meanwhile", storedBefore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startModel(t, standin.Options{})
			hold := t.TempDir()
			text, k := stranded(t, m, hold, tc.key)
			path := filepath.Join(hold, k.String())
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if tc.key != nil && bytes.Contains(b, []byte(text)) {
				t.Errorf("the sealed file holds the answer's text")
			}
			if tc.cut {
				if err := os.WriteFile(path, b[:len(b)/2], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			db := openBadger(t)
			var before *llmhook.Answer
			if tc.storedBefore {
				other := storeCache(t, db, llmcache.Options{})
				if _, err := client(t, other, m.URL, "sk-test").CreateChatCompletion(context.Background(), triage("Error rate 7% on checkout")); err != nil {
					t.Fatal(err)
				}
				before = waitStored(t, other, k)
			}
			next := storeCache(t, db, llmcache.Options{HoldDir: hold, HoldKey: tc.nextKey})
			switch {
			case tc.wantReclaimed:
				a := waitStored(t, next, k)
				r, err := client(t, next, m.URL, "sk-test").CreateChatCompletion(context.Background(), triage("Error rate 7% on checkout"))
				if err != nil {
					t.Fatal(err)
				}
				if got := r.Choices[0].Message.Content; got != text || r.Header().Get(llmcache.HeaderCache) != "hit" {
					t.Errorf("asked again: %s %q; want a hit with the paid answer %q (stored: %q)", r.Header().Get(llmcache.HeaderCache), got, text, a.Body)
				}
				if n := completions(m); n != 1 {
					t.Errorf("model calls = %d; want 1", n)
				}
			case tc.storedBefore:
				next.Close() // waits for the retries to end
				a, ok, err := llmhook.Get(next, k)
				if err != nil || !ok || !a.Created.Equal(before.Created) {
					t.Errorf("stored answer after the held one was taken up: %v %v (created %v); want the other process's, created %v", ok, err, a, before.Created)
				}
			default:
				if _, ok, _ := llmhook.Get(next, k); ok {
					t.Errorf("an answer was stored from a file that does not open")
				}
			}
			next.Close()
			if _, err := os.Stat(path); err == nil {
				t.Errorf("the held answer's file is left in HoldDir")
			}
		})
	}
}
