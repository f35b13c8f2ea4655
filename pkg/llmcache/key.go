package llmcache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/pkg/canon"
)

// ErrInvalidRequest is wrapped by the error KeyOf returns for a request it
// cannot key.
var ErrInvalidRequest = errors.New("llmcache: request cannot be keyed")

// Key identifies one model answer: 128 bits of SHA-256 over the namespace and
// the canonical form of every request field that can change the answer. Its
// text form is 32 lowercase hex digits.
type Key [16]byte

// String returns the key as 32 lowercase hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// keyDomain keeps cache keys apart from every other use of the hash; its
// version changes if the derivation does.
const keyDomain = "oncegate/llm-cache-key/v1"

// transport lists the request members that change how an answer is
// delivered, billed or logged, not what it says. They are left out of the
// key, so a streamed and a plain request share an entry (the cache replays
// either way).
var transport = func() []canon.Pointer {
	var ps []canon.Pointer
	for _, s := range []string{"/stream", "/stream_options", "/user", "/store", "/metadata", "/service_tier", "/safety_identifier"} {
		p, err := canon.ParsePointer(s)
		if err != nil {
			panic(err)
		}
		ps = append(ps, p)
	}
	return ps
}()

// keyLimits are generous: requests carry whole conversations, and they come
// from the caller's own code, not from the network.
var keyLimits = canon.Options{MaxBytes: 64 << 20, MaxStringBytes: 64 << 20, MaxMembers: 1 << 20, MaxDepth: 128}

// KeyOf returns the cache key of req in namespace (a tenant, a pipeline).
//
// The key covers everything in the request as go-openai sends it that can
// change the answer: the model, the messages (roles, names, content parts,
// tool calls), temperature, top_p, max tokens, n, seed, stop, penalties,
// logit bias, tools and functions and the choice among them, the response
// format, reasoning effort, and the rest of the request body. It leaves out
// streaming, the end-user id, storage, metadata and service tier, and it
// never sees the API key, which travels in a header. Two requests that
// differ only in member order, whitespace or number spelling share a key;
// requests in different namespaces never do.
//
// A seed or other integer beyond 2^53 is an error (wrapping canon's
// ErrInexactInteger): JSON numbers are doubles, and two such seeds could
// otherwise share a key and an answer.
func KeyOf(namespace string, req openai.ChatCompletionRequest) (Key, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	c, err := canon.New(keyLimits)
	if err != nil {
		return Key{}, err
	}
	doc, err := c.Append(nil, body)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	doc, err = canon.Omit(doc[:0:0], doc, transport)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	h := sha256.New()
	h.Write([]byte(keyDomain))
	h.Write([]byte{0})
	h.Write(binary.AppendUvarint(nil, uint64(len(namespace))))
	h.Write([]byte(namespace))
	h.Write(doc)
	var k Key
	copy(k[:], h.Sum(nil))
	return k, nil
}
