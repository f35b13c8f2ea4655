package dedupe

import (
	"crypto/sha256"
	"fmt"
)

// clientKeyDomain keeps keys derived from clients' strings apart from
// every key a Keyer derives, whatever the bytes.
const clientKeyDomain = "oncegate/client-key/v1"

// maxClientKeyBytes is the longest client string ClientKey accepts.
const maxClientKeyBytes = 255

// ClientKey derives the key of the work a client names with a string of its
// own, such as the value of an HTTP Idempotency-Key header (a UUID, say),
// within scope: the parts that keep one client's string from naming
// another's work, such as the route and the authenticated client. The same
// string in the same scope gives the same key; in another scope, or with
// the scope's parts split otherwise, another.
//
// s must be 1 to 255 bytes of printable ASCII (space to tilde); anything
// else is an error wrapping [ErrInvalidKey]. The key is the first 128 bits
// of a SHA-256 of a domain of its own, the scope's parts and s, each
// length-prefixed: a client cannot choose its string to collide with
// another's, nor with a key a [Keyer] derives. Unlike [ParseKey], which
// reads a key's own text form back, ClientKey never returns s's bytes as
// the key.
func ClientKey(s string, scope ...string) (Key, error) {
	if len(s) == 0 || len(s) > maxClientKeyBytes {
		return Key{}, fmt.Errorf("%w: a client key must be 1 to %d bytes, not %d", ErrInvalidKey, maxClientKeyBytes, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return Key{}, fmt.Errorf("%w: client key %q: byte %d is not printable ASCII", ErrInvalidKey, truncateText(s), i)
		}
	}
	b := append([]byte(clientKeyDomain), 0)
	b = appendList(b, scope)
	b = appendString(b, s)
	h := sha256.Sum256(b)
	var k Key
	copy(k[:], h[:16])
	return k, nil
}
