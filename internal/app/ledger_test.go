package app_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/app"
	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/natstest"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestLedgerOptionsCarryEveryField: every setting of the ledger section
// has a place it goes (ledger.Options, OpenLedger's store, or the consumer,
// which reads the lease and the clock skew from the configuration), and
// LedgerOptions carries its share; a field added to the section fails here
// until it is given one.
func TestLedgerOptionsCarryEveryField(t *testing.T) {
	goes := map[string]string{
		"Retention":    "ledger.Options",
		"Mismatch":     "ledger.Options",
		"Store":        "OpenLedger",
		"KV.Bucket":    "OpenLedger",
		"KV.Replicas":  "OpenLedger",
		"Lease":        "the consumer",
		"MaxClockSkew": "ledger.Options",
	}
	var l config.Ledger
	set := map[string]reflect.Value{}
	fillLeaves(t, reflect.ValueOf(&l).Elem(), "", set)
	for path := range set {
		if _, ok := goes[path]; !ok {
			t.Errorf("config.Ledger.%s goes nowhere: carry it (LedgerOptions, OpenLedger or the consumer) and say where here", path)
		}
	}
	o := app.LedgerOptions(l)
	if o.Retention != l.Retention || o.ClockSkew != l.MaxClockSkew {
		t.Errorf("LedgerOptions: Retention = %v, ClockSkew = %v; want %v, %v", o.Retention, o.ClockSkew, l.Retention, l.MaxClockSkew)
	}
	// The consumer bounds the results it commits by the ledger's default.
	if o.MaxResultBytes != 0 || o.Clock != nil {
		t.Errorf("LedgerOptions: MaxResultBytes %d, Clock %v; want both left to the ledger's defaults", o.MaxResultBytes, o.Clock)
	}
	for _, tt := range []struct {
		mismatch string
		want     ledger.MismatchPolicy
	}{{config.MismatchAccept, ledger.MismatchAccept}, {config.MismatchReject, ledger.MismatchReject}} {
		if got := app.LedgerOptions(config.Ledger{Mismatch: tt.mismatch}).Mismatch; got != tt.want {
			t.Errorf("LedgerOptions(mismatch %s).Mismatch = %v; want %v", tt.mismatch, got, tt.want)
		}
	}
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestOpenLedgerCarriesTheSection: what OpenLedger opens, in either store,
// has the section's settings: the retention, the mismatch policy, the
// caller's clock, and for the KV store its bucket.
func TestOpenLedgerCarriesTheSection(t *testing.T) {
	s := natstest.RunServer(t)
	_, js := natstest.Connect(t, s)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, store := range []string{config.StoreBadger, config.StoreKV} {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := config.Default()
			cfg.DataDir = t.TempDir()
			cfg.NATS.Embedded.StoreDir = filepath.Join(cfg.DataDir, "nats")
			cfg.Ledger.Store = store
			cfg.Ledger.Retention = 100 * time.Hour
			cfg.Ledger.Mismatch = config.MismatchReject
			cfg.Ledger.KV.Bucket = "custom-ledger"
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			l, closeLedger, err := app.OpenLedger(ctx, cfg, js, app.OpenLedgerOptions{Clock: fixedClock(now)})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := closeLedger(); err != nil {
					t.Errorf("closing the ledger: %v", err)
				}
			}()
			key := dedupe.Key{1}
			c, err := l.Begin(ctx, key, ledger.BeginOptions{Owner: "test", Fingerprint: dedupe.Fingerprint{1}, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Commit(ctx, key, c.Lease.Token, ledger.Result{}); err != nil {
				t.Fatal(err)
			}
			rec, err := l.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Updated.Equal(now) || rec.Expires.Sub(rec.Updated) != cfg.Ledger.Retention {
				t.Errorf("record updated %v, expires %v; want updated at the clock's %v, expiring after the retention %v", rec.Updated, rec.Expires, now, cfg.Ledger.Retention)
			}
			_, err = l.Begin(ctx, key, ledger.BeginOptions{Owner: "test", Fingerprint: dedupe.Fingerprint{2}, Lease: time.Minute})
			if !errors.Is(err, ledger.ErrFingerprintMismatch) {
				t.Errorf("Begin with another payload under mismatch: reject = %v; want ErrFingerprintMismatch", err)
			}
			if store == config.StoreKV {
				kv, err := js.KeyValue(ctx, cfg.Ledger.KV.Bucket)
				if err != nil {
					t.Fatalf("the bucket ledger.kv.bucket names: %v", err)
				}
				st, err := kv.Status(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ttl := st.TTL(); ttl < cfg.Ledger.Retention {
					t.Errorf("bucket TTL %v; want at least the retention %v", ttl, cfg.Ledger.Retention)
				}
			}
		})
	}
}
