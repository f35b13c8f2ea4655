package wmonce_test

import (
	"context"
	"fmt"
	"log"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/oncegate/oncegate/contrib/watermill/wmonce"
	"github.com/oncegate/oncegate/pkg/dedupe/badgerledger"
)

// An order delivered three times (the provider retried, with its members
// in another order the last time) is charged once.
func ExampleMiddleware() {
	ledger, err := badgerledger.Open("", badgerledger.Options{InMemory: true}) // a directory, in production
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	once, err := wmonce.Middleware(ledger, wmonce.Options{})
	if err != nil {
		log.Fatal(err)
	}

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		log.Fatal(err)
	}
	router.AddMiddleware(once)
	router.AddConsumerHandler("charge", "orders", pubsub, func(msg *message.Message) error {
		fmt.Println("charging", string(msg.Payload))
		return nil
	})
	go router.Run(context.Background())
	defer router.Close()
	<-router.Running()

	for _, p := range []string{`{"order":7,"amount":120}`, `{"order":7,"amount":120}`, `{"amount":120,"order":7}`} {
		if err := pubsub.Publish("orders", message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("three deliveries acked")
	// Output:
	// charging {"order":7,"amount":120}
	// three deliveries acked
}
