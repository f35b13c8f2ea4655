package proxy

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/config"
)

// ErrKeysFile is wrapped by the error LoadKeys returns for a keys file it
// will not use.
var ErrKeysFile = errors.New("proxy: keys file refused")

// minKeyBytes is the shortest client key accepted: a key is a bearer
// secret, and a short one can be guessed.
const minKeyBytes = 20

// Keys maps client keys to client names. It keeps only the keys' SHA-256
// digests, and looks a presented key up by its digest, so that neither
// the keys nor the time a lookup takes tell anything of them.
type Keys struct {
	names   map[[sha256.Size]byte]string
	clients []string // sorted
}

// LoadKeys reads a keys file: one client per line, its name, blanks, its
// key; blank lines and lines starting with # are skipped. The file must be
// readable by its owner alone, each name a valid client name
// (config.ValidClientName) given once, and each key at least 20 bytes,
// with no key used twice.
func LoadKeys(path string) (*Keys, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeysFile, err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s can be read by its group or others (mode %#o): it holds secrets; chmod 600 %s", ErrKeysFile, path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeysFile, err)
	}
	defer clear(b)
	k := &Keys{names: map[[sha256.Size]byte]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) != 2:
			return nil, fmt.Errorf("%w: %s:%d: want a client name and its key, separated by blanks", ErrKeysFile, path, n)
		case !config.ValidClientName(f[0]):
			return nil, fmt.Errorf("%w: %s:%d: %q is not a client name: lower-case letters, digits, '-' and '_'", ErrKeysFile, path, n, f[0])
		case slices.Contains(k.clients, f[0]):
			return nil, fmt.Errorf("%w: %s:%d: client %q is named twice", ErrKeysFile, path, n, f[0])
		case len(f[1]) < minKeyBytes:
			return nil, fmt.Errorf("%w: %s:%d: the key of %q is %d bytes; want at least %d", ErrKeysFile, path, n, f[0], len(f[1]), minKeyBytes)
		}
		h := sha256.Sum256([]byte(f[1]))
		if other, ok := k.names[h]; ok {
			return nil, fmt.Errorf("%w: %s:%d: the key of %q is also %q's", ErrKeysFile, path, n, f[0], other)
		}
		k.names[h] = f[0]
		k.clients = append(k.clients, f[0])
	}
	if len(k.clients) == 0 {
		return nil, fmt.Errorf("%w: %s holds no client key", ErrKeysFile, path)
	}
	slices.Sort(k.clients)
	return k, nil
}

// Client returns the name of the client whose key is key.
func (k *Keys) Client(key string) (string, bool) {
	name, ok := k.names[sha256.Sum256([]byte(key))]
	return name, ok
}

// Clients returns the clients' names, sorted.
func (k *Keys) Clients() []string { return slices.Clone(k.clients) }
