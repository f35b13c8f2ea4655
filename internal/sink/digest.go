package sink

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/internal/tmpl"
)

// DigestHeader, on an [Effect] for an [HTTP] sink with a [Digest], names
// the effect's group; the sink does not send it.
const DigestHeader = "Oncegate-Digest"

// Digest gathers an [HTTP] sink's effects of one group into one request:
// the first effect of a group waits Window for others, then the bodies of
// all are merged and sent once, under the first's key. Each Deliver of the
// digest returns that request's outcome. An effect without a
// [DigestHeader] is sent alone.
type Digest struct {
	// Window is how long the first effect of a group waits for others.
	// Required.
	Window time.Duration
	// Merge makes one body of several, in the order they came. Required;
	// [MergeSlack] merges Slack messages.
	Merge func(bodies [][]byte) ([]byte, error)
}

// digests holds the groups waiting to be sent.
type digests struct {
	Digest
	mu   sync.Mutex
	open map[string]*digestBatch
}

type digestBatch struct {
	bodies [][]byte
	done   chan struct{}
	res    Result
	err    error
}

// join adds body to group's batch, and reports whether the caller opened
// it (and sends it).
func (d *digests) join(group string, body []byte) (*digestBatch, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, ok := d.open[group]
	if !ok {
		b = &digestBatch{done: make(chan struct{})}
		d.open[group] = b
	}
	b.bodies = append(b.bodies, body)
	return b, !ok
}

// close ends group's batch: later effects of the group open another.
func (d *digests) close(group string, b *digestBatch) [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.open[group] == b {
		delete(d.open, group)
	}
	return b.bodies
}

// deliverDigest sends e as part of its group's digest.
func (s *HTTP) deliverDigest(ctx context.Context, e Effect, group string, send func(ctx context.Context, body []byte) (Result, error)) (Result, error) {
	b, first := s.digest.join(group, e.Body)
	if !first {
		select {
		case <-b.done:
			return b.res, b.err
		case <-ctx.Done():
			// The digest may go out with this message in it all the same:
			// its outcome is unknown to this caller.
			return Result{}, &Error{Sink: "http", Key: e.Key, Retryable: true, Err: errors.New("waiting for the digest it is part of: " + ctx.Err().Error())}
		}
	}
	defer close(b.done)
	// The others wait on this one: the wait and the send go on whatever
	// becomes of this caller's context, within the sink's bounds.
	s.wait(context.WithoutCancel(ctx), s.digest.Window)
	bodies := s.digest.close(group, b)
	body := bodies[0]
	if len(bodies) > 1 {
		var err error
		if body, err = s.digest.Merge(bodies); err != nil {
			b.err = &Error{Sink: "http", Key: e.Key, Err: err}
			return b.res, b.err
		}
	}
	b.res, b.err = send(context.WithoutCancel(ctx), body)
	return b.res, b.err
}

// MergeSlack merges Slack incoming-webhook messages into one: their texts,
// one a line, as the text and a section block, cut to Slack's 3000
// characters outside an escape.
func MergeSlack(bodies [][]byte) ([]byte, error) {
	texts := make([]string, 0, len(bodies))
	for _, b := range bodies {
		var m struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, errors.New("a Slack message of the digest is not a JSON object with a text")
		}
		texts = append(texts, m.Text)
	}
	text := tmpl.TruncateMrkdwn(slackTextBytes, strings.Join(texts, "\n"))
	return json.Marshal(map[string]any{
		"text":   text,
		"blocks": []any{map[string]any{"type": "section", "text": map[string]string{"type": "mrkdwn", "text": text}}},
	})
}
