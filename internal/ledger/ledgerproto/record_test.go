package ledgerproto_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/ledger/ledgerproto"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

func sampleRecord() ledger.Record {
	now := time.Unix(1764400000, 123456789)
	return ledger.Record{
		Key: dedupe.Key{9}, State: ledger.StateCommitted, Owner: "host-1/pid-42", Token: 3,
		Attempts: 3, Fingerprint: dedupe.Fingerprint{1, 2, 3}, Mismatches: 1,
		Created: now, Updated: now.Add(time.Second), Expires: now.Add(7 * 24 * time.Hour),
		Result: ledger.Result{DownstreamID: "INC-1", ModelRef: "llm/x", Response: []byte("{\"ok\":true}"), Committed: now.Add(time.Second)},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	rec := sampleRecord()
	b := ledgerproto.Append(nil, &rec)
	got, err := ledgerproto.Decode(rec.Key, b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, rec)
	}
	// Every single-bit flip and every truncation is detected.
	for i := range b {
		for bit := range 8 {
			c := bytes.Clone(b)
			c[i] ^= 1 << bit
			if _, err := ledgerproto.Decode(rec.Key, c); !errors.Is(err, ledger.ErrCorruptRecord) {
				t.Fatalf("flip of bit %d of byte %d: error = %v; want ErrCorruptRecord", bit, i, err)
			}
		}
		if _, err := ledgerproto.Decode(rec.Key, b[:i]); !errors.Is(err, ledger.ErrCorruptRecord) {
			t.Fatalf("truncation to %d bytes: error = %v; want ErrCorruptRecord", i, err)
		}
	}
}

// TestRecordWithNote: a record with a note is encoding version 2 and
// round-trips, flips and truncations of it detected; one without is
// version 1, byte for byte what it was before notes (the encoding here
// written out by hand); a version 2 record whose note is empty is
// corrupt.
func TestRecordWithNote(t *testing.T) {
	rec := sampleRecord()
	plain := ledgerproto.Append(nil, &rec)
	if plain[0] != 1 {
		t.Fatalf("a record without a note is version %d; want 1", plain[0])
	}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	want := []byte{1, byte(rec.State)}
	want = append(want, rec.Fingerprint[:]...)
	want = binary.AppendUvarint(want, rec.Token)
	want = binary.AppendUvarint(want, uint64(rec.Attempts))
	want = binary.AppendUvarint(want, uint64(rec.Mismatches))
	for _, ts := range []time.Time{rec.LeaseUntil, rec.Created, rec.Updated, rec.Expires, rec.Result.Committed} {
		v := int64(0)
		if !ts.IsZero() {
			v = ts.UnixNano()
		}
		want = binary.AppendVarint(want, v)
	}
	for _, s := range []string{rec.Owner, rec.Reason, rec.Result.DownstreamID, rec.Result.ModelRef, string(rec.Result.Response)} {
		want = binary.AppendUvarint(want, uint64(len(s)))
		want = append(want, s...)
	}
	want = binary.LittleEndian.AppendUint32(want, crc32.Checksum(want, castagnoli))
	if !bytes.Equal(plain, want) {
		t.Fatalf("a record without a note encodes as\n%x\nwant version 1 as before notes\n%x", plain, want)
	}

	rec.Note = []byte(`{"version":"v1","answers":[{"text":"restart it"}]}`)
	b := ledgerproto.Append(nil, &rec)
	if b[0] != 2 {
		t.Fatalf("a record with a note is version %d; want 2", b[0])
	}
	got, err := ledgerproto.Decode(rec.Key, b)
	if err != nil || !reflect.DeepEqual(got, rec) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, got, rec)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, err := ledgerproto.Decode(rec.Key, c); !errors.Is(err, ledger.ErrCorruptRecord) {
			t.Fatalf("flip in byte %d: error = %v; want ErrCorruptRecord", i, err)
		}
		if _, err := ledgerproto.Decode(rec.Key, b[:i]); !errors.Is(err, ledger.ErrCorruptRecord) {
			t.Fatalf("truncation to %d bytes: error = %v; want ErrCorruptRecord", i, err)
		}
	}
	empty := append([]byte{2}, plain[1:len(plain)-4]...)
	empty = binary.AppendUvarint(empty, 0)
	empty = binary.LittleEndian.AppendUint32(empty, crc32.Checksum(empty, castagnoli))
	if _, err := ledgerproto.Decode(rec.Key, empty); !errors.Is(err, ledger.ErrCorruptRecord) {
		t.Errorf("a version 2 record with an empty note: error = %v; want ErrCorruptRecord", err)
	}
}

// FuzzDecode decodes arbitrary bytes, and the same bytes with a
// valid checksum appended (so that the fuzzer gets past the checksum into
// the parser): no panic, errors wrap ErrCorruptRecord, and an accepted
// record re-encodes to a record that decodes to itself.
func FuzzDecode(f *testing.F) {
	rec := sampleRecord()
	b := ledgerproto.Append(nil, &rec)
	f.Add(b[:len(b)-4])
	rec.Note = []byte(`{"version":"v1","answers":[{"text":"restart it"}]}`)
	b = ledgerproto.Append(nil, &rec)
	f.Add(b[:len(b)-4])
	f.Add([]byte{})
	f.Add([]byte{1, 2})
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, b := range [][]byte{body, binary.LittleEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, castagnoli))} {
			rec, err := ledgerproto.Decode(dedupe.Key{}, b)
			if err != nil {
				if !errors.Is(err, ledger.ErrCorruptRecord) {
					t.Fatalf("error %v does not wrap ErrCorruptRecord", err)
				}
				continue
			}
			again := ledgerproto.Append(nil, &rec)
			back, err := ledgerproto.Decode(dedupe.Key{}, again)
			if err != nil || !reflect.DeepEqual(back, rec) {
				t.Fatalf("re-encoding of an accepted record does not round-trip: %v", err)
			}
		}
	})
}
