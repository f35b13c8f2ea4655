package natsrun_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oncegate/oncegate/internal/natsrun"
)

// TestMain fails the package's tests if they leave goroutines behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// discard is a logger that drops everything.
var discard = slog.New(slog.DiscardHandler)

// waitTimeout bounds every wait on a condition in these tests.
const waitTimeout = 15 * time.Second

// logRecorder is an io.Writer for a slog text handler that keeps every
// record and wakes waiters on each write.
type logRecorder struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on each write
}

// newLogRecorder returns a recorder and a logger, at natsrun.LevelTrace,
// writing to it.
func newLogRecorder() (*logRecorder, *slog.Logger) {
	r := &logRecorder{changed: make(chan struct{})}
	return r, slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: natsrun.LevelTrace}))
}

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(p)
	close(r.changed)
	r.changed = make(chan struct{})
	return len(p), nil
}

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// waitFor waits until the log holds substr, failing t after waitTimeout.
func (r *logRecorder) waitFor(t *testing.T, substr string) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok, changed := strings.Contains(r.buf.String(), substr), r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("log has no %q after %v; log:\n%s", substr, waitTimeout, r.String())
		}
	}
}

// assertNoSecrets fails t if text holds any of secrets.
func assertNoSecrets(t *testing.T, what, text string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds the secret %q:\n%s", what, s, text)
		}
	}
}

// writeFile writes content to a new file named name in a fresh temporary
// directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
