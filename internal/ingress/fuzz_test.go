package ingress

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// FuzzSignatureHeader: the signature header parser of every preset never
// panics, fails only with ErrNoSignature or ErrBadSignature, accepts
// signatures of the algorithm's size only and at most
// maxSignaturesPerHeader of them, and what it accepts, written as the
// provider writes it, parses to the same signatures and timestamp.
func FuzzSignatureHeader(f *testing.F) {
	for _, s := range []string{
		"sha256=" + strings.Repeat("0f", 32), "t=1492774577,v1=" + strings.Repeat("ab", 32) + ",v0=00",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1a,AAAA", "v1=" + strings.Repeat("ab", 32) + ",v1=zz",
		"0/KCTR6DLpKmkAf8muzZqo1nDgQ=", "v0=" + strings.Repeat("a", 64), "", " , ", "t=,v1=", "sha256=",
	} {
		f.Add(s)
	}
	var schemes []*scheme
	for _, k := range spec.Kinds() {
		r := spec.Source{Name: k, Kind: k, PublicURL: "https://hooks.example.com"}.Resolved()
		if r.Auth != spec.AuthSignature {
			continue
		}
		sc, err := compile(r)
		if err != nil {
			f.Fatalf("%s: %v", k, err)
		}
		schemes = append(schemes, sc)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, sc := range schemes {
			sigs, ts, err := sc.signatures(in)
			if err != nil {
				if !errors.Is(err, ErrNoSignature) && !errors.Is(err, ErrBadSignature) {
					t.Fatalf("%s: signatures(%q) error %v is neither sentinel", sc.header, in, err)
				}
				continue
			}
			if len(sigs) == 0 || len(sigs) > maxSignaturesPerHeader {
				t.Fatalf("%s: signatures(%q) accepted %d signatures", sc.header, in, len(sigs))
			}
			var elems []string
			if sc.ts.Kind == spec.FromSignature {
				elems = append(elems, sc.ts.Name+ts)
			}
			for _, s := range sigs {
				if len(s) != sc.size {
					t.Fatalf("%s: signatures(%q) accepted a signature of %d bytes", sc.header, in, len(s))
				}
				elems = append(elems, sc.prefix+sc.enc.encode(s))
			}
			out := strings.Join(elems, sc.sep)
			again, ts2, err := sc.signatures(out)
			if err != nil || ts2 != ts || len(again) != len(sigs) {
				t.Fatalf("%s: round trip %q → %q: %v", sc.header, in, out, err)
			}
			for i := range sigs {
				if !bytes.Equal(sigs[i], again[i]) {
					t.Fatalf("%s: round trip %q → %q changed signature %d", sc.header, in, out, i)
				}
			}
		}
	})
}
