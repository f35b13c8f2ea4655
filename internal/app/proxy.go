package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oncegate/oncegate/internal/proxy"
)

// startProxy starts the OpenAI-compatible proxy when the configuration
// turns it on (proxy.listen), in front of the model endpoint and its
// cache, with its metrics beside the process's.
func (a *App) startProxy(o Options) error {
	if !a.Config.ProxyOn() {
		return nil
	}
	keys, err := proxy.LoadKeys(a.Config.Proxy.KeysFile)
	if err != nil {
		return err
	}
	var reg prometheus.Registerer
	if r := a.Metrics.Registry(); r != nil {
		reg = r
	}
	srv, err := proxy.New(proxy.Options{
		Config: &a.Config.Proxy, Keys: keys, Cache: a.Cache,
		Upstream: a.upstream, BaseURL: a.ModelURL, APIKey: a.modelKey, Prices: a.Config.LLM.Prices,
		Registerer: reg, Logger: o.Logger.With("component", "proxy"),
	})
	if err != nil {
		return err
	}
	addr, err := srv.Start()
	if err != nil {
		return err
	}
	a.Proxy, a.ProxyAddr = srv, addr
	// Runs before the cache closes (closers run in reverse): streams in
	// progress finish.
	a.closers = append(a.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), a.Config.LLM.Timeout+5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	})
	o.Logger.Info("OpenAI-compatible proxy", "url", "http://"+addr+"/v1", "clients", keys.Clients(), "model_endpoint", a.ModelURL)
	return nil
}
