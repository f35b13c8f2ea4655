// Package kvlast reads a key of a JetStream KV bucket from the leader of
// the bucket's stream.
//
// A KeyValue.Get is a direct get, which any replica of a bucket may answer
// (and any mirror of it), including one that has not caught up: a node
// just restarted, or cut off. The stream's message-get API is answered by
// the stream leader only, which has every acknowledged write. Oncegate's
// ledger and shared LLM cache read from the leader where a stale "no
// value" would cost a second effect or a second paid call, or where a
// compare-and-set depends on the revision read.
package kvlast

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrHeaders is returned, wrapped, when the message read has headers that
// do not decode.
var ErrHeaders = errors.New("kvlast: message headers do not decode")

// An Entry is the latest message of a key.
type Entry struct {
	// Value is the key's value; nil when Found is false.
	Value []byte
	// Revision is the message's stream sequence, which a compare-and-set
	// write must expect: a value's, or a tombstone's when Found is false
	// (a delete or purge marker, or the marker a bucket with
	// LimitMarkerTTL leaves when a value expires); 0 when the key has no
	// message at all.
	Revision uint64
	// Found reports whether the key has a value.
	Found bool
}

// A Reader reads the keys of one bucket from its stream's leader.
type Reader struct {
	nc     *nats.Conn
	getSub string // the stream's message-get API subject
	keySub string // "$KV.<bucket>."
}

// NewReader returns a Reader of bucket, reached through nc under the API
// prefix of js's options (a custom prefix, or a domain's).
func NewReader(nc *nats.Conn, o jetstream.JetStreamOptions, bucket string) *Reader {
	return &Reader{nc: nc, getSub: APIPrefix(o) + "STREAM.MSG.GET.KV_" + bucket, keySub: "$KV." + bucket + "."}
}

// KeySubject returns the subject the values of key are written to, with
// no API prefix.
func (r *Reader) KeySubject(key string) string { return r.keySub + key }

// kvOperationHeader marks a delete or purge marker: DEL or PURGE.
const kvOperationHeader = "KV-Operation"

type msgGetRequest struct {
	LastFor string `json:"last_by_subj"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *struct {
		Sequence uint64 `json:"seq"`
		Header   []byte `json:"hdrs,omitempty"`
		Data     []byte `json:"data,omitempty"`
	} `json:"message,omitempty"`
}

// Get reads the latest message of key from the stream leader, in one
// request. The server's errors are returned as *jetstream.APIError; a key
// with no message is not an error.
func (r *Reader) Get(ctx context.Context, key string) (Entry, error) {
	req, err := json.Marshal(msgGetRequest{LastFor: r.keySub + key})
	if err != nil {
		return Entry{}, err
	}
	msg, err := r.nc.RequestWithContext(ctx, r.getSub, req)
	if err != nil {
		return Entry{}, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return Entry{}, fmt.Errorf("kvlast: decoding message-get response: %w", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return Entry{}, nil
		}
		return Entry{}, resp.Error
	}
	m := resp.Message
	if m == nil {
		return Entry{}, errors.New("kvlast: message-get response without a message")
	}
	if len(m.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(m.Header)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: key %s: %w", ErrHeaders, key, err)
		}
		if h.Get(kvOperationHeader) != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
			return Entry{Revision: m.Sequence}, nil
		}
	}
	return Entry{Value: m.Data, Revision: m.Sequence, Found: true}, nil
}

// APIPrefix returns the JetStream API subject prefix, ending in a dot, that
// a JetStream context with options o uses.
func APIPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		if o.APIPrefix[len(o.APIPrefix)-1] != '.' {
			return o.APIPrefix + "."
		}
		return o.APIPrefix
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}
