package canon

import (
	"bytes"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/gowebpki/jcs"
)

// benchSizes are the fixtures in testdata/bench: an Alertmanager alert
// (~300 B), a Sentry error event (~2.6 KB) and a GitHub push webhook (~18 KB).
var benchSizes = []struct{ name, file string }{
	{"alert", "testdata/bench/alert.json"},
	{"error", "testdata/bench/sentry.json"},
	{"push", "testdata/bench/github_push.json"},
}

// BenchmarkCanonicalize compares Canonicalizer.Append with
// jsontext.Value.Canonicalize and jcs.Transform on the same inputs, all with
// validation on. jsontext canonicalizes in place, so its loop copies the
// input into a reused buffer first, as a caller that keeps its input must.
func BenchmarkCanonicalize(b *testing.B) {
	for _, size := range benchSizes {
		in := readFile(b, size.file)
		want, err := Append(nil, in)
		if err != nil {
			b.Fatalf("Append(%s) error = %v", size.file, err)
		}
		v := jsontext.Value(bytes.Clone(in))
		if err := v.Canonicalize(); err != nil || !bytes.Equal(v, want) {
			b.Fatalf("jsontext Canonicalize(%s) = %s, %v; want %s", size.file, v, err, want)
		}
		if got, err := jcs.Transform(in); err != nil || !bytes.Equal(got, want) {
			b.Fatalf("jcs.Transform(%s) = %s, %v; want %s", size.file, got, err, want)
		}

		b.Run("size="+size.name+"/impl=canon", func(b *testing.B) {
			c, _ := New(Options{})
			var dst []byte
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				dst, err = c.Append(dst[:0], in)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
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
				if _, err := jcs.Transform(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSelect measures key extraction from a canonical push webhook.
func BenchmarkSelect(b *testing.B) {
	doc, err := Append(nil, readFile(b, "testdata/bench/github_push.json"))
	if err != nil {
		b.Fatal(err)
	}
	var ptrs []Pointer
	for _, s := range []string{"/repository/full_name", "/ref", "/after"} {
		p, err := ParsePointer(s)
		if err != nil {
			b.Fatal(err)
		}
		ptrs = append(ptrs, p)
	}
	var dst []byte
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if dst, err = Select(dst[:0], doc, ptrs); err != nil {
			b.Fatal(err)
		}
	}
}
