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

// FuzzDecode decodes arbitrary bytes, and the same bytes with a
// valid checksum appended (so that the fuzzer gets past the checksum into
// the parser): no panic, errors wrap ErrCorruptRecord, and an accepted
// record re-encodes to a record that decodes to itself.
func FuzzDecode(f *testing.F) {
	rec := sampleRecord()
	b := ledgerproto.Append(nil, &rec)
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
