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

// ErrInvalidRequest is wrapped by the error returned for a request that
// cannot be keyed: a body that is not strict JSON, or a template input that
// is not.
var ErrInvalidRequest = errors.New("llmcache: request cannot be keyed")

// Key identifies one model answer: 128 bits of SHA-256 over the model
// endpoint, the namespace and the canonical form of every request field that can change the answer.
// Its text form is 32 lowercase hex digits.
type Key [16]byte

// String returns the key as 32 lowercase hex digits.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// keyDomain keeps cache keys apart from every other use of the hash; its
// version changes if the derivation does.
const keyDomain = "oncegate/llm-cache-key/v3"

func mustPointers(ss ...string) []canon.Pointer {
	ps := make([]canon.Pointer, 0, len(ss))
	for _, s := range ss {
		p, err := canon.ParsePointer(s)
		if err != nil {
			panic(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// delivery lists the request members that change how an answer is billed or
// logged, not what it says; they are left out of the key.
//
// "stream" and "stream_options" stay in the key: a streamed answer is
// stored and replayed as the same event stream, and a plain one as the same
// JSON, so the two are different entries.
var delivery = mustPointers("/user", "/store", "/metadata", "/service_tier", "/safety_identifier")

// templated additionally leaves out the rendered messages when the call
// names the template and input they were rendered from.
var templated = mustPointers("/messages", "/user", "/store", "/metadata", "/service_tier", "/safety_identifier")

// keyLimits are generous: requests carry whole conversations, and they come
// from the caller's own code, not from the network.
var keyLimits = canon.Options{MaxBytes: 64 << 20, MaxStringBytes: 64 << 20, MaxMembers: 1 << 20, MaxDepth: 128}

// KeyOf returns the key under which the answer to req, sent to endpoint,
// is cached for call. endpoint is what the cache calls the endpoint:
// [Options.Endpoint], or by default the base URL the client sends to
// (scheme, host and path before /chat/completions, e.g.
// "https://api.openai.com/v1"); answers from one endpoint are never served
// for another.
//
// The key covers the endpoint; call's namespace; call's intent when KeyByIntent is set;
// and everything in the request as go-openai sends it that can change the
// answer: the model, the messages (roles, names, content parts, tool calls),
// temperature, top_p, max tokens, n, seed, stop, penalties, logit bias,
// tools and functions and the choice among them, the response format,
// reasoning effort, streaming, and the rest of the body. When call names a
// [Template], its name, version and canonical input stand for the rendered
// messages, so a timestamp the template interpolates does not split the
// cache. It leaves out the end-user id, storage, metadata and service tier,
// and it never sees the API key, which travels in a header.
//
// Two requests that differ only in member order, whitespace or number
// spelling share a key; requests in different namespaces never do.
//
// A seed or other integer beyond 2^53 is an error (wrapping canon's
// ErrInexactInteger): JSON numbers are doubles, and two such seeds could
// otherwise share a key and an answer.
func KeyOf(endpoint string, call Call, req openai.ChatCompletionRequest) (Key, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	return keyBody(endpoint, call, body, nil)
}

// keyBody keys a chat completion request body sent to endpoint for call.
// scratch is reused for the canonical form when it has room.
func keyBody(endpoint string, call Call, body, scratch []byte) (Key, error) {
	c, err := canon.New(keyLimits)
	if err != nil {
		return Key{}, err
	}
	doc, err := c.Append(scratch[:0], body)
	if err != nil {
		return Key{}, fmt.Errorf("%w: body: %w", ErrInvalidRequest, err)
	}
	omit := delivery
	if call.Template != nil {
		omit = templated
	}
	req, err := canon.Omit(nil, doc, omit)
	if err != nil {
		return Key{}, fmt.Errorf("%w: body: %w", ErrInvalidRequest, err)
	}

	h := sha256.New()
	var lb [binary.MaxVarintLen64]byte
	field := func(b []byte) {
		h.Write(lb[:binary.PutUvarint(lb[:], uint64(len(b)))])
		h.Write(b)
	}
	h.Write([]byte(keyDomain))
	field([]byte(endpoint))
	field([]byte(call.Namespace))
	if call.KeyByIntent {
		field([]byte("intent"))
		field([]byte(call.Intent))
	}
	if t := call.Template; t != nil {
		in, err := c.Append(doc[:0], t.Input)
		if err != nil {
			return Key{}, fmt.Errorf("%w: template %s input: %w", ErrInvalidRequest, t.Name, err)
		}
		field([]byte("template"))
		field([]byte(t.Name))
		field([]byte(t.Version))
		field(in)
	}
	field([]byte("request"))
	field(req)
	var k Key
	copy(k[:], h.Sum(nil))
	return k, nil
}
