package sink_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/oncegate/oncegate/internal/sink"
)

// TestHTTPOneShotSendsOnce: the receiver acts and drops the connection
// without answering, on a connection that was reused. A one-shot sink
// reports the failure without sending the request again; neither its own
// retries nor net/http's replay of requests carrying Idempotency-Key may
// resend it.
func TestHTTPOneShotSendsOnce(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusOK) // the first call answers, so its connection is reused
			return
		}
		panic(http.ErrAbortHandler) // acted, response lost
	}))
	defer srv.Close()
	for _, oneShot := range []bool{true, false} {
		calls.Store(0)
		s, err := sink.NewHTTP(sink.HTTPOptions{URL: srv.URL, OneShot: oneShot, Client: srv.Client(), Backoff: 1})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := s.Deliver(ctx, sink.Effect{Key: "0123456789abcdef0123456789abcdef", Body: []byte(`{}`)}); err != nil {
			t.Fatalf("first delivery: %v", err)
		}
		_, err = s.Deliver(ctx, sink.Effect{Key: "fedcba9876543210fedcba9876543210", Body: []byte(`{}`)})
		if !errors.Is(err, sink.ErrRetryable) {
			t.Errorf("OneShot %v: error %v; want a retryable error", oneShot, err)
		}
		if got := calls.Load() - 1; oneShot && got != 1 {
			t.Errorf("OneShot: the receiver saw the second effect %d times; want 1", got)
		} else if !oneShot && got < 2 {
			t.Errorf("replayable: the receiver saw the second effect %d times; want retries", got)
		}
		s.Close()
	}
}
