package proxy

import (
	"errors"
	"fmt"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// ErrKeysFile is wrapped by the error LoadKeys returns for a keys file it
// will not use.
var ErrKeysFile = errors.New("proxy: keys file refused")

// Keys maps client keys to client names. It keeps only the keys' SHA-256
// digests, and looks a presented key up by its digest, so that neither
// the keys nor the time a lookup takes tell anything of them.
type Keys struct {
	set *secretfile.Set
}

// LoadKeys reads a keys file: one client per line, its name, blanks, its
// key; blank lines and lines starting with # are skipped. The file is held
// to the rules of every secret file Oncegate reads (package secretfile):
// readable by its owner alone, each name a valid client name
// (config.ValidClientName) given once, and each key at least 20 bytes,
// with no key used twice.
func LoadKeys(path string) (*Keys, error) {
	set, err := secretfile.Load(path, secretfile.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeysFile, err)
	}
	return &Keys{set: set}, nil
}

// Client returns the name of the client whose key is key.
func (k *Keys) Client(key string) (string, bool) { return k.set.Lookup(key) }

// Clients returns the clients' names, sorted.
func (k *Keys) Clients() []string { return k.set.Names() }
