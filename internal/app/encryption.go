package app

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/secretfile"
)

// ErrEncryptionKey is wrapped by the error Start returns when a Badger
// store in the data directory (the ledger or the LLM cache) was written
// with another encryption key than encryption.key_file holds, or with none
// while one is set, or with one while none is set.
var ErrEncryptionKey = errors.New("app: the data directory's encryption key does not match")

// ErrKeyFilePermissions is wrapped by the error EncryptionKey returns for
// a key file that package secretfile's rule refuses (it wraps
// secretfile.ErrMode too): one others may read, its group or others may
// write, or its group may read while it is not root's. The key opens the
// whole data directory, so, as ssh does with a private key, Oncegate
// refuses it (at start and in config check) rather than use a key others
// may have copied. A Kubernetes secret volume's file (root's, of mode
// 0440 under the pod's fsGroup) passes. The error says the command that
// fixes it.
var ErrKeyFilePermissions = errors.New("app: encryption key file is open to others")

// EncryptionKey reads the key of encryption.key_file: nil when none is
// set. The file must hold exactly 16, 24 or 32 bytes, and pass package
// secretfile's rule (ErrKeyFilePermissions).
func EncryptionKey(cfg *config.Config) ([]byte, error) {
	path := cfg.Encryption.KeyFile
	if path == "" {
		return nil, nil
	}
	key, err := secretfile.ReadFile(path)
	if errors.Is(err, secretfile.ErrMode) {
		return nil, fmt.Errorf("%w: encryption.key_file: it holds the key to the data directory: %w", ErrKeyFilePermissions, err)
	}
	if err != nil {
		return nil, fmt.Errorf("app: encryption.key_file: %w", err)
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		clear(key)
		return nil, fmt.Errorf("app: encryption.key_file %s holds %d bytes; want exactly 16, 24 or 32 raw bytes "+
			"((umask 077; head -c 32 /dev/urandom > %s); a trailing newline counts)", path, n, path)
	}
	return key, nil
}

// keyError names the store and the key file when err is Badger's key
// mismatch, wrapping ErrEncryptionKey; other errors pass unchanged.
func keyError(cfg *config.Config, store, dir string, err error) error {
	if !errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return err
	}
	if k := cfg.Encryption.KeyFile; k != "" {
		return fmt.Errorf("%w: the %s in %s was not written with the key in %s (encryption.key_file) but with another, or none; "+
			"start with the key it was written with (a key cannot be added or changed in place): %w", ErrEncryptionKey, store, dir, k, err)
	}
	return fmt.Errorf("%w: the %s in %s is encrypted, and no encryption.key_file is set; "+
		"start with the key it was written with: %w", ErrEncryptionKey, store, dir, err)
}
