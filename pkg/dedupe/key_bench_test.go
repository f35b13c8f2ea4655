package dedupe_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// BenchmarkIntent measures what a trigger costs to key: strict validation,
// canonicalization, selection and two 128-bit hashes (key and fingerprint).
// Beside it, on the same payloads, the canonicalization alone by the
// alternatives a user would pick: jsontext.Value.Canonicalize (which
// canonicalizes in place, so its loop first copies the input into a reused
// buffer, as a caller that keeps the payload must) and jcs.Transform. Read
// the result as ratios of MB/s within one run.
func BenchmarkIntent(b *testing.B) {
	for _, size := range []struct{ name, file string }{
		{"alert", "../canon/testdata/bench/alert.json"},
		{"error", "../canon/testdata/bench/sentry.json"},
		{"push", "../canon/testdata/bench/github_push.json"},
	} {
		in, err := os.ReadFile(size.file)
		if err != nil {
			b.Fatal(err)
		}
		specs := []struct {
			name string
			spec dedupe.KeySpec
		}{
			// The whole payload less two volatile members: every byte is
			// canonicalized, rewritten and hashed twice.
			{"oncegate-whole", dedupe.KeySpec{Pipeline: "bench", Step: "effect", Volatile: []string{"/delivery_id", "/sent_at"}}},
			// The whole payload with SHA-256 instead of xxHash.
			{"oncegate-sha256", dedupe.KeySpec{Pipeline: "bench", Step: "effect", Volatile: []string{"/delivery_id", "/sent_at"}, SHA256: true}},
		}
		for _, s := range specs {
			k, err := dedupe.NewKeyer(s.spec)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("size="+size.name+"/impl="+s.name, func(b *testing.B) {
				b.SetBytes(int64(len(in)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := k.Intent(in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run("size="+size.name+"/impl=jsontext", func(b *testing.B) {
			var v jsontext.Value
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				v = append(v[:0], in...)
				if err := v.Canonicalize(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("size="+size.name+"/impl=jcs", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				out, err := jcs.Transform(in)
				if err != nil || bytes.Equal(out, in) {
					b.Fatal(err)
				}
			}
		})
	}
}
