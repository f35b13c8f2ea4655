package natsrun

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode"

	"github.com/nats-io/nats-server/v2/server"
)

// LevelTrace is the slog level of the embedded server's trace records,
// below slog.LevelDebug. StartEmbedded leaves server tracing off: it logs
// every protocol line, message payloads included.
const LevelTrace = slog.LevelDebug - 4

// serverLogger routes the embedded server's log to a *slog.Logger:
// notices at Info (but the banner at Debug), warnings at Warn, errors and fatal errors at Error,
// debug at Debug and traces at LevelTrace. A fatal error does not exit the
// process; its text is kept for StartEmbedded to report.
type serverLogger struct {
	log *slog.Logger

	mu    sync.Mutex
	fatal string // the first fatal error's text
}

var _ server.Logger = (*serverLogger)(nil)

func (l *serverLogger) logf(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.Log(ctx, level, fmt.Sprintf(format, v...))
}

// Noticef implements server.Logger. The server's start-up banner, lines
// of ASCII art without a letter or digit, goes to Debug.
func (l *serverLogger) Noticef(format string, v ...any) {
	level := slog.LevelInfo
	if len(v) == 0 && !strings.ContainsFunc(format, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		level = slog.LevelDebug
	}
	l.logf(level, format, v)
}

// Warnf implements server.Logger.
func (l *serverLogger) Warnf(format string, v ...any) { l.logf(slog.LevelWarn, format, v) }

// Errorf implements server.Logger.
func (l *serverLogger) Errorf(format string, v ...any) { l.logf(slog.LevelError, format, v) }

// Debugf implements server.Logger.
func (l *serverLogger) Debugf(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }

// Tracef implements server.Logger.
func (l *serverLogger) Tracef(format string, v ...any) { l.logf(LevelTrace, format, v) }

// Fatalf implements server.Logger. Unlike the server's own logger it does
// not exit: the embedded server's failure is StartEmbedded's error (or,
// later, an error record), not the end of the process.
func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.log.Error(msg, "fatal", true)
}

// fatalText returns the first fatal error's text, or "".
func (l *serverLogger) fatalText() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}
