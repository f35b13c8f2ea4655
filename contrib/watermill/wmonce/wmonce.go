// Package wmonce puts Oncegate's effect gate in front of a Watermill
// handler: the handler runs once per intent key, however often its message
// is delivered, by however many router instances share the ledger.
//
//	ledger, err := badgerledger.Open("data/ledger", badgerledger.Options{})
//	if err != nil {
//		return err
//	}
//	defer ledger.Close()
//	once, err := wmonce.Middleware(ledger, wmonce.Options{})
//	if err != nil {
//		return err
//	}
//	router.AddConsumerHandler("charge", "orders", subscriber, func(msg *message.Message) error {
//		return charge(msg.Context(), msg.Payload) // runs once per order
//	})
//	router.AddMiddleware(once)
//
// For each message the middleware derives the intent key (by default from
// the canonical JSON payload) and runs the handler through the ledger's Do
// ([dedupe.Ledger]):
//
//   - a new key is claimed in the ledger, its lease renewed while the
//     handler runs, and the handler's outcome committed before the router
//     acks the message; the messages the handler produced are stored with
//     the commit. The message's context, while the handler runs, carries
//     the intent ([dedupe.IntentFrom]: send its key downstream as the
//     effect's idempotency key) and ends if the claim is lost;
//   - a key committed before is acked without running the handler, and the
//     router publishes the stored messages again (with their original
//     UUIDs, so a subscriber or a stream that dedupes by id drops them);
//   - a key another instance holds returns a [*dedupe.HeldError]: the
//     router nacks the message for a later retry
//     (give the subscriber a nack delay, such as watermill-nats's
//     NakDelay);
//   - a key whose holder died mid-work is taken over and the handler runs
//     again: [dedupe.TakenOver] on the message's context reports it, so a
//     one-shot effect can reconcile first;
//   - an error of the handler releases the claim and is returned (the
//     router nacks); one marked [dedupe.Permanent] records the work as
//     given up, and later deliveries of the key are acked and dropped.
//
// The produced messages are stored in the ledger record, so they must fit
// its result limit (64 KiB): a commit that does not fit fails
// after the handler ran, and the message is retried as a taken-over key. A
// handler whose output is larger should publish it itself, keyed.
//
// Use a ledger that survives the process (package badgerledger for one
// process, jskv for several): a crash after the commit and before the ack
// then redelivers a message whose work is done, and the handler does not
// run again. A crash after the effect and before the commit still runs it
// again, as a taken-over key; see [dedupe.Ledger].
package wmonce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// ErrUnkeyable is wrapped by the handler error for a message the key
// function cannot key (for the default, a payload that is not I-JSON). The
// router nacks it like any error; put Watermill's poison queue middleware
// outside this one to set such messages aside.
var ErrUnkeyable = errors.New("wmonce: message has no intent key")

// Options configures [Middleware]. The zero value is ready to use.
type Options struct {
	// Key derives a message's intent: its key and its payload fingerprint.
	// The default keys the whole canonical JSON payload with Keyer.
	Key func(msg *message.Message) (dedupe.Intent, error)
	// Keyer is the default Key's keyer. The default keys the whole payload
	// under the pipeline "watermill" and step "handler".
	Keyer *dedupe.Keyer
	// Owner names this instance in the ledger's records. The default is
	// "wmonce".
	Owner string
	// Lease is how long a claim holds between renewals while the handler
	// runs; a crashed instance's keys are taken over after it. The default
	// is 30s.
	Lease time.Duration
}

// Middleware returns the Watermill middleware that runs its handler once
// per intent key, through l. The caller owns l.
func Middleware(l dedupe.Ledger, opts Options) (message.HandlerMiddleware, error) {
	if l == nil {
		return nil, errors.New("wmonce: nil ledger")
	}
	if opts.Key == nil {
		k := opts.Keyer
		if k == nil {
			var err error
			if k, err = dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "watermill", Step: "handler"}); err != nil {
				return nil, err
			}
		}
		opts.Key = func(msg *message.Message) (dedupe.Intent, error) { return k.Intent(msg.Payload) }
	}
	if opts.Owner == "" {
		opts.Owner = "wmonce"
	}
	do := dedupe.DoOptions{Owner: opts.Owner, Lease: opts.Lease, NoWait: true}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			in, err := opts.Key(msg)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnkeyable, err)
			}
			var produced []*message.Message
			fn := func(ctx context.Context) (dedupe.Result, error) {
				parent := msg.Context()
				msg.SetContext(ctx)
				out, err := h(msg)
				msg.SetContext(parent)
				if err != nil {
					return dedupe.Result{}, err
				}
				b, err := encodeMessages(out)
				if err != nil {
					return dedupe.Result{}, err
				}
				produced = out
				return dedupe.Result{Response: b}, nil
			}
			res, ran, err := l.Do(msg.Context(), in, fn, do)
			switch {
			case errors.Is(err, dedupe.ErrGivenUp):
				return nil, nil // given up before: ack and drop
			case err != nil:
				return nil, err
			case ran:
				return produced, nil
			}
			return decodeMessages(res.Response)
		}
	}, nil
}

// stored is a produced message as the ledger keeps it.
type stored struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload"`
}

func encodeMessages(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	out := make([]stored, len(msgs))
	for i, m := range msgs {
		out[i] = stored{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return json.Marshal(out)
}

func decodeMessages(b []byte) ([]*message.Message, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var in []stored
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("wmonce: decoding the stored messages: %w", err)
	}
	out := make([]*message.Message, len(in))
	for i, s := range in {
		m := message.NewMessage(s.UUID, s.Payload)
		for k, v := range s.Metadata {
			m.Metadata.Set(k, v)
		}
		out[i] = m
	}
	return out, nil
}
