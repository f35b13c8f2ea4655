package config

import (
	"fmt"
	"time"
)

// Ledger stores.
const (
	// StoreBadger keeps the ledger in the local Badger database: one
	// process owns it.
	StoreBadger = "badger"
	// StoreKV keeps the ledger in a JetStream KV bucket, shared by every
	// consumer replica.
	StoreKV = "kv"
)

// Mismatch policies; see ledger.MismatchPolicy.
const (
	MismatchAccept = "accept"
	MismatchReject = "reject"
)

// Ledger configures the durable idempotency ledger.
type Ledger struct {
	// Store is StoreBadger (the default) or StoreKV.
	Store string `yaml:"store"`
	// Retention is how long a record lives after its last change. It must
	// exceed every pipeline's redelivery horizon (see Validate). The
	// default is 168h (7 days).
	Retention time.Duration `yaml:"retention"`
	// Lease is how long a claim holds before another worker may take the
	// work over (MaxClockSkew past it); workers renew it while they work.
	// The default is 30s.
	Lease time.Duration `yaml:"lease"`
	// KV configures the bucket, when Store is StoreKV.
	KV KV `yaml:"kv"`
	// Mismatch is what happens when a key comes back with a different
	// payload: MismatchAccept (the default: count it, dedupe it) or
	// MismatchReject (fail the trigger).
	Mismatch string `yaml:"mismatch"`
	// MaxClockSkew is how far apart the clocks of the processes sharing
	// the ledger may be. Fencing does not depend on clocks, but one guard
	// does: work taken over from a holder that began it longer ago than
	// the effect target's duplicate window is not redone (the redo would
	// not be dropped), and the age of that work is the taker's clock minus
	// the first holder's. A claim within MaxClockSkew of the window counts
	// as past it. And a claim is taken over only MaxClockSkew after its
	// lease ran out by the taker's clock (ledger.Options.ClockSkew): the
	// holder may be sending until its lease ends by its own. The default
	// is 1s.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
}

// KV configures the JetStream KV ledger.
type KV struct {
	// Bucket is the KV bucket's name. The default is "oncegate-ledger".
	Bucket string `yaml:"bucket"`
	// Replicas is the bucket's replication factor, 1 to 5. The default is
	// 1.
	Replicas int `yaml:"replicas"`
}

// Defaults of the ledger section.
const (
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultLease        = 30 * time.Second
	DefaultMaxClockSkew = time.Second
	DefaultKVBucket     = "oncegate-ledger"
)

// ledgerDefaults fills in the ledger section.
func (c *Config) ledgerDefaults() {
	l := &c.Ledger
	setDefault(c, "ledger.store", &l.Store, StoreBadger)
	setDefault(c, "ledger.retention", &l.Retention, DefaultRetention)
	setDefault(c, "ledger.lease", &l.Lease, DefaultLease)
	setDefault(c, "ledger.max_clock_skew", &l.MaxClockSkew, DefaultMaxClockSkew)
	setDefault(c, "ledger.kv.bucket", &l.KV.Bucket, DefaultKVBucket)
	setDefault(c, "ledger.kv.replicas", &l.KV.Replicas, 1)
	setDefault(c, "ledger.mismatch", &l.Mismatch, MismatchAccept)
}

// ledger checks the ledger section.
func (v *validator) ledger() {
	l := &v.c.Ledger
	v.oneOf("ledger.store", l.Store, StoreBadger, StoreKV)
	v.positive("ledger.retention", l.Retention)
	v.positive("ledger.lease", l.Lease)
	if l.MaxClockSkew < 0 {
		v.add("ledger.max_clock_skew", invalid("must not be negative, got %s", formatDuration(l.MaxClockSkew)))
	}
	if d := v.c.Stream.Duplicates; d > 0 && l.MaxClockSkew >= d {
		v.add("ledger.max_clock_skew", invalid("%s is not shorter than stream.duplicates %s: no work could ever be taken over and redone", formatDuration(l.MaxClockSkew), formatDuration(d)))
	}
	if l.Lease > 0 && l.Retention > 0 && l.Lease >= l.Retention {
		v.add("ledger.lease", invalid("lease %s must be shorter than retention %s", formatDuration(l.Lease), formatDuration(l.Retention)))
	}
	v.oneOf("ledger.mismatch", l.Mismatch, MismatchAccept, MismatchReject)
	if l.KV.Replicas < 1 || l.KV.Replicas > 5 {
		v.add("ledger.kv.replicas", invalid("must be 1 to 5, got %d", l.KV.Replicas))
	}
	if l.Store == StoreKV {
		if err := checkBucketName(l.KV.Bucket); err != nil {
			v.add("ledger.kv.bucket", err)
		}
		if v.c.NATS.URL == "" && l.KV.Replicas > 1 {
			v.add("ledger.kv.replicas", invalid("the embedded server is a single node: replicas must be 1, got %d", l.KV.Replicas))
		}
	}
}

// ledger explains the ledger section: its store, retention, lease and
// policies.
func (x *explainer) ledger() {
	c := x.c
	l := &c.Ledger
	where := "badger in " + c.BadgerDir()
	if l.Store == StoreKV {
		where = fmt.Sprintf("JetStream KV bucket %s, %s",
			x.d("ledger.kv.bucket", l.KV.Bucket, l.KV.Bucket),
			x.d("ledger.kv.replicas", l.KV.Replicas, plural(l.KV.Replicas, "replica")))
	}
	x.row("ledger", x.d("ledger.store", l.Store, where),
		"retention "+x.d("ledger.retention", l.Retention, formatDuration(l.Retention)),
		"lease "+x.d("ledger.lease", l.Lease, formatDuration(l.Lease)),
		"on payload mismatch "+x.d("ledger.mismatch", l.Mismatch, l.Mismatch),
		"clocks apart by up to "+x.d("ledger.max_clock_skew", l.MaxClockSkew, formatDuration(l.MaxClockSkew)))
}
