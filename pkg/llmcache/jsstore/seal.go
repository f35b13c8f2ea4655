package jsstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/oncegate/oncegate/pkg/llmcache"
)

// Sealed answers. With Options.Key, each answer entry is sealed before it
// is written (and before it is cut into chunks): the version magic, a
// random 96-bit nonce, and the entry under AES-GCM, with the cache key as
// additional data so that a sealed answer moved under another key does not
// open. The bucket records which key seals it (metaEncryption), so that a
// replica without the key, or with another, is refused at New instead of
// writing plain text beside the sealed answers or reading none of them.
const (
	sealMagic      = "OGE1"
	metaEncryption = "oncegate.encryption"
)

// sealer seals and opens answer entries; nil without a key.
type sealer struct {
	aead cipher.AEAD
	id   string // names the key in the bucket's metadata
}

func newSealer(key []byte) (*sealer, error) {
	if key == nil {
		return nil, nil
	}
	if n := len(key); n != 16 && n != 24 && n != 32 {
		return nil, fmt.Errorf("%w: Key is %d bytes; want 16, 24 or 32", llmcache.ErrInvalidOptions, n)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", llmcache.ErrInvalidOptions, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", llmcache.ErrInvalidOptions, err)
	}
	return &sealer{aead: aead, id: keyID(key)}, nil
}

// keyID is the key's check value in the bucket's metadata: the first 8
// bytes of an HMAC-SHA256 of a fixed text under the key. It tells keys
// apart and says nothing of the key.
func keyID(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("oncegate llm cache key check"))
	return "aes-gcm/" + hex.EncodeToString(m.Sum(nil)[:8])
}

// seal returns entry sealed for cache key k.
func (s *sealer) seal(k llmcache.Key, entry []byte) []byte {
	out := make([]byte, len(sealMagic)+s.aead.NonceSize(), len(sealMagic)+s.aead.NonceSize()+len(entry)+s.aead.Overhead())
	copy(out, sealMagic)
	rand.Read(out[len(sealMagic):])
	return s.aead.Seal(out, out[len(sealMagic):], entry, []byte(k.String()))
}

// open returns the entry v seals for k. A value that is not sealed (an
// answer written before the bucket was encrypted) is a miss, to be asked
// again and overwritten sealed; one that does not open is a corrupt entry,
// which the cache treats the same way.
func (s *sealer) open(k llmcache.Key, v []byte) ([]byte, error) {
	n := len(sealMagic) + s.aead.NonceSize()
	if len(v) < len(sealMagic) || string(v[:len(sealMagic)]) != sealMagic {
		return nil, fmt.Errorf("%w: %v: an answer in plain text, written before the bucket was encrypted", llmcache.ErrNotFound, k)
	}
	if len(v) < n+s.aead.Overhead() {
		return nil, fmt.Errorf("%w: %v: sealed answer of %d bytes", llmcache.ErrCorruptEntry, k, len(v))
	}
	entry, err := s.aead.Open(nil, v[len(sealMagic):n], v[n:], []byte(k.String()))
	if err != nil {
		return nil, fmt.Errorf("%w: %v: sealed answer does not open: %w", llmcache.ErrCorruptEntry, k, err)
	}
	return entry, nil
}
