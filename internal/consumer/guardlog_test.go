package consumer_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/standin"
)

// lockedBuffer is a bytes.Buffer a logger may write from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDuplicateLogsGuard: at debug level, a duplicate dropped says which
// guard caught it, with its key and message.
func TestDuplicateLogsGuard(t *testing.T) {
	var logs lockedBuffer
	f := start(t, nil, standin.Options{}, func(o *consumer.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	f.publish("triggers.webhooks", []byte(`{"delivery_id":"d-1","event":"invoice.paid","invoice":{"id":"in_1"}}`))
	waitFor(t, 10*time.Second, "the first trigger's effect", func() bool { return f.stats("webhooks").Effects == 1 }, f)
	// The provider's retry: a new delivery id, the same work.
	f.publish("triggers.webhooks", []byte(`{"delivery_id":"d-2","event":"invoice.paid","invoice":{"id":"in_1"}}`))
	waitFor(t, 10*time.Second, "the retry dropped by the window", func() bool { return f.stats("webhooks").DuplicatesWindow == 1 }, f)

	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "duplicate dropped") {
			line = l
		}
	}
	for _, want := range []string{"pipeline=webhooks", "guard=window", "key=", "msg=ONCEGATE:2"} {
		if !strings.Contains(line, want) {
			t.Errorf("duplicate log line %q: no %s", line, want)
		}
	}
}
