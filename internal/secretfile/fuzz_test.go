package secretfile_test

import (
	"errors"
	"io/fs"
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

// FuzzCheckMode: the mode rule never lets in a secret file that someone
// other than its owner could change, nor one every user could read, nor
// one of a third user; it lets in a group-readable file only when root
// gives it to a process that is not root (kubelet's secret volumes); it
// always lets a process read its own 0400 and 0600 files and, as any user
// but root, kubelet's root-owned 0440; and taking a permission away from
// a file it accepts never makes it refuse the file. Every refusal wraps
// ErrMode and says the command that fixes it.
func FuzzCheckMode(f *testing.F) {
	for _, s := range []struct {
		mode        uint32
		owner, self int
	}{{0o600, 1000, 1000}, {0o440, 0, 10001}, {0o640, 0, 10001}, {0o644, 0, 10001}, {0o440, 0, 0}, {0o400, 7, 1000}, {0o660, 0, 10001}, {0o4750, 0, 1}} {
		f.Add(s.mode, s.owner, s.self)
	}
	f.Fuzz(func(t *testing.T, mode uint32, owner, self int) {
		m := fs.FileMode(mode)
		perm := m.Perm()
		err := secretfile.CheckMode("/s", m, owner, self)
		if err != nil {
			if !errors.Is(err, secretfile.ErrMode) || !strings.Contains(err.Error(), "/s") ||
				!strings.Contains(err.Error(), "chmod") && !strings.Contains(err.Error(), "chown") {
				t.Fatalf("CheckMode(%04o, %d, %d) = %v; want ErrMode naming the file and its fix", perm, owner, self, err)
			}
		} else {
			switch {
			case perm&0o022 != 0:
				t.Fatalf("CheckMode(%04o, %d, %d) accepts a file its group or others may write", perm, owner, self)
			case perm&0o007 != 0:
				t.Fatalf("CheckMode(%04o, %d, %d) accepts a file every user may read", perm, owner, self)
			case owner != self && owner != 0:
				t.Fatalf("CheckMode(%04o, %d, %d) accepts another user's file", perm, owner, self)
			case perm&0o070 != 0 && (owner != 0 || self == 0):
				t.Fatalf("CheckMode(%04o, %d, %d) accepts a group-readable file that root did not give to another user", perm, owner, self)
			}
			for bit := fs.FileMode(1); bit <= 0o400; bit <<= 1 {
				if perm&bit != 0 {
					if err := secretfile.CheckMode("/s", m&^bit, owner, self); err != nil {
						t.Fatalf("CheckMode accepts %04o but refuses %04o, which grants less: %v", perm, (m &^ bit).Perm(), err)
					}
				}
			}
		}
		if (owner == self && (perm == 0o400 || perm == 0o600)) || (owner == 0 && self != 0 && perm == 0o440) {
			if err != nil {
				t.Fatalf("CheckMode(%04o, %d, %d) = %v; want it accepted", perm, owner, self, err)
			}
		}
	})
}
