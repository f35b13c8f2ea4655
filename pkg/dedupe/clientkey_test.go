package dedupe_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

// TestClientKey: a client's string gives one key per scope; strings that
// are not 1 to 255 printable ASCII bytes are refused with ErrInvalidKey.
func TestClientKey(t *testing.T) {
	const uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	a, err := dedupe.ClientKey(uuid, "POST /orders", "client:alice")
	if err != nil {
		t.Fatal(err)
	}
	// Golden: keys are stable across releases.
	if got, want := a.String(), "feef69745d284d9fac87a1a0e46d3b30"; got != want {
		t.Errorf("ClientKey(%q) = %s; want %s", uuid, got, want)
	}
	for _, tt := range []struct {
		name  string
		s     string
		scope []string
	}{
		{"another client", uuid, []string{"POST /orders", "client:bob"}},
		{"another route", uuid, []string{"POST /refunds", "client:alice"}},
		{"no client", uuid, []string{"POST /orders"}},
		{"scope split otherwise", uuid, []string{"POST /orders client:alice"}},
		{"scope moved into the string", "client:alice" + uuid, []string{"POST /orders"}},
		{"another string", uuid + "0", []string{"POST /orders", "client:alice"}},
	} {
		b, err := dedupe.ClientKey(tt.s, tt.scope...)
		if err != nil || b == a {
			t.Errorf("%s: ClientKey(%q, %q) = %v, %v; want a key of its own", tt.name, tt.s, tt.scope, b, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("k", 256), "tab\there", "é", "nul\x00"} {
		if k, err := dedupe.ClientKey(bad, "POST /orders"); !errors.Is(err, dedupe.ErrInvalidKey) {
			t.Errorf("ClientKey(%q) = %v, %v; want ErrInvalidKey", bad, k, err)
		}
	}
	if _, err := dedupe.ClientKey(strings.Repeat("k", 255)); err != nil {
		t.Errorf("ClientKey(255 bytes) = %v; want a key", err)
	}
}

// FuzzClientKey: any string is a key or ErrInvalidKey, never the zero
// key, and the same string and scope give the same key.
func FuzzClientKey(f *testing.F) {
	f.Add("8e03978e-40d5-43e8-bc93-6894a57f9324", "POST /orders")
	f.Add("", "")
	f.Add("a b", "x\x00y")
	f.Fuzz(func(t *testing.T, s, scope string) {
		k, err := dedupe.ClientKey(s, scope)
		if err != nil {
			if !errors.Is(err, dedupe.ErrInvalidKey) {
				t.Fatalf("ClientKey(%q) error %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		if k == (dedupe.Key{}) {
			t.Fatalf("ClientKey(%q, %q) is the zero key", s, scope)
		}
		if k2, _ := dedupe.ClientKey(s, scope); k2 != k {
			t.Fatalf("ClientKey(%q, %q) gave %v, then %v", s, scope, k, k2)
		}
	})
}
