package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/faults"
	"github.com/oncegate/oncegate/internal/jsretry"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/natsrun"
)

// adminConn is how a command reaches the admin operations: the running
// consumer's service, or the stores opened here.
type adminConn struct {
	api    admin.API
	by     admin.Caller
	remote bool // the operations run in a consumer
	close  func()
}

// openAdmin reaches the admin operations for cfg: through the service of a
// consumer that runs (on the embedded server of the data directory, whose
// URL it left there, or on nats.url), or, when none answers, on the stores
// opened here: the embedded server started on the data directory (or
// nats.url) and the ledger (Badger in the data directory, or the KV
// bucket). Either way the answers are the same.
func openAdmin(ctx context.Context, cfg *config.Config, command string) (*adminConn, error) {
	prefix := admin.Prefix(cfg.Admin.Subject, cfg.Stream.Name)
	name := "oncegate " + command
	var closers []func()
	conn := &adminConn{by: caller(cfg, name), close: func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}}
	fail := func(err error) (*adminConn, error) {
		conn.close()
		return nil, err
	}
	quiet := slog.New(slog.DiscardHandler)
	url, embedded := cfg.NATS.URL, cfg.NATS.URL == ""
	if embedded {
		// A running consumer wrote its server's URL in the data directory;
		// a stale one (the process died) does not answer.
		if b, err := os.ReadFile(filepath.Join(cfg.DataDir, app.URLFile)); err == nil {
			url = strings.TrimSpace(string(b))
		}
	}
	var nc *nats.Conn
	var connErr error // why the URL the data directory names did not take us
	if url != "" {
		cctx, cancel := context.WithTimeout(ctx, cfg.NATS.ConnectTimeout)
		c, err := natsrun.Connect(cctx, url, app.NATSOptions(cfg.NATS, name, quiet))
		cancel()
		connErr = err
		switch {
		case err != nil && !embedded:
			return fail(err)
		case err == nil:
			nc = c
			closers = append(closers, func() { natsrun.Close(c) })
			cl := admin.NewClient(c, prefix)
			if err := hello(ctx, c, cl, !embedded, cfg.Ledger.Store == config.StoreKV); err == nil {
				conn.api, conn.remote = cl, true
				return conn, nil
			} else if !errors.Is(err, admin.ErrNoService) {
				return fail(err)
			}
			if embedded {
				return fail(fmt.Errorf("a consumer runs on %s (its server is at %s) but does not serve the admin service (admin.off); stop it, or turn the service on", cfg.DataDir, url))
			}
		}
	}
	// No consumer answers: open the stores here.
	if nc == nil {
		if err := haveData(cfg.DataDir); err != nil {
			return fail(err)
		}
		ecfg := cfg.NATS
		ecfg.Embedded.Listen = "127.0.0.1:0"
		e, err := natsrun.StartEmbeddedAuth(cfg.DataDir, app.NATSOptions(ecfg, "", quiet))
		if errors.Is(err, natsrun.ErrStoreInUse) && connErr != nil {
			return fail(fmt.Errorf("a consumer holds %s, and its server at %s did not take this client: %w", cfg.DataDir, url, connErr))
		}
		if errors.Is(err, natsrun.ErrStoreInUse) {
			return fail(fmt.Errorf("a consumer holds %s but left no address in %s: give -nats-url: %w", cfg.DataDir, app.URLFile, err))
		}
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = e.Shutdown(sctx)
		})
		if nc, err = natsrun.Connect(ctx, e.ClientURL(), app.NATSOptions(cfg.NATS, name, quiet)); err != nil {
			return fail(err)
		}
		closers = append(closers, func() { natsrun.Close(nc) })
	}
	// The ledger: a bucket whose leader is being elected (a node of the
	// cluster coming back) answers after a while; wait for it, a while.
	var l ledger.Ledger
	var closeLedger func()
	moveOn := func() {}
	if !embedded {
		// This server may be cut off from the others (a partition): try
		// another of the pool.
		moveOn = func() { _ = nc.ForceReconnect() }
	}
	if err := retryOpen(ctx, moveOn, func(ctx context.Context) (err error) {
		l, closeLedger, err = openLocalLedger(ctx, cfg, nc)
		return err
	}); err != nil {
		return fail(err)
	}
	if closeLedger != nil {
		closers = append(closers, closeLedger)
	}
	a, err := admin.New(admin.Options{Config: cfg, Conn: nc, Ledger: l, Owner: name})
	if err != nil {
		return fail(err)
	}
	closers = append(closers, a.Close)
	conn.api = a
	return conn, nil
}

