package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/internal/sink"
)

// demoRedrive is the demo's last act: the receiver of the webhooks has a
// bug that refuses a few invoices for good (a 400), so their triggers are
// dead-lettered; once everything has settled the bug is fixed and the
// demo redrives those dead letters, as an operator would with consumer
// redrive, and reads the effect stream to show each intent done once.
type demoRedrive struct {
	mu       sync.Mutex
	fixed    bool
	invoices []string        // the invoices the bug refuses
	refused  map[string]bool // their intent keys, once refused

	reply admin.RedriveReply
	took  map[string]int // effects of the refused intents in the stream, after the redrive
}

// demoRedrivePipeline is the pipeline whose receiver has the bug.
const demoRedrivePipeline = "webhooks"

func newDemoRedrive(hooks int) *demoRedrive {
	d := &demoRedrive{refused: map[string]bool{}}
	seen := map[int]bool{}
	for _, i := range []int{hooks / 7, hooks / 2, hooks - 3} {
		if i >= 0 && i < hooks && !seen[i] {
			seen[i] = true
			d.invoices = append(d.invoices, fmt.Sprintf(`"id":"in_%05d"`, i))
		}
	}
	return d
}

// wrap puts the bug in front of the webhooks pipeline's sink.
func (d *demoRedrive) wrap(pipeline string, s sink.Sink) sink.Sink {
	if pipeline != demoRedrivePipeline {
		return s
	}
	return &refusingSink{Sink: s, d: d}
}

// refusingSink answers the effects of the chosen invoices with a
// permanent error until the bug is fixed.
type refusingSink struct {
	sink.Sink
	d *demoRedrive
}

func (r *refusingSink) Deliver(ctx context.Context, e sink.Effect) (sink.Result, error) {
	d := r.d
	d.mu.Lock()
	refuse := false
	if !d.fixed {
		for _, inv := range d.invoices {
			refuse = refuse || containsBytes(e.Body, inv)
		}
		if refuse {
			d.refused[e.Key] = true
		}
	}
	d.mu.Unlock()
	if refuse {
		return sink.Result{}, &sink.Error{Sink: "demo", Key: e.Key, Err: errors.New("400 Bad Request: the receiver does not know this invoice's fields (a bug, fixed later in the demo)")}
	}
	return r.Sink.Deliver(ctx, e)
}

func containsBytes(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}

// run fixes the bug, redrives the dead letters it caused, waits until
// everything has settled again, and counts the effects of the refused
// intents.
func (d *demoRedrive) run(ctx context.Context, a *app.App, js jetstream.JetStream, deadline time.Time) error {
	d.mu.Lock()
	d.fixed = true
	d.mu.Unlock()
	var err error
	d.reply, err = a.Admin.Redrive(ctx, admin.RedriveRequest{
		Selection: admin.Selection{Pipeline: demoRedrivePipeline, Reason: string(outcome.ReasonPermanentEffect), Limit: admin.MaxLimit},
		Yes:       true, By: admin.Caller{Name: "consumer demo", User: "demo"},
	})
	if err != nil {
		return fmt.Errorf("demo: redrive: %w", err)
	}
	for {
		left, err := a.Outstanding(ctx)
		if err != nil {
			return err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: %d triggers still unsettled after the redrive", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	d.took = map[string]int{}
	st, err := js.Stream(ctx, a.Config.Stream.Name+"_EFFECTS")
	if err != nil {
		return err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"effects." + demoRedrivePipeline}})
	if err != nil {
		return err
	}
	for {
		b, err := cons.FetchNoWait(256)
		if err != nil {
			return err
		}
		n := 0
		for m := range b.Messages() {
			n++
			if k := m.Headers().Get(nats.MsgIdHdr); d.refused[k] {
				d.took[k]++
			}
		}
		if n == 0 {
			return nil
		}
	}
}

// deadLetters is how many dead letters the bug caused: each trigger of a
// refused intent, the duplicates that found its failure included.
func (d *demoRedrive) deadLetters() int { return len(d.reply.Results) }

// redriven is how many dead letters the redrive republished.
func (d *demoRedrive) redriven() int {
	n := 0
	for _, r := range d.reply.Results {
		if r.Outcome == admin.OutcomeRedriven {
			n++
		}
	}
	return n
}

// report prints the redrive's lines and returns an error unless every
// refused intent was taken once.
func (d *demoRedrive) report(w io.Writer) error {
	redriven, once := d.redriven(), 0
	for k := range d.refused {
		if d.took[k] == 1 {
			once++
		}
	}
	fmt.Fprintf(w, "redriven after the fix\t%d\t(a receiver bug refused %d webhooks for good: %d dead letters, duplicates included; fixed, then redriven with the admin service, fenced by the ledger)\n",
		redriven, len(d.refused), d.deadLetters())
	fmt.Fprintf(w, "  taken by the fixed receiver\t%d\t(of %d refused intents, each effect exactly once)\n", once, len(d.refused))
	if once != len(d.refused) || redriven == 0 && len(d.refused) > 0 {
		return fmt.Errorf("demo: after the redrive, %d of %d refused intents have exactly one effect (%v)", once, len(d.refused), d.took)
	}
	return nil
}
