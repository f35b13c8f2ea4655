package badgerstore

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// A volatile claim (ledger.BeginOptions.Volatile) is kept in the process's
// memory, not written to the database: that saves a Badger write per claim
// (a skiplist insert and a trip through Badger's write pipeline, about a
// fifth of a gate's ledger cost) as well as the fsync. What a crash must not
// take with it is the claim's existence, its try count and when it was
// first made: without them a trigger that kills its process comes back new
// every time, and a redo after a long outage cannot tell that it would land
// past the sink's duplicate window. So each round of volatile claims is
// appended, in one write, to a journal file beside the database: the
// operating system keeps it across the process's crash (not across a power
// loss, which a volatile claim may lose). The next process to open the
// database reads the journal and writes each claim it finds, that the
// database does not show settled, as a pending record whose holder is gone:
// the next Begin takes it over at once, as the next try.
//
// The journal is a sequence of files, oncegate-claims-<n>.journal, of
// fixed-size entries, each with a checksum (a torn last entry is ignored).
// When a file grows past journalMax, a new one starts with the claims still
// held in memory, and the old one is removed.

// journalEntrySize is the size of one entry: a CRC-32C, the key, the
// payload's fingerprint, the token, the attempts and the creation time.
const journalEntrySize = 4 + 16 + 16 + 8 + 4 + 8

// journalMax is the size past which the journal starts a new file. It
// bounds the work of a restart after a crash, which looks each entry up in
// the database (about 75,000 entries; at 10⁷ records, 0.3 s of CPU).
var journalMax int64 = 4 << 20 // a variable for tests

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// journalEntry is one volatile claim as the journal keeps it.
type journalEntry struct {
	Key         dedupe.Key
	Fingerprint dedupe.Fingerprint
	Token       uint64
	Attempts    uint32
	Created     time.Time
}

func (e journalEntry) append(b []byte) []byte {
	off := len(b)
	b = append(b, 0, 0, 0, 0)
	b = append(b, e.Key[:]...)
	b = append(b, e.Fingerprint[:]...)
	b = binary.LittleEndian.AppendUint64(b, e.Token)
	b = binary.LittleEndian.AppendUint32(b, e.Attempts)
	b = binary.LittleEndian.AppendUint64(b, uint64(e.Created.UnixNano()))
	binary.LittleEndian.PutUint32(b[off:], crc32.Checksum(b[off+4:], crcTable))
	return b
}

// decodeJournalEntry decodes b, journalEntrySize bytes, or reports that its
// checksum does not match (a torn write).
func decodeJournalEntry(b []byte) (journalEntry, bool) {
	if crc32.Checksum(b[4:journalEntrySize], crcTable) != binary.LittleEndian.Uint32(b) {
		return journalEntry{}, false
	}
	var e journalEntry
	copy(e.Key[:], b[4:20])
	copy(e.Fingerprint[:], b[20:36])
	e.Token = binary.LittleEndian.Uint64(b[36:])
	e.Attempts = binary.LittleEndian.Uint32(b[44:])
	e.Created = time.Unix(0, int64(binary.LittleEndian.Uint64(b[48:])))
	return e, true
}

// journal is the claims journal of one database directory.
type journal struct {
	dir string

	mu   sync.Mutex
	f    *os.File
	n    int // the number of the file being written
	size int64
	buf  []byte
}

// journalFiles lists the journal files in dir by number.
func journalFiles(dir string) ([]int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "oncegate-claims-*.journal"))
	if err != nil {
		return nil, err
	}
	var ns []int
	for _, name := range names {
		s := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "oncegate-claims-"), ".journal")
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			ns = append(ns, n)
		}
	}
	slices.Sort(ns)
	return ns, nil
}

func journalPath(dir string, n int) string {
	return filepath.Join(dir, fmt.Sprintf("oncegate-claims-%d.journal", n))
}

// readJournal returns the claims the journal files of dir hold, the last
// entry of each key, and the numbers of the files read.
func readJournal(dir string) (map[dedupe.Key]journalEntry, []int, error) {
	ns, err := journalFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[dedupe.Key]journalEntry)
	buf := make([]byte, journalEntrySize)
	for _, n := range ns {
		f, err := os.Open(journalPath(dir, n))
		if err != nil {
			return nil, nil, fmt.Errorf("badgerledger: claims journal: %w", err)
		}
		r := bufio.NewReaderSize(f, 64<<10)
		for {
			if _, err := io.ReadFull(r, buf); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					f.Close()
					return nil, nil, fmt.Errorf("badgerledger: claims journal: %w", err)
				}
				break
			}
			e, ok := decodeJournalEntry(buf)
			if !ok {
				break // torn by a crash: nothing after it was acknowledged
			}
			if prev, seen := out[e.Key]; !seen || e.Token >= prev.Token {
				out[e.Key] = e
			}
		}
		f.Close()
	}
	return out, ns, nil
}

// openJournal starts file n of dir's journal.
func openJournal(dir string, n int) (*journal, error) {
	j := &journal{dir: dir, n: n}
	f, err := os.OpenFile(journalPath(dir, n), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("badgerledger: claims journal: %w", err)
	}
	j.f = f
	return j, nil
}

// append writes es in one write, under j.mu, and then runs then (which
// records the claims in memory) before another append or a rotation can
// start: a rotation's snapshot of the claims in memory then holds every
// claim whose entry it drops with the old file. If the write fails, then
// does not run, and the error says why.
func (j *journal) append(es []journalEntry, then func(), snapshot func() []journalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return errors.New("badgerledger: claims journal is closed")
	}
	b := j.buf[:0]
	for _, e := range es {
		b = e.append(b)
	}
	j.buf = b
	if _, err := j.f.Write(b); err != nil {
		return fmt.Errorf("badgerledger: claims journal: %w", err)
	}
	j.size += int64(len(b))
	then()
	if j.size > journalMax {
		j.rotate(snapshot())
	}
	return nil
}

// rotate starts the next file with the claims held now, and removes the
// files before it. The caller holds j.mu.
func (j *journal) rotate(held []journalEntry) {
	next, err := openJournal(j.dir, j.n+1)
	if err != nil {
		return // go on with the file we have
	}
	var b []byte
	for _, e := range held {
		b = e.append(b)
	}
	if _, err := next.f.Write(b); err != nil {
		next.f.Close()
		return
	}
	old, oldN := j.f, j.n
	j.f, j.n, j.size = next.f, next.n, int64(len(b))
	old.Close()
	ns, _ := journalFiles(j.dir)
	for _, n := range ns {
		if n <= oldN {
			os.Remove(journalPath(j.dir, n))
		}
	}
}

// closeWith closes the journal, leaving in it only the claims snapshot
// returns, the ones still held: the entries of claims settled since are
// dropped as a rotation drops them, so that the next open, after a clean
// close, has only those to recover (a large ledger's readiness after a
// crash is mostly the lookups of a full journal's entries).
func (j *journal) closeWith(snapshot func() []journalEntry) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return
	}
	if j.size > 0 {
		j.rotate(snapshot())
	}
	j.f.Close()
	j.f = nil
}
