package ingress

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// The example values GitHub publishes in "Validating webhook deliveries".
func TestGitHubDocumentedVector(t *testing.T) {
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	keys := [][]byte{[]byte("It's a Secret to Everybody")}
	if err := verifyHex(sig, "sha256=", keys, []byte("Hello, World!")); err != nil {
		t.Fatalf("GitHub's documented signature: %v", err)
	}
	if err := verifyHex(sig, "sha256=", keys, []byte("Hello, World?")); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("another body: %v; want ErrBadSignature", err)
	}
}

// The example of the Standard Webhooks specification.
func TestStandardDocumentedVector(t *testing.T) {
	key, err := decodeStandardSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderStandardID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set(HeaderStandardTime, "1614265330")
	// A v1a (asymmetric) entry and a second v1 from another secret, as a
	// sender mid-rotation sends them, must not get in the way.
	h.Set(HeaderStandardSig, "v1a,AAAA v1,"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))+" v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	at := time.Unix(1614265330, 0)
	if err := verify("standard", "", "", [][]byte{key}, h, body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("the specification's example: %v", err)
	}
	if err := verify("standard", "", "", [][]byte{key}, h, body, at.Add(10*time.Minute), 5*time.Minute); !errors.Is(err, ErrStale) {
		t.Fatalf("ten minutes later: %v; want ErrStale", err)
	}
}

// Stripe signs "t.body" and may send several v1 signatures (one per
// secret while the endpoint's secret is rolled) and a v0.
func TestStripeSeveralSignatures(t *testing.T) {
	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	now := time.Unix(1_700_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	good := hex.EncodeToString(mac([]byte("whsec_new"), []byte(ts), []byte("."), body))
	other := hex.EncodeToString(mac([]byte("whsec_other"), []byte(ts), []byte("."), body))
	h := http.Header{}
	h.Set(HeaderStripeSignature, "t="+ts+",v1="+other+",v1="+good+",v0="+other)
	if err := verify("stripe", "", "", [][]byte{[]byte("whsec_new")}, h, body, now, 5*time.Minute); err != nil {
		t.Fatalf("second v1 matches: %v", err)
	}
	if err := verify("stripe", "", "", [][]byte{[]byte("whsec_gone")}, h, body, now, 5*time.Minute); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("no v1 matches: %v; want ErrBadSignature", err)
	}
}

func TestParseStripeSignature(t *testing.T) {
	sig := strings.Repeat("ab", 32)
	tests := []struct {
		in      string
		wantErr error
		wantT   int64
		wantN   int
	}{
		{"t=1492774577,v1=" + sig, nil, 1492774577, 1},
		{"t=1492774577, v1=" + sig + ", v1=" + sig + ",v0=" + sig, nil, 1492774577, 2},
		{"", ErrNoSignature, 0, 0},
		{"v1=" + sig, ErrBadSignature, 0, 0},
		{"t=1492774577", ErrBadSignature, 0, 0},
		{"t=abc,v1=" + sig, ErrBadSignature, 0, 0},
		{"t=1,t=2,v1=" + sig, ErrBadSignature, 0, 0},
		{"t=1,v1=zz", ErrBadSignature, 0, 0},
		{"t=1,garbage", ErrBadSignature, 0, 0},
		{"t=1" + strings.Repeat(",v1="+sig, 40), ErrBadSignature, 0, 0},
	}
	for _, tt := range tests {
		s, err := parseStripeSignature(tt.in)
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("parseStripeSignature(%q) error = %v; want %v", truncate(tt.in), err, tt.wantErr)
			continue
		}
		if err == nil && (s.t != tt.wantT || len(s.v1s) != tt.wantN) {
			t.Errorf("parseStripeSignature(%q) = t %d, %d signatures; want %d, %d", tt.in, s.t, len(s.v1s), tt.wantT, tt.wantN)
		}
	}
}

func TestParseStandardSignature(t *testing.T) {
	sig := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	tests := []struct {
		in      string
		wantErr error
		wantN   int
	}{
		{"v1," + sig, nil, 1},
		{"v1," + sig + " v1a,xyz v1," + sig, nil, 2},
		{"", ErrNoSignature, 0},
		{"v1a,xyz", ErrBadSignature, 0},
		{"v1" + sig, ErrBadSignature, 0},
		{"v1,not-base64!", ErrBadSignature, 0},
		{"v1," + base64.StdEncoding.EncodeToString([]byte("short")), ErrBadSignature, 0},
	}
	for _, tt := range tests {
		got, err := parseStandardSignature(tt.in)
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("parseStandardSignature(%q) error = %v; want %v", tt.in, err, tt.wantErr)
			continue
		}
		if len(got) != tt.wantN {
			t.Errorf("parseStandardSignature(%q) = %d signatures; want %d", tt.in, len(got), tt.wantN)
		}
	}
}

// Fuzz targets: the parsers of the signature headers must not panic,
// must classify every failure as ErrNoSignature or ErrBadSignature, and
// what they accept must round-trip through the form providers send.