// openLocalLedger opens the ledger for a command run with no consumer, as
// the consumer opens it (app.OpenLedger): nil if no pipeline has one. A
// Badger ledger must exist already: a command does not make one.
func openLocalLedger(ctx context.Context, cfg *config.Config, nc *nats.Conn) (ledger.Ledger, func(), error) {
	if !app.NeedsLedger(cfg) {
		return nil, nil, nil
	}
	var js jetstream.JetStream
	if cfg.Ledger.Store == config.StoreKV {
		var err error
		if js, err = jetstream.New(nc); err != nil {
			return nil, nil, err
		}
	} else if err := haveData(cfg.BadgerDir()); err != nil {
		return nil, nil, err
	}
	// In an oncegate_faults build the soak records this process's ledger
	// operations (a redrive's Clear) beside the replicas'.
	l, closeLedger, err := app.OpenLedger(ctx, cfg, js, app.OpenLedgerOptions{Wrap: faults.WrapLedger()})
	if errors.Is(err, app.ErrLedgerInUse) {
		return nil, nil, fmt.Errorf("%s is held by a running consumer whose admin service does not answer (is admin.off set, or -nats-url wrong?): %w", cfg.BadgerDir(), err)
	}
	if err != nil {
		return nil, nil, err
	}
	return l, func() { closeLedger() }, nil
}

// helloTimeout bounds one Hello; helloFor all of them, and noServiceFor
// how long replicas sharing a ledger are waited for when none answers.
const (
	helloTimeout = 5 * time.Second
	helloFor     = 30 * time.Second
	noServiceFor = 15 * time.Second
)

// hello asks whether a consumer serves the admin operations on nc. A
// request no replica answers in time (one paused, or busy) is made again,
// for helloFor. When replicas share the ledger (shared), one that finds no
// service is made again too, for noServiceFor (the replicas may be
// restarting), and, with a pool of servers (a cluster), from another
// server of the pool (this one may be cut off from the others): opening
// the stores here is for when no consumer runs. It returns nil, an error
// wrapping admin.ErrNoService, or the last error.
func hello(ctx context.Context, nc *nats.Conn, cl *admin.Client, pool, shared bool) error {
	start := time.Now()
	deadline := start.Add(helloFor)
	moved := 0
	for {
		hctx, cancel := context.WithTimeout(ctx, helloTimeout)
		_, err := cl.Hello(hctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil || time.Now().After(deadline):
			return err
		case errors.Is(err, admin.ErrNoService):
			if !shared || time.Since(start) > noServiceFor {
				return err
			}
			// Replicas share the ledger: they may be restarting (waited
			// for, helloFor), or this server cut off from them.
			if pool && moved < 2 && len(nc.Servers()) > 1 {
				moved++
				_ = nc.ForceReconnect()
			}
			rctx, cancel := context.WithTimeout(ctx, helloTimeout)
			for !nc.IsConnected() && rctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if !sleepCtx(ctx, 500*time.Millisecond) {
				return err
			}
		case !jsretry.Transient(err) && !errors.Is(err, nats.ErrTimeout):
			return err
		}
	}
}

// sleepCtx waits d, or until ctx is done; it reports whether it waited d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryOpen calls open until it succeeds, or fails for good, or
// storeOpenTimeout runs out. Each attempt has a bound of its own
// (storeAttemptTimeout): a request a cluster dropped while it had no leader
// is never answered, and an attempt bounded by the whole storeOpenTimeout
// waited for it to the end. After an attempt that ran out of time, moveOn
// is called before the next.
func retryOpen(ctx context.Context, moveOn func(), open func(context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, acancel := context.WithTimeout(octx, storeAttemptTimeout)
		err := open(actx)
		acancel()
		if err == nil {
			return nil
		}
		if !jsretry.Transient(err) || octx.Err() != nil {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			moveOn()
		}
		select {
		case <-time.After(wait):
		case <-octx.Done():
			return err
		}
	}
}

// storeOpenTimeout bounds how long a command waits for the stores it opens
// itself (no consumer answering) to answer.
const storeOpenTimeout = time.Minute

// storeAttemptTimeout bounds one attempt to open them: the ledger's bucket
// is opened by a few JetStream API requests, each answered in milliseconds
// by a cluster with a leader.
const storeAttemptTimeout = 5 * time.Second

// caller names the person running a command: the NATS user the
// configuration connects as, else the OS user, and the host.
func caller(cfg *config.Config, name string) admin.Caller {
	who := cfg.NATS.User
	if who == "" {
		if u, err := user.Current(); err == nil {
			who = u.Username
		}
	}
	if host, err := os.Hostname(); err == nil {
		who += "@" + host
	}
	return admin.Caller{Name: name, User: who}
}
