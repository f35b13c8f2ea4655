package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/contrib/watermill/internal/wmtest"
	"github.com/oncegate/oncegate/contrib/watermill/wmonce"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// The child's settings come in its environment.
const (
	childEnv   = "ONCEGATE_CRASHCMP_CHILD"
	envURL     = "CRASHCMP_URL"
	envMode    = "CRASHCMP_MODE"
	envLedger  = "CRASHCMP_LEDGER"
	envEffects = "CRASHCMP_EFFECTS"
	envKill    = "CRASHCMP_KILL"     // the kill point, or empty
	envKillKey = "CRASHCMP_KILL_KEY" // the payload to kill at
)

const (
	topic    = "orders"
	ackWait  = time.Second            // a killed child's message comes back after it
	lease    = 2 * time.Second        // a killed child's claim is taken over after it
	nakDelay = 200 * time.Millisecond // a held intent is retried after it
)

// child runs the consumer: a Watermill router on the stream, with the
// scenario's middleware, until SIGTERM, or until it kills itself.
func child() int {
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "crashcmp child:", err)
		return 1
	}
	return 0
}

func runChild() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	mode, kill, killKey := os.Getenv(envMode), os.Getenv(envKill), []byte(os.Getenv(envKillKey))
	nc, err := nats.Connect(os.Getenv(envURL))
	if err != nil {
		return err
	}
	defer nc.Close()
	sub, err := wmtest.Subscriber(nc, nakDelay)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(os.Getenv(envEffects), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	killHere := func(msg *message.Message, point string) {
		if kill == point && bytes.Equal(msg.Payload, killKey) {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}

	// The handler's effect: a line per run, appended (a write a SIGKILL
	// does not undo: it is in the page cache when write returns).
	handler := func(msg *message.Message) ([]*message.Message, error) {
		if mode == ModeReconcile && dedupe.TakenOver(msg.Context()) {
			// The previous holder died mid-work: ask the world whether
			// the effect happened before doing it again.
			b, err := os.ReadFile(f.Name())
			if err != nil {
				return nil, err
			}
			if bytes.Contains(b, append(append([]byte(nil), msg.Payload...), '\n')) {
				return nil, nil
			}
		}
		if _, err := f.Write(append(append([]byte(nil), msg.Payload...), '\n')); err != nil {
			return nil, err
		}
		killHere(msg, KillAfterEffect)
		return nil, nil
	}

	var gate message.HandlerMiddleware
	switch mode {
	case ModeWatermill:
		gate = (&middleware.Deduplicator{}).Middleware // the defaults: payload hash, 1-minute in-memory repository
	case ModeOncegate, ModeReconcile:
		l, err := badgerledger.Open(os.Getenv(envLedger), badgerledger.Options{})
		if err != nil {
			return err
		}
		defer l.Close()
		if gate, err = wmonce.Middleware(l, wmonce.Options{Lease: lease, Owner: fmt.Sprintf("crashcmp-%d", os.Getpid())}); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown mode %q", mode)
	}
	// Outermost: the kill between a successful chain and the router's ack.
	beforeAck := func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				killHere(msg, KillBeforeAck)
			}
			return out, err
		}
	}

	r, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	r.AddNoPublisherHandler("orders", topic, sub, func(msg *message.Message) error {
		_, err := beforeAck(gate(handler))(msg)
		return err
	})
	return r.Run(ctx)
}
