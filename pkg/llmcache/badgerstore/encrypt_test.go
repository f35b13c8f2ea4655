package badgerstore_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	badger "github.com/dgraph-io/badger/v4"
	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/pkg/llmcache"
	"github.com/oncegate/oncegate/pkg/llmcache/badgerstore"
	"github.com/oncegate/oncegate/pkg/llmcache/llmtest"
)

// TestMain fails the package's tests if they leave goroutines behind.
// Badger itself leaves two goroutines running when Open fails after it has
// started its caches (TestOpenEncrypted opens with a wrong key on
// purpose): they have no owner to stop them, and are ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/dgraph-io/badger/v4.(*DB).monitorCache"),
		goleak.IgnoreTopFunction("github.com/dgraph-io/ristretto/v2/z.(*AllocatorPool).freeupAllocators"),
	)
}

func startModel(t *testing.T) *llmtest.Server {
	t.Helper()
	m, err := llmtest.NewServer(llmtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// client returns a go-openai client for baseURL through c.
func client(t *testing.T, c *llmcache.Cache, baseURL string) *openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = baseURL
	cfg.HTTPClient = c.HTTPClient(&http.Client{Transport: tr})
	return openai.NewClientWithConfig(cfg)
}

func triage(prompt string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			{Role: openai.ChatMessageRoleSystem, Content: "You triage alerts. Answer with a severity and one line."},
			{Role: openai.ChatMessageRoleUser, Content: prompt},
		},
	}
}

// filesContain reports whether any file below dir holds needle.
func filesContain(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found = found || bytes.Contains(b, needle)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// askAndClose asks the model once through a cache opened with key in dir,
// and returns the answer after closing the cache.
func askAndClose(t *testing.T, m *llmtest.Server, dir string, key []byte, wantCache string) string {
	t.Helper()
	c, err := badgerstore.OpenEncrypted(dir, key, llmcache.Options{})
	if err != nil {
		t.Fatalf("OpenEncrypted: %v", err)
	}
	oc := client(t, c, m.URL)
	ctx := llmcache.WithCall(context.Background(), llmcache.Call{Namespace: "tenant-a", Step: "triage"})
	resp, err := oc.CreateChatCompletion(ctx, triage("Disk /var 93% full on db-2, customer ACME-7731"))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if got := resp.Header().Get(llmcache.HeaderCache); got != wantCache {
		t.Errorf("%s = %q; want %q", llmcache.HeaderCache, got, wantCache)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return resp.Choices[0].Message.Content
}

// TestOpenEncrypted: with a key, the stored answer is nowhere in the
// directory's bytes (without one it is, which shows the search can find
// it); the directory opens again with the key and answers from the cache;
// without the key, with another, or with a key on a plain directory,
// opening fails with ErrEncryptionKey.
func TestOpenEncrypted(t *testing.T) {
	m := startModel(t)
	key := bytes.Repeat([]byte{0x5a}, 32)

	plain := t.TempDir()
	answer := askAndClose(t, m, plain, nil, "miss")
	// Pieces of the answer with nothing JSON would escape: the prompt's
	// customer id, which the answer quotes, and its last words.
	needles := []string{"ACME-7731", answer[len(answer)-24:]}
	for _, n := range needles {
		if !filesContain(t, plain, []byte(n)) {
			t.Fatalf("the plain cache's files do not hold %q of the answer %q: the search below would prove nothing", n, answer)
		}
	}

	enc := t.TempDir()
	if got := askAndClose(t, m, enc, key, "miss"); got != answer {
		t.Fatalf("answer %q; want %q", got, answer)
	}
	for _, needle := range append(needles, "[stand-in model]") {
		if filesContain(t, enc, []byte(needle)) {
			t.Errorf("the encrypted cache's files hold %q in plain text", needle)
		}
	}
	if got := askAndClose(t, m, enc, key, "hit"); got != answer {
		t.Errorf("reopened with the key: answer %q; want %q", got, answer)
	}

	for _, tt := range []struct {
		name string
		dir  string
		key  []byte
	}{
		{"encrypted, no key", enc, nil},
		{"encrypted, another key", enc, bytes.Repeat([]byte{0x11}, 32)},
		{"plain, a key", plain, key},
	} {
		c, err := badgerstore.OpenEncrypted(tt.dir, tt.key, llmcache.Options{})
		if err == nil {
			c.Close()
			t.Errorf("%s: OpenEncrypted succeeded; want ErrEncryptionKey", tt.name)
			continue
		}
		if !errors.Is(err, llmcache.ErrEncryptionKey) || !errors.Is(err, badger.ErrEncryptionKeyMismatch) {
			t.Errorf("%s: error = %v; want ErrEncryptionKey", tt.name, err)
		}
	}
	if _, err := badgerstore.OpenEncrypted(t.TempDir(), []byte("short"), llmcache.Options{}); !errors.Is(err, llmcache.ErrInvalidOptions) {
		t.Errorf("a 5-byte key: error = %v; want ErrInvalidOptions", err)
	}
}
