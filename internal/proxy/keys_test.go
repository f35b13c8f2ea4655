package proxy_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/oncegate/oncegate/internal/proxy"
)

// TestLoadKeys: a keys file is refused, with the line at fault, when
// others can read it or when a line is not a client and a key of 20 bytes
// or more, names a client twice or reuses a key.
func TestLoadKeys(t *testing.T) {
	const good = "sk-0123456789abcdefghij"
	for _, tt := range []struct {
		name, text string
		perm       os.FileMode
		ok         bool
	}{
		{"two clients", "# comment\n\nalice " + good + "\nbob\t" + good + "x\n", 0o600, true},
		{"readable by others", "alice " + good + "\n", 0o644, false},
		{"short key", "alice sk-short\n", 0o600, false},
		{"three fields", "alice " + good + " extra\n", 0o600, false},
		{"bad name", "Alice " + good + "\n", 0o600, false},
		{"client twice", "alice " + good + "\nalice " + good + "x\n", 0o600, false},
		{"key twice", "alice " + good + "\nbob " + good + "\n", 0o600, false},
		{"empty", "# nobody\n", 0o600, false},
	} {
		path := filepath.Join(t.TempDir(), "keys")
		if err := os.WriteFile(path, []byte(tt.text), tt.perm); err != nil {
			t.Fatal(err)
		}
		k, err := proxy.LoadKeys(path)
		if tt.ok {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			if c, ok := k.Client(good); !ok || c != "alice" {
				t.Errorf("%s: Client(alice's key) = %q, %v", tt.name, c, ok)
			}
			if _, ok := k.Client(good[:len(good)-1]); ok {
				t.Errorf("%s: a key one byte short was taken", tt.name)
			}
			continue
		}
		if !errors.Is(err, proxy.ErrKeysFile) {
			t.Errorf("%s: LoadKeys = %v; want ErrKeysFile", tt.name, err)
		}
	}
}
