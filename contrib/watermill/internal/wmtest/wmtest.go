// Package wmtest starts what the Watermill tests and the crash comparison
// run against: a NATS server with JetStream on loopback, in the process, and
// a stream with a durable consumer for Watermill's JetStream subscriber.
package wmtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartServer starts a JetStream server on a free loopback port, keeping
// its data in dir. stop shuts it down and waits.
func StartServer(dir string) (s *server.Server, stop func(), err error) {
	s, err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true})
	if err != nil {
		return nil, nil, err
	}
	s.Start()
	stop = func() { s.Shutdown(); s.WaitForShutdown() }
	if !s.ReadyForConnections(10 * time.Second) {
		stop()
		return nil, nil, errors.New("wmtest: nats server not ready in 10s")
	}
	return s, stop, nil
}

// Consumer is the durable consumer name Setup creates on each topic.
const Consumer = "wm"

// Setup creates a stream named topic on the subject topic, and a durable
// pull consumer on it with explicit acks and the given ack wait: what the
// Watermill subscriber from Subscriber consumes.
func Setup(ctx context.Context, js jetstream.JetStream, topic string, ackWait time.Duration) error {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: topic, Subjects: []string{topic}}); err != nil {
		return fmt.Errorf("wmtest: stream %s: %w", topic, err)
	}
	_, err := js.CreateOrUpdateConsumer(ctx, topic, jetstream.ConsumerConfig{
		Durable: Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 64,
	})
	if err != nil {
		return fmt.Errorf("wmtest: consumer on %s: %w", topic, err)
	}
	return nil
}

// Subscriber returns a Watermill JetStream subscriber on nc that consumes
// the durable consumer Setup made, naking with nakDelay.
func Subscriber(nc *nats.Conn, nakDelay time.Duration) (*wmjs.Subscriber, error) {
	return wmjs.NewSubscriber(wmjs.SubscriberConfig{
		Conn:                nc,
		Logger:              watermill.NopLogger{},
		AckWaitTimeout:      time.Minute,
		ResourceInitializer: wmjs.ExistingConsumer(func(string, string) jetstream.ConsumerConfig { return jetstream.ConsumerConfig{Name: Consumer} }, ""),
		NakDelay:            wmjs.NewStaticDelay(nakDelay),
	})
}

// Publisher returns a Watermill JetStream publisher on nc.
func Publisher(nc *nats.Conn) (*wmjs.Publisher, error) {
	return wmjs.NewPublisher(wmjs.PublisherConfig{Conn: nc, Logger: watermill.NopLogger{}})
}

// Settled reports whether the consumer on topic has delivered and had
// acknowledged every message of its stream.
func Settled(ctx context.Context, js jetstream.JetStream, topic string) (bool, error) {
	c, err := js.Consumer(ctx, topic, Consumer)
	if err != nil {
		return false, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0, nil
}

// WaitFor polls cond every 20ms until it is true, or fails with what when
// d has passed.
func WaitFor(d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wmtest: %s: not within %v (last error: %v)", what, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
