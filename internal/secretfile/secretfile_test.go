package secretfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/secretfile"
)

const (
	tokA = "alice-token-0123456789"
	tokB = "bob-token-0123456789ab"
)

// TestCheckMode: the one rule for secret files. A file others may read,
// or its group or others may write, is refused; so is one of another
// user. A file of this process's own user may be read by it alone (0600,
// 0400); a root-owned one read by a process that is not root may be read
// by its group too (0640, 0440: kubelet's secret volume under fsGroup).
// Every refusal names the fix.
func TestCheckMode(t *testing.T) {
	const me, other = 10001, 10002
	for _, tt := range []struct {
		mode        os.FileMode
		owner, self int
		ok          bool
		fix         string
	}{
		{0o600, me, me, true, ""},
		{0o400, me, me, true, ""},
		{0o700, me, me, true, ""},
		{0o640, me, me, false, "chmod 600"},
		{0o440, me, me, false, "chmod 600"},
		{0o604, me, me, false, "chmod 600"},
		{0o660, me, me, false, "chmod 600"},
		{0o644, me, me, false, "chmod 600"},
		{0o601, me, me, false, "chmod 600"},
		{0o610, me, me, false, "chmod 600"},
		{0o666, me, me, false, "chmod 600"},
		{0o620, me, me, false, "chmod 600"},
		// kubelet: root's file, the pod's group.
		{0o440, 0, me, true, ""},
		{0o640, 0, me, true, ""},
		{0o400, 0, me, true, ""},
		{0o600, 0, me, true, ""},
		{0o444, 0, me, false, "defaultMode: 0440"},
		{0o644, 0, me, false, "defaultMode: 0440"},
		{0o660, 0, me, false, "chmod 600"},
		{0o642, 0, me, false, "chmod 600"},
		{0o450, 0, me, false, "chmod 640"},
		// Running as root: root's files are its own.
		{0o600, 0, 0, true, ""},
		{0o400, 0, 0, true, ""},
		{0o440, 0, 0, false, "chmod 600"},
		{0o640, 0, 0, false, "chmod 600"},
		// Another user's file, whatever its mode.
		{0o400, other, me, false, "chown 10001"},
		{0o600, other, 0, false, "chown 0"},
	} {
		err := secretfile.CheckMode("/run/secrets/tokens", tt.mode, tt.owner, tt.self)
		switch {
		case tt.ok && err != nil:
			t.Errorf("CheckMode(%04o, owner %d, self %d) = %v; want nil", tt.mode, tt.owner, tt.self, err)
		case !tt.ok && (!errors.Is(err, secretfile.ErrMode) || !strings.Contains(err.Error(), tt.fix)):
			t.Errorf("CheckMode(%04o, owner %d, self %d) = %v; want ErrMode with %q", tt.mode, tt.owner, tt.self, err, tt.fix)
		}
	}
}

// TestLoadChecksTheFileRead: Load applies the mode rule to the file it
// reads, and reads nothing of a file it refuses.
func TestLoadChecksTheFileRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("alice "+tokA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := secretfile.Load(path, secretfile.Options{})
	if err != nil {
		t.Fatalf("Load(0600) = %v", err)
	}
	if name, ok := s.Lookup(tokA); !ok || name != "alice" {
		t.Errorf("Lookup(alice's token) = %q, %v; want alice", name, ok)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := secretfile.Load(path, secretfile.Options{}); !errors.Is(err, secretfile.ErrMode) {
		t.Errorf("Load(0644) = %v; want ErrMode", err)
	}
	if _, err := secretfile.Load(filepath.Join(t.TempDir(), "none"), secretfile.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want os.ErrNotExist", err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("#\n", secretfile.MaxFileBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := secretfile.Load(big, secretfile.Options{}); !errors.Is(err, secretfile.ErrFormat) {
		t.Errorf("Load(2 MiB) = %v; want ErrFormat", err)
	}
}

// TestParse: the `name secret` format, and a lone secret where one is
// allowed; every refusal is typed and shows nothing of the content.
func TestParse(t *testing.T) {
	lone := secretfile.Options{LoneName: "operator"}
	for _, tt := range []struct {
		name    string
		in      string
		o       secretfile.Options
		want    map[string]string // secret → name
		wantErr error
	}{
		{"named", "# operators\nalice " + tokA + "\n\n  bob\t" + tokB + "  \r\n", secretfile.Options{}, map[string]string{tokA: "alice", tokB: "bob"}, nil},
		{"named, lone allowed", "alice " + tokA + "\nbob " + tokB, lone, map[string]string{tokA: "alice", tokB: "bob"}, nil},
		{"lone", "\n" + tokA + "\n", lone, map[string]string{tokA: "operator"}, nil},
		{"lone, not allowed", tokA + "\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"lone among named", "alice " + tokA + "\n" + tokB + "\n", lone, nil, secretfile.ErrFormat},
		{"named after lone", tokA + "\nbob " + tokB + "\n", lone, nil, secretfile.ErrFormat},
		{"two lone", tokA + "\n" + tokB + "\n", lone, nil, secretfile.ErrFormat},
		{"short", "alice short-secret-19byt\n", secretfile.Options{}, nil, secretfile.ErrTooShort},
		{"short lone", "short-secret-19byte\n", lone, nil, secretfile.ErrTooShort},
		{"bad name", "Alice " + tokA + "\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"long name", strings.Repeat("a", 65) + " " + tokA + "\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"name twice", "alice " + tokA + "\nalice " + tokB + "\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"secret twice", "alice " + tokA + "\nbob " + tokA + "\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"three fields", "alice " + tokA + " extra\n", secretfile.Options{}, nil, secretfile.ErrFormat},
		{"empty", "", lone, nil, secretfile.ErrFormat},
		{"comments only", "# nothing\n\n", lone, nil, secretfile.ErrFormat},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := secretfile.Parse("tokens", []byte(tt.in), tt.o)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || s != nil {
					t.Fatalf("Parse(%q) = %v, %v; want %v", tt.in, s, err, tt.wantErr)
				}
				for _, f := range strings.Fields(tt.in) {
					if len(f) > 3 && f != "nothing" && strings.Contains(err.Error(), f) {
						t.Errorf("Parse(%q) error %q shows %q of the content", tt.in, err, f)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.in, err)
			}
			var names []string
			for secret, name := range tt.want {
				if got, ok := s.Lookup(secret); !ok || got != name {
					t.Errorf("Lookup(%q) = %q, %v; want %q", secret, got, ok, name)
				}
				names = append(names, name)
			}
			slices.Sort(names)
			if got := s.Names(); !slices.Equal(got, names) || s.Len() != len(names) {
				t.Errorf("Names() = %v, Len() = %d; want %v", got, s.Len(), names)
			}
			for _, other := range []string{"", tokA[:len(tokA)-1], tokA + "x", "alice", "operator"} {
				if name, ok := s.Lookup(other); ok {
					t.Errorf("Lookup(%q) = %q; want no one", other, name)
				}
			}
		})
	}
}

// TestNilSet: a nil *Set holds nothing.
func TestNilSet(t *testing.T) {
	var s *secretfile.Set
	if name, ok := s.Lookup(tokA); ok || s.Len() != 0 || s.Names() != nil {
		t.Errorf("nil Set: Lookup = %q, %v; Len = %d; want nothing", name, ok, s.Len())
	}
}
