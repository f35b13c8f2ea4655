package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/ingress"
)

// startIngress starts the webhook ingress when the configuration turns
// it on (ingress.listen), with its metrics beside the process's.
func (a *App) startIngress(o Options) error {
	if !a.Config.IngressOn() {
		return nil
	}
	var reg prometheus.Registerer
	if r := a.Metrics.Registry(); r != nil {
		reg = r
	}
	io := IngressOptions(&a.Config.Ingress)
	io.JetStream, io.Registerer = a.JS, reg
	io.Logger, io.Getenv = o.Logger.With("component", "ingress"), o.Getenv
	srv, err := ingress.New(io)
	if err != nil {
		return err
	}
	addr, err := srv.Start()
	if err != nil {
		return err
	}
	a.Ingress, a.IngressAddr = srv, addr
	// Runs before the NATS connection closes (closers run in reverse):
	// requests in progress get their PubAck, or their 503.
	a.closers = append(a.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), a.Config.Ingress.PublishTimeout+5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	})
	names := make([]string, len(a.Config.Ingress.Sources))
	for i, s := range a.Config.Ingress.Sources {
		names[i] = s.Name
	}
	o.Logger.Info("webhook ingress", "url", "http://"+addr+ingress.PathPrefix+"<source>", "sources", names)
	return nil
}
