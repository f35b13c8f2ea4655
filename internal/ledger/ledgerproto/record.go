package ledgerproto

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The record encoding, shared by every store:
//
//	version (1 byte) state (1) fingerprint (16)
//	token, attempts, mismatches (uvarint)
//	lease until, created, updated, expires, committed (varint Unix nanoseconds; 0 is the zero time)
//	owner, reason, downstream id, model ref, response (uvarint length, bytes)
//	note (uvarint length, bytes), in version 2 only
//	CRC-32C of everything before it (4 bytes, little endian)
//
// A record without a note is written in version 1, byte for byte as before
// notes existed, so that most records cost nothing more and a process
// that predates notes still reads them; one with a note is version 2.
// The checksum makes a torn or flipped record an error, not a wrong answer.
const (
	recordVersion     = 1
	recordVersionNote = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

// Append appends the encoding of r to b.
func Append(b []byte, r *ledger.Record) []byte {
	start := len(b)
	version := byte(recordVersion)
	if len(r.Note) > 0 {
		version = recordVersionNote
	}
	b = append(b, version, byte(r.State))
	b = append(b, r.Fingerprint[:]...)
	b = binary.AppendUvarint(b, r.Token)
	b = binary.AppendUvarint(b, uint64(r.Attempts))
	b = binary.AppendUvarint(b, uint64(r.Mismatches))
	for _, t := range [...]time.Time{r.LeaseUntil, r.Created, r.Updated, r.Expires, r.Result.Committed} {
		b = appendTime(b, t)
	}
	b = appendString(b, r.Owner)
	b = appendString(b, r.Reason)
	b = appendString(b, r.Result.DownstreamID)
	b = appendString(b, r.Result.ModelRef)
	b = appendString(b, r.Result.Response)
	if version == recordVersionNote {
		b = appendString(b, r.Note)
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

type recordReader struct {
	b   []byte
	err error
}

func (r *recordReader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *recordReader) time() time.Time {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad time")
		return time.Time{}
	}
	r.b = r.b[n:]
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

func (r *recordReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil || n > uint64(len(r.b)) {
		r.fail("bad length")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *recordReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ledger.ErrCorruptRecord, what)
	}
}

// Decode decodes the record of key from b, the output of Append. The
// record does not alias b. A record that fails its checksum or does not
// parse returns an error wrapping ledger.ErrCorruptRecord.
func Decode(key dedupe.Key, b []byte) (ledger.Record, error) {
	if len(b) < 2+16+4 {
		return ledger.Record{}, fmt.Errorf("%w: key %v: %d bytes", ledger.ErrCorruptRecord, key, len(b))
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return ledger.Record{}, fmt.Errorf("%w: key %v: checksum mismatch", ledger.ErrCorruptRecord, key)
	}
	if body[0] != recordVersion && body[0] != recordVersionNote {
		return ledger.Record{}, fmt.Errorf("%w: key %v: unknown version %d", ledger.ErrCorruptRecord, key, body[0])
	}
	rec := ledger.Record{Key: key, State: ledger.State(body[1])}
	copy(rec.Fingerprint[:], body[2:18])
	r := recordReader{b: body[18:]}
	rec.Token = r.uvarint()
	rec.Attempts = uint32(r.uvarint())
	rec.Mismatches = uint32(r.uvarint())
	rec.LeaseUntil, rec.Created, rec.Updated, rec.Expires, rec.Result.Committed = r.time(), r.time(), r.time(), r.time(), r.time()
	rec.Owner = string(r.bytes())
	rec.Reason = string(r.bytes())
	rec.Result.DownstreamID = string(r.bytes())
	rec.Result.ModelRef = string(r.bytes())
	if resp := r.bytes(); len(resp) > 0 {
		rec.Result.Response = append([]byte(nil), resp...)
	}
	if body[0] == recordVersionNote {
		if note := r.bytes(); len(note) > 0 {
			rec.Note = append([]byte(nil), note...)
		} else {
			r.fail("empty note in a version 2 record")
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err == nil && (rec.State < ledger.StatePending || rec.State > ledger.StateCleared) {
		r.fail("unknown state")
	}
	if r.err != nil {
		return ledger.Record{}, fmt.Errorf("key %v: %w", key, r.err)
	}
	return rec, nil
}

func appendString[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