func FuzzStripeSignature(f *testing.F) {
	sig := strings.Repeat("ab", 32)
	for _, s := range []string{"t=1492774577,v1=" + sig, "t=1,v1=" + sig + ",v1=" + sig + ",v0=00", "", "t=", "v1=,t=1", "t=1,,v1=" + sig, "t=-1,v1=" + sig} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := parseStripeSignature(in)
		if err != nil {
			if !errors.Is(err, ErrNoSignature) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("parseStripeSignature(%q) error %v is neither sentinel", in, err)
			}
			return
		}
		if s.t < 0 || len(s.v1s) == 0 || len(s.v1s) > 2*maxSignaturesPerHeader {
			t.Fatalf("parseStripeSignature(%q) accepted t %d with %d signatures", in, s.t, len(s.v1s))
		}
		// Re-formatted as Stripe formats it, it parses to the same.
		out := "t=" + strconv.FormatInt(s.t, 10)
		for _, v := range s.v1s {
			if len(v) != sha256Size {
				t.Fatalf("a signature of %d bytes", len(v))
			}
			out += ",v1=" + hex.EncodeToString(v)
		}
		s2, err := parseStripeSignature(out)
		if err != nil || s2.t != s.t || len(s2.v1s) != len(s.v1s) {
			t.Fatalf("round trip %q → %q: %v", in, out, err)
		}
		for i := range s.v1s {
			if !bytes.Equal(s.v1s[i], s2.v1s[i]) {
				t.Fatalf("round trip %q → %q changed signature %d", in, out, i)
			}
		}
	})
}

func FuzzStandardSignature(f *testing.F) {
	sig := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	for _, s := range []string{"v1," + sig, "v1," + sig + " v1a,AAAA", "", " ", "v1,", ",", "v1,====", "v1," + sig + "\tv1," + sig} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sigs, err := parseStandardSignature(in)
		if err != nil {
			if !errors.Is(err, ErrNoSignature) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("parseStandardSignature(%q) error %v is neither sentinel", in, err)
			}
			return
		}
		if len(sigs) == 0 || len(sigs) > maxSignaturesPerHeader {
			t.Fatalf("parseStandardSignature(%q) accepted %d signatures", in, len(sigs))
		}
		parts := make([]string, len(sigs))
		for i, s := range sigs {
			if len(s) != sha256Size {
				t.Fatalf("a signature of %d bytes", len(s))
			}
			parts[i] = "v1," + base64.StdEncoding.EncodeToString(s)
		}
		out := strings.Join(parts, " ")
		again, err := parseStandardSignature(out)
		if err != nil || len(again) != len(sigs) {
			t.Fatalf("round trip %q → %q: %v", in, out, err)
		}
		for i := range sigs {
			if !bytes.Equal(sigs[i], again[i]) {
				t.Fatalf("round trip %q → %q changed signature %d", in, out, i)
			}
		}
	})
}

// FuzzHexSignature covers the GitHub, Sentry and hmac headers, and the
// Authorization header of Alertmanager sources.
func FuzzHexSignature(f *testing.F) {
	for _, s := range []string{"sha256=" + strings.Repeat("0f", 32), strings.Repeat("AB", 32), "sha256=", "sha1=abc", " sha256=" + strings.Repeat("ab", 32) + " ", "Bearer token", "Basic YW06cHc="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, prefix := range []string{"sha256=", ""} {
			b, err := parseHexSignature(in, prefix)
			if err != nil {
				if !errors.Is(err, ErrNoSignature) && !errors.Is(err, ErrBadSignature) {
					t.Fatalf("parseHexSignature(%q) error %v is neither sentinel", in, err)
				}
				continue
			}
			if len(b) != sha256Size {
				t.Fatalf("parseHexSignature(%q, %q) = %d bytes", in, prefix, len(b))
			}
			if !strings.EqualFold(strings.TrimSpace(in), prefix+hex.EncodeToString(b)) {
				t.Fatalf("parseHexSignature(%q, %q) = %x, which is not what it was given", in, prefix, b)
			}
		}
		scheme, cred, err := parseAuthorization(in)
		if err != nil {
			if !errors.Is(err, ErrNoSignature) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("parseAuthorization(%q) error %v is neither sentinel", in, err)
			}
			return
		}
		if scheme == "" || cred == "" || scheme != strings.ToLower(scheme) {
			t.Fatalf("parseAuthorization(%q) = %q, %q", in, scheme, cred)
		}
		// Whatever the header, the alertmanager check returns a sentinel
		// and never accepts a token it was not given.
		h := http.Header{"Authorization": {in}}
		err = verify("alertmanager", spec.AuthBearer, "", [][]byte{[]byte("the-token")}, h, nil, time.Now(), time.Minute)
		if err == nil && cred != "the-token" {
			t.Fatalf("bearer %q accepted", in)
		}
		err = verify("alertmanager", spec.AuthBasic, "am", [][]byte{[]byte("pw")}, h, nil, time.Now(), time.Minute)
		if raw, _ := base64.StdEncoding.DecodeString(cred); err == nil && string(raw) != "am:pw" {
			t.Fatalf("basic %q accepted", in)
		}
	})
}
