package app

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/oncegate/oncegate/internal/config"
)

// ErrEncryptionKey is wrapped by the error Start returns when a Badger
// store in the data directory (the ledger or the LLM cache) was written
// with another encryption key than encryption.key_file holds, or with none
// while one is set, or with one while none is set.
var ErrEncryptionKey = errors.New("app: the data directory's encryption key does not match")

// ErrKeyFilePermissions is wrapped by the error EncryptionKey returns for
// a key file that its group or others may read or write: the key opens the
// whole data directory, so, as ssh does with a private key, Oncegate
// refuses it (at start and in config check) rather than use a key others
// may have copied. The error says the command that fixes it.
var ErrKeyFilePermissions = errors.New("app: encryption key file is open to others")

// EncryptionKey reads the key of encryption.key_file: nil when none is
// set. The file must hold exactly 16, 24 or 32 bytes, and be neither
// readable nor writable by its group or others (ErrKeyFilePermissions).
func EncryptionKey(cfg *config.Config) ([]byte, error) {
	path := cfg.Encryption.KeyFile
	if path == "" {
		return nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("app: encryption.key_file: %w", err)
	}
	if perm := fi.Mode().Perm(); runtime.GOOS != "windows" && perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: encryption.key_file %s has mode %04o, open to its group or others; "+
			"it holds the key to the data directory: chmod 600 %s (for a Kubernetes secret volume, defaultMode: 0400)", ErrKeyFilePermissions, path, perm, path)
	}
	key, err := os.ReadFile(path)
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
