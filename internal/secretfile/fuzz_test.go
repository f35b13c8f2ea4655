package secretfile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// FuzzParse: a secrets file that Parse accepts lets in exactly the
// secrets it lists, each under its own name: every listed secret looks up
// to its line's name, no other field of the file looks up to anyone, and
// the set is what a plain reading of the lines gives (a name, blanks, a
// secret of at least MinBytes; a lone secret only alone, and only when
// allowed). Content it refuses is refused with a typed error that shows no
// secret.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"alice " + tokA + "\nbob " + tokB + "\n",
		"# operators\n\talice   " + tokA + "\r\n\n",
		tokA + "\n",
		tokA + "\nbob " + tokB,
		"alice " + tokA + "\nalice " + tokB,
		"alice " + tokA + "\nbob " + tokA,
		"alice short\n",
		"Alice " + tokA,
		"a b c\n",
		"#" + tokA,
		"",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, in string, allowLone bool) {
		var o secretfile.Options
		if allowLone {
			o.LoneName = "operator"
		}
		s, err := secretfile.Parse("tokens", []byte(in), o)
		want, ok := plainReading(in, o.LoneName)
		if err != nil {
			if ok {
				t.Fatalf("Parse(%q, lone %v) = %v; a plain reading accepts it: %v", in, allowLone, err, want)
			}
			if !errors.Is(err, secretfile.ErrFormat) && !errors.Is(err, secretfile.ErrTooShort) {
				t.Fatalf("Parse(%q) = %v; want ErrFormat or ErrTooShort", in, err)
			}
			for _, fld := range strings.Fields(in) {
				if len(fld) >= secretfile.MinBytes && strings.Contains(err.Error(), fld) {
					t.Fatalf("Parse(%q) error %q shows the field %q", in, err, fld)
				}
			}
			return
		}
		if !ok {
			t.Fatalf("Parse(%q, lone %v) accepted %v; a plain reading refuses it", in, allowLone, s.Names())
		}
		if s.Len() != len(want) {
			t.Fatalf("Parse(%q) holds %d secrets; want %d", in, s.Len(), len(want))
		}
		for secret, name := range want {
			if got, ok := s.Lookup(secret); !ok || got != name {
				t.Fatalf("Parse(%q).Lookup(%q) = %q, %v; want %q", in, secret, got, ok, name)
			}
		}
		for _, fld := range append(strings.Fields(in), "", in) {
			if name, ok := s.Lookup(fld); ok && want[fld] != name {
				t.Fatalf("Parse(%q).Lookup(%q) = %q; it is no listed secret", in, fld, name)
			}
		}
	})
}

// plainReading reads in line by line, as the format's description says,
// and returns its secrets with their names, or false if it is refused.
func plainReading(in, lone string) (map[string]string, bool) {
	out := map[string]string{}
	names := map[string]bool{}
	sawLone := false
	for _, line := range strings.Split(in, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var name, secret string
		switch len(f) {
		case 1:
			if lone == "" || len(out) > 0 {
				return nil, false
			}
			name, secret, sawLone = lone, f[0], true
		case 2:
			if sawLone || !secretfile.ValidName(f[0]) || names[f[0]] {
				return nil, false
			}
			name, secret = f[0], f[1]
		default:
			return nil, false
		}
		if _, dup := out[secret]; dup || len(secret) < secretfile.MinBytes {
			return nil, false
		}
		out[secret], names[name] = name, true
	}
	return out, len(out) > 0
}
