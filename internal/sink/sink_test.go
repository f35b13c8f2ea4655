package sink_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/sink"
)

// Intent keys for the tests.
const (
	key1 = "0123456789abcdef0123456789abcdef"
	key2 = "fedcba9876543210fedcba9876543210"
)

// class names how err is classified: "ok", "permanent", "retryable", or
// "unclassified" if it is not a *sink.Error matching exactly one sentinel.
func class(err error) string {
	if err == nil {
		return "ok"
	}
	var serr *sink.Error
	perm, retry := errors.Is(err, sink.ErrPermanent), errors.Is(err, sink.ErrRetryable)
	switch {
	case !errors.As(err, &serr) || perm == retry:
		return "unclassified"
	case perm:
		return "permanent"
	}
	return "retryable"
}

// checkClass fails t unless err is classified as want and its text has
// the package prefix.
func checkClass(t *testing.T, what string, err error, want string) {
	t.Helper()
	if got := class(err); got != want {
		t.Fatalf("%s: error %v is %s; want %s", what, err, got, want)
	}
	if err != nil && !strings.HasPrefix(err.Error(), "sink: ") {
		t.Errorf("%s: error %q lacks the \"sink: \" prefix", what, err)
	}
}

func TestErrorIs(t *testing.T) {
	cause := errors.New("boom")
	for _, tt := range []struct {
		name      string
		err       *sink.Error
		wantText  string
		wantClass string
	}{
		{"retryable", &sink.Error{Sink: "http", Key: key1, Retryable: true, Err: cause}, "sink: http: key " + key1 + ": boom", "retryable"},
		{"permanent without key", &sink.Error{Sink: "file", Err: cause}, "sink: file: boom", "permanent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.wantText {
				t.Errorf("Error() = %q; want %q", got, tt.wantText)
			}
			if got := class(tt.err); got != tt.wantClass {
				t.Errorf("class = %s; want %s", got, tt.wantClass)
			}
			if !errors.Is(tt.err, cause) {
				t.Errorf("errors.Is(%v, cause) = false; want true", tt.err)
			}
		})
	}
}
