package jsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A KeyValue.Get is a direct get, which any replica of a bucket may answer,
// including one that has not caught up (a node just restarted, or cut off):
// it may miss an answer that is stored. A hit from such a replica is still
// the answer, but a miss that would send the call to the model, and a
// budget read that a compare-and-set depends on, are read from the stream
// leader, which has every acknowledged write, through the stream's
// message-get API.

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

// leaderRead reads key of bucket from the stream leader. found is false
// when the key has no value (never written, expired, or its last message a
// delete marker); rev is then that marker's sequence, or 0.
func (s *Store) leaderRead(ctx context.Context, bucket, key string) (v []byte, rev uint64, found bool, err error) {
	req, err := json.Marshal(msgGetRequest{LastFor: "$KV." + bucket + "." + key})
	if err != nil {
		return nil, 0, false, err
	}
	err = retry(ctx, func(ctx context.Context) error {
		msg, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"STREAM.MSG.GET.KV_"+bucket, req)
		if err != nil {
			return err
		}
		var resp msgGetResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			return fmt.Errorf("decoding message-get response: %w", err)
		}
		if resp.Error != nil {
			if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
				v, rev, found = nil, 0, false
				return nil
			}
			return resp.Error
		}
		m := resp.Message
		if m == nil {
			return errors.New("message-get response without a message")
		}
		v, rev, found = m.Data, m.Sequence, true
		if len(m.Header) > 0 {
			h, err := nats.DecodeHeadersMsg(m.Header)
			if err != nil {
				return fmt.Errorf("key %s: headers: %w", key, err)
			}
			if h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != "" {
				v, found = nil, false
			}
		}
		return nil
	})
	return v, rev, found, err
}

// apiPrefix returns the JetStream API subject prefix that js uses.
func apiPrefix(o jetstream.JetStreamOptions) string {
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
