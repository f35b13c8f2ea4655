package badgerledger

import (
	"context"
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// Options configures [Open]. The zero value means the defaults.
type Options struct {
	// Retention is how long a record is kept after its last change. It
	// must outlive the longest retry or redelivery of a trigger: a record
	// that expires before a late retry arrives lets the effect happen
	// again. The default is a week.
	Retention time.Duration
	// NoSync skips the fsync after a claim and a commit. Records then
	// survive a process crash (they are in the operating system's page
	// cache before Do goes on) but not a power loss or a kernel crash. The
	// default is false.
	NoSync bool
	// EncryptionKeyFile, if set, names a file holding a 16, 24 or 32-byte
	// AES key: the data is encrypted at rest. Opening an encrypted
	// directory with another key, or with none, fails.
	EncryptionKeyFile string
	// InMemory keeps everything in memory and ignores the directory, for
	// tests and examples. The default is false.
	InMemory bool
}

// Ledger is a [dedupe.Ledger] in a Badger database that one process owns.
//
// # Durability
//
// A claim and a commit are fsynced before Do goes on (unless
// Options.NoSync is set), and the syncs of concurrent callers are
// coalesced into one (group commit). A record Do reported written
// survives a process crash and, as far as the disk honours fsync, a power
// loss. Each record carries a CRC-32C, every table of the directory is
// checked against its checksums before it opens, and Badger checks each
// block it reads: a flipped bit is an error, not a wrong answer.
//
// Records expire Retention after their last change, and Badger drops them
// at compaction.
//
// A Ledger is safe for concurrent use by multiple goroutines.
type Ledger struct {
	l  *badgerstore.Ledger
	db *badger.DB
}

// Open opens (creating if needed) the ledger in dir. Another process
// holding dir open makes Open fail: a Badger ledger serves one process.
func Open(dir string, opts Options) (*Ledger, error) {
	db, err := badgerstore.Open(dir, badgerstore.OpenOptions{EncryptionKeyFile: opts.EncryptionKeyFile, InMemory: opts.InMemory})
	if err != nil {
		return nil, err
	}
	l, err := badgerstore.New(db, badgerstore.Options{NoSync: opts.NoSync, Options: ledger.Options{Retention: opts.Retention}})
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Ledger{l: l, db: db}, nil
}

// Do implements [dedupe.Ledger].
func (l *Ledger) Do(ctx context.Context, in dedupe.Intent, fn func(ctx context.Context) (dedupe.Result, error), opts dedupe.DoOptions) (res dedupe.Result, ran bool, err error) {
	return ledger.Do(ctx, l.l, in, fn, opts)
}

// Close closes the ledger and its database; later calls fail.
func (l *Ledger) Close() error {
	return errors.Join(l.l.Close(), l.db.Close())
}
