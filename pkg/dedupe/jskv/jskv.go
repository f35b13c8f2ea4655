package jskv

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/jskvstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Options configures [New]. The zero value means the defaults.
type Options struct {
	// Bucket names the KV bucket. The default is "oncegate-ledger".
	Bucket string
	// Replicas is the number of servers that hold the bucket when New
	// creates it; 3 on a cluster of three or more servers gives a ledger
	// that survives the loss of any one of them. An existing bucket must
	// have at least this many. The default is 1.
	Replicas int
	// Storage is where the servers keep the bucket when New creates it. An
	// existing bucket asked for with FileStorage must not be in memory.
	// The default is jetstream.FileStorage.
	Storage jetstream.StorageType
	// Retention is how long a record is kept after its last change. It
	// must outlive the longest retry or redelivery of a trigger: a record
	// that expires before a late retry arrives lets the effect happen
	// again. The default is a week.
	Retention time.Duration
	// ClockSkew is how far apart the clocks of the processes sharing the
	// bucket may be: a claim whose lease ran out is taken over only once
	// it has been out this long by the taker's clock (a claim given up, at
	// once), so that a process whose clock runs ahead does not run the
	// work while its holder, by its own clock, still may. The default is
	// 0: clocks that agree (see Clocks in the package documentation).
	ClockSkew time.Duration
}

// Ledger is a [dedupe.Ledger] in a JetStream key-value bucket, shared by
// every process that opens the same bucket. See the package documentation
// for how it stays atomic, what survives what, and why the processes'
// clocks must agree.
//
// A Ledger is safe for concurrent use by multiple goroutines.
type Ledger struct {
	l *jskvstore.Ledger
}

// New returns a ledger in the bucket opts.Bucket, creating the bucket (with
// history 1 and a TTL of Retention plus an hour) if it does not exist. An
// existing bucket is used as it is, provided it can hold the ledger;
// otherwise New returns an error that says why: a TTL shorter than
// Retention, memory storage when file storage was asked for, fewer
// replicas than asked for, values too small for a record, or a mirror. New
// never changes an existing bucket.
//
// The caller owns the connection under js: Close does not close it.
func New(ctx context.Context, js jetstream.JetStream, opts Options) (*Ledger, error) {
	l, err := jskvstore.New(ctx, js, jskvstore.Options{
		Bucket:   opts.Bucket,
		Replicas: opts.Replicas,
		Storage:  opts.Storage,
		Options:  ledger.Options{Retention: opts.Retention, ClockSkew: opts.ClockSkew},
	})
	if err != nil {
		return nil, err
	}
	return &Ledger{l: l}, nil
}

// Do implements [dedupe.Ledger].
func (l *Ledger) Do(ctx context.Context, in dedupe.Intent, fn func(ctx context.Context) (dedupe.Result, error), opts dedupe.DoOptions) (res dedupe.Result, ran bool, err error) {
	return ledger.Do(ctx, l.l, in, fn, opts)
}

// Close releases the ledger; later calls fail. It does not close the
// connection.
func (l *Ledger) Close() error { return l.l.Close() }
