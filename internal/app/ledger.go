package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/internal/ledger/sealed"
)

// LedgerOptions translates the ledger section of the configuration into
// the store-independent ledger.Options: the retention and the mismatch
// policy. The rest of the section is OpenLedger's (the store and its
// bucket) and the consumer's (the lease, the clock skew); MaxResultBytes
// and Clock are left to their defaults.
func LedgerOptions(l config.Ledger) ledger.Options {
	o := ledger.Options{Retention: l.Retention, ClockSkew: l.MaxClockSkew}
	if l.Mismatch == config.MismatchReject {
		o.Mismatch = ledger.MismatchReject
	}
	return o
}

// NeedsLedger reports whether a pipeline of cfg works through the ledger:
// every mode but gate-window does.
func NeedsLedger(cfg *config.Config) bool {
	for _, p := range cfg.Pipelines {
		if p.Mode != config.ModeGateWindow {
			return true
		}
	}
	return false
}

// OpenLedgerOptions are what a caller adds to the configuration when it
// opens the ledger. The zero value means the defaults.
type OpenLedgerOptions struct {
	// Clock, if set, is the ledger's clock (the soak harness jumps it).
	// The default is the system clock.
	Clock ledger.Clock
	// Wrap, if set, wraps the ledger once it is open (fault builds record
	// its operations and simulate its outages with it). The wrapper's
	// Close must close the ledger it wraps.
	Wrap func(ledger.Ledger) (ledger.Ledger, error)
}

// OpenLedger opens the ledger cfg names, as every process that uses it
// opens it (the consumer's Start and the admin commands run without a
// consumer): in the JetStream KV bucket ledger.kv names, through js, with
// ledger.store kv; else in the Badger directory of the data directory
// (cfg.BadgerDir), encrypted with encryption.key_file if one is set, with
// Badger's value-log GC running while it is open. The options are
// LedgerOptions(cfg.Ledger), with o's clock.
//
// A Badger directory another process holds is an error wrapping
// ErrLedgerInUse (and badgerstore.ErrLocked); one written with another
// encryption key, or none, an error wrapping ErrEncryptionKey.
//
// The returned function closes the ledger (its wrapper first) and what it
// holds; call it once, after the last use of the ledger.
func OpenLedger(ctx context.Context, cfg *config.Config, js jetstream.JetStream, o OpenLedgerOptions) (_ ledger.Ledger, _ func() error, err error) {
	var closers []func() error
	closeAll := func() error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i]())
		}
		closers = nil
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	lo := LedgerOptions(cfg.Ledger)
	if o.Clock != nil {
		lo.Clock = o.Clock
	}
	var l ledger.Ledger
	switch cfg.Ledger.Store {
	case config.StoreKV:
		kv, err := jskvstore.New(ctx, js, jskvstore.Options{
			Options: lo, Bucket: cfg.Ledger.KV.Bucket, Replicas: cfg.Ledger.KV.Replicas,
		})
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, kv.Close)
		l = kv
		// The bucket is not encrypted at rest: with a key, the records'
		// notes (the model steps' answers) and responses (the effects'
		// bodies) are sealed before they reach it.
		key, err := EncryptionKey(cfg)
		if err != nil {
			return nil, nil, err
		}
		if key != nil {
			l, err = sealed.New(kv, key)
			clear(key)
			if err != nil {
				return nil, nil, fmt.Errorf("app: ledger: %w", err)
			}
		}
	default:
		dir := cfg.BadgerDir()
		key, err := EncryptionKey(cfg) // its length and permissions
		clear(key)
		if err != nil {
			return nil, nil, err
		}
		db, err := badgerstore.Open(dir, badgerstore.OpenOptions{EncryptionKeyFile: cfg.Encryption.KeyFile})
		if err != nil {
			if errors.Is(err, badgerstore.ErrLocked) {
				return nil, nil, fmt.Errorf("%w: %s is held by another Oncegate process. A Badger ledger serves one process; "+
					"to run several replicas on one durable consumer, set ledger.store: kv (the JetStream KV ledger): %w", ErrLedgerInUse, dir, err)
			}
			return nil, nil, keyError(cfg, "ledger", dir, err)
		}
		closers = append(closers, db.Close)
		bl, err := badgerstore.New(db, badgerstore.Options{Options: lo})
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, bl.Close)
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			collect(db, stop)
		}()
		// Runs before the DB closes (closers run in reverse).
		closers = append(closers, func() error { close(stop); <-done; return nil })
		l = bl
	}
	if o.Wrap != nil {
		if l, err = o.Wrap(l); err != nil {
			return nil, nil, fmt.Errorf("app: ledger: %w", err)
		}
		closers = append(closers, l.Close)
	}
	return l, closeAll, nil
}

// collect runs Badger's value log GC every ten minutes until stop closes.
func collect(db *badger.DB, stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			for db.RunValueLogGC(0.5) == nil {
			}
		}
	}
}
