package badgerstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
	"golang.org/x/sync/errgroup"

	"github.com/oncegate/oncegate/internal/ledger"
)

// verifyTables checks every block of every table of the Badger database in
// dir against its checksum, before Badger opens the database. A table that
// fails is ledger.ErrCorruptRecord, naming the table; the open must not go
// on, because Badger's point lookup treats a block that fails its checksum
// as holding nothing, and a committed record read as missing is claimed
// again.
//
// Badger can do this itself as it opens each table
// (options.OnTableAndBlockRead), but through the mapping it keeps for the
// table's life, so the whole ledger stays resident after the open, and
// decompressed blocks fill the block cache; and it reports a bad block by
// crashing (v4.9.6). Here each table is mapped on its own, checked by
// Badger's own table code on as many goroutines as there are CPUs, and
// unmapped: the pages stay in the page cache, not in the process.
//
// The tables are the ones the manifest lists. A directory with no manifest
// is new; a manifest, or a table, that cannot be read is left to Badger's
// open to report. Encrypted tables (a key ID in the manifest) are skipped:
// their blocks need the data key, so an encrypted ledger is verified by
// Badger (see Open).
func verifyTables(dir string) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return nil // Badger's open reports it
	}
	m, _, err := badger.ReplayManifestFile(f, 0, badger.DefaultOptions(dir).WithLogger(nil))
	f.Close()
	if err != nil {
		return nil // Badger's open reports it
	}
	ids := make([]uint64, 0, len(m.Tables))
	for id, tm := range m.Tables {
		if tm.KeyID == 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	var failed atomic.Bool
	for _, id := range ids {
		if failed.Load() {
			break
		}
		g.Go(func() error {
			err := verifyTable(dir, id, m.Tables[id].Compression)
			if err != nil {
				failed.Store(true)
			}
			return err
		})
	}
	return g.Wait()
}

// verifyTable checks the blocks of the table id in dir, written with
// compression c.
func verifyTable(dir string, id uint64, c options.CompressionType) error {
	path := table.NewFilename(id, dir)
	f, err := os.Open(path)
	if err != nil {
		return nil // Badger's open reports a missing table
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return nil
	}
	data, err := z.Mmap(f, false, fi.Size())
	if err != nil {
		return nil
	}
	defer z.Munmap(data)
	var t *table.Table
	if err := unpanic(func() (err error) {
		t, err = table.OpenInMemoryTable(data, id, &table.Options{
			ChkMode:     options.OnBlockRead,
			Compression: c,
			BlockSize:   badger.DefaultOptions("").BlockSize,
		})
		return err
	}); err != nil {
		return fmt.Errorf("%w: %s: its index is damaged: %w", ledger.ErrCorruptRecord, path, err)
	}
	if err := unpanic(t.VerifyChecksum); err != nil {
		return fmt.Errorf("%w: %s: a block fails its checksum: %w", ledger.ErrCorruptRecord, path, err)
	}
	return nil
}

// unpanic runs f and returns its error or, if it panics, the panic as an
// error. Badger's table code panics on some damage: an index that points
// outside the file, and (v4.9.6) every block that fails its checksum, as it
// formats that error.
func unpanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panicked in Badger's table code: %v", r)
		}
	}()
	return f()
}
