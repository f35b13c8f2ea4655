package app

import (
	"context"

	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/streamwatch"
)

// startStreamWatch starts polling the trigger stream for each pipeline's
// backlog and for triggers no pipeline reads (see internal/streamwatch),
// until Close.
func (a *App) startStreamWatch() error {
	ps := make([]streamwatch.Pipeline, len(a.Config.Pipelines))
	for i, p := range a.Config.Pipelines {
		ps[i] = streamwatch.Pipeline{Name: p.Name, Durable: consumer.Durable(p.Name), Subject: p.Subject}
	}
	w, err := streamwatch.New(streamwatch.Options{
		JetStream: a.JS, Stream: a.Config.Stream.Name, Pipelines: ps, Metrics: a.Metrics,
		Logger: a.log.With("component", "streamwatch"),
	})
	if err != nil {
		return err
	}
	a.StreamWatch = w
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	// Runs before the NATS connection closes (closers run in reverse).
	a.closers = append(a.closers, func() error { cancel(); <-done; return nil })
	return nil
}
