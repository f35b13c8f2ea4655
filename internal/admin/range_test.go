package admin_test

import (
	"errors"
	"testing"

	"github.com/oncegate/oncegate/internal/admin"
)

func TestParseRange(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    admin.Range
		wantErr bool
	}{
		{"12", admin.Range{From: 12, To: 12}, false},
		{"10-20", admin.Range{From: 10, To: 20}, false},
		{"10-", admin.Range{From: 10}, false},
		{"0", admin.Range{}, true},
		{"20-10", admin.Range{}, true},
		{"-5", admin.Range{}, true},
		{"a-b", admin.Range{}, true},
		{"", admin.Range{}, true},
		{"1-2-3", admin.Range{}, true},
	} {
		got, err := admin.ParseRange(tt.in)
		if tt.wantErr {
			if !errors.Is(err, admin.ErrBadRequest) {
				t.Errorf("ParseRange(%q) = %v, %v; want ErrBadRequest", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

// FuzzParseRange: what parses prints back as the same range, and nothing
// panics.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"12", "10-20", "10-", "0", "-", "18446744073709551615-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := admin.ParseRange(s)
		if err != nil {
			if !errors.Is(err, admin.ErrBadRequest) {
				t.Fatalf("ParseRange(%q) error %v is not ErrBadRequest", s, err)
			}
			return
		}
		back, err := admin.ParseRange(r.String())
		if err != nil || back != r {
			t.Fatalf("ParseRange(%q) = %v, printed %q, parsed back %v, %v", s, r, r.String(), back, err)
		}
		if r.From == 0 || r.To != 0 && r.To < r.From {
			t.Fatalf("ParseRange(%q) = %v: not a range of sequences", s, r)
		}
	})
}
