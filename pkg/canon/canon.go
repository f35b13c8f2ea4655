package canon

import (
	"fmt"
	"sync"
)

// Default limits, used for the zero fields of [Options].
const (
	defaultMaxBytes       = 1 << 20
	defaultMaxDepth       = 64
	defaultMaxStringBytes = 256 << 10
	defaultMaxMembers     = 10_000
)

// Options configures a [Canonicalizer]. The zero value means the defaults.
type Options struct {
	// MaxBytes is the largest input accepted, in bytes. Longer input is
	// rejected with ErrTooLarge before it is read.
	// The default is 1 MiB (1<<20).
	MaxBytes int

	// MaxDepth is the deepest nesting of arrays and objects accepted:
	// the value [[1]] has depth 2. Deeper input is rejected with ErrTooDeep.
	// The default is 64.
	MaxDepth int

	// MaxStringBytes is the longest string or member name accepted, counted
	// in bytes of UTF-8 after unescaping. Longer strings are rejected with
	// ErrStringTooLong. The default is 256 KiB (256<<10).
	MaxStringBytes int

	// MaxMembers is the largest number of members of one object, or elements
	// of one array, accepted. Larger containers are rejected with
	// ErrTooManyMembers. The default is 10,000.
	MaxMembers int

	// AllowInexactIntegers makes integer literals whose magnitude exceeds 2^53
	// acceptable: they are rounded to binary64 as RFC 8785 specifies, so that
	// distinct integers may canonicalize alike. By default such literals are
	// rejected with ErrInexactInteger, unless they are their own canonical
	// form (see the package documentation). The default is false.
	AllowInexactIntegers bool
}

// A Canonicalizer validates JSON text and converts it to the canonical form
// of RFC 8785. It keeps scratch memory between calls, so reusing one
// Canonicalizer avoids allocation.
//
// A Canonicalizer is not safe for concurrent use by multiple goroutines;
// the package-level [Append] is. The zero Canonicalizer uses the default
// Options.
type Canonicalizer struct {
	maxBytes     int
	maxDepth     int
	maxString    int
	maxMembers   int
	allowInexact bool

	members []member  // stack of the members of the objects being parsed
	names   []byte    // unescaped names that contained escapes
	tmp     []byte    // object bodies being reordered
	valid   []byte    // output of Valid, discarded
	order   []sortKey // scratch for sortMembers

	// member name of the most recent call to str with name set:
	// src[keyOff:keyOff+keyLen] if keyOff >= 0, else names[^keyOff:][:keyLen]
	keyOff, keyLen int
}

// New returns a Canonicalizer with the given options. Zero fields take their
// defaults; a negative field is an error that wraps ErrInvalidOptions.
func New(opts Options) (*Canonicalizer, error) {
	c := new(Canonicalizer)
	if err := c.init(opts); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Canonicalizer) init(opts Options) error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxBytes", opts.MaxBytes},
		{"MaxDepth", opts.MaxDepth},
		{"MaxStringBytes", opts.MaxStringBytes},
		{"MaxMembers", opts.MaxMembers},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s is %d, must not be negative", ErrInvalidOptions, f.name, f.v)
		}
	}
	c.maxBytes = orDefault(opts.MaxBytes, defaultMaxBytes)
	c.maxDepth = orDefault(opts.MaxDepth, defaultMaxDepth)
	c.maxString = orDefault(opts.MaxStringBytes, defaultMaxStringBytes)
	c.maxMembers = orDefault(opts.MaxMembers, defaultMaxMembers)
	c.allowInexact = opts.AllowInexactIntegers
	return nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

var pool = sync.Pool{New: func() any { return new(Canonicalizer) }}

// maxPooledScratch bounds the scratch memory that a pooled Canonicalizer keeps.
const maxPooledScratch = 1 << 20

// Append validates src with the default Options and appends its canonical
// form to dst. It is safe for concurrent use. See [Canonicalizer.Append].
func Append(dst, src []byte) ([]byte, error) {
	c := pool.Get().(*Canonicalizer)
	dst, err := c.Append(dst, src)
	c.release()
	return dst, err
}

// Valid reports whether src is acceptable to [Append] with the default
// Options: it returns nil or the error Append would return.
func Valid(src []byte) error {
	c := pool.Get().(*Canonicalizer)
	var err error
	c.valid, err = c.Append(c.valid[:0], src)
	c.release()
	return err
}

// release trims oversized scratch and returns c to the pool.
func (c *Canonicalizer) release() {
	if cap(c.tmp) > maxPooledScratch {
		c.tmp = nil
	}
	if cap(c.valid) > maxPooledScratch {
		c.valid = nil
	}
	if cap(c.names) > maxPooledScratch {
		c.names = nil
	}
	if cap(c.members)*memberSize > maxPooledScratch {
		c.members = nil
	}
	if cap(c.order)*16 > maxPooledScratch {
		c.order = nil
	}
	pool.Put(c)
}

// Append validates src as strict I-JSON (see the package documentation) and
// appends its RFC 8785 canonical form to dst, returning the extended buffer.
// On error it returns dst unchanged in length and an error that wraps one of
// the sentinel errors, as an [*Error] that gives the offset in src.
//
// Append reads src in one pass and does not retain it.
func (c *Canonicalizer) Append(dst, src []byte) ([]byte, error) {
	if c.maxBytes == 0 {
		_ = c.init(Options{})
	}
	if len(src) > c.maxBytes {
		return dst, newError(c.maxBytes, ErrTooLarge,
			fmt.Sprintf("input is %d bytes, limit is %d", len(src), c.maxBytes))
	}
	if len(src) >= 3 && src[0] == 0xEF && src[1] == 0xBB && src[2] == 0xBF {
		return dst, newError(0, ErrBOM, "")
	}
	c.members = c.members[:0]
	c.names = c.names[:0]
	i := skipWS(src, 0)
	out, i, err := c.value(dst, src, i, 0)
	if err != nil {
		return dst, err
	}
	if i = skipWS(src, i); i < len(src) {
		return dst, newError(i, ErrTrailingData, quoteChar(src, i))
	}
	return out, nil
}

// skipWS returns the offset of the first byte at or after i that is not
// JSON whitespace.
func skipWS(src []byte, i int) int {
	for i < len(src) && src[i] <= ' ' && (src[i] == ' ' || src[i] == '\n' || src[i] == '\r' || src[i] == '\t') {
		i++
	}
	return i
}

// value appends the canonical form of the value at src[i] to dst and returns
// the offset after it. depth is the nesting depth of the enclosing container.
func (c *Canonicalizer) value(dst, src []byte, i, depth int) ([]byte, int, error) {
	if i >= len(src) {
		return dst, i, errUnexpected(src, i, "instead of a value")
	}
	switch b := src[i]; b {
	case '"':
		return c.str(dst, src, i, false)
	case '{':
		return c.object(dst, src, i, depth+1)
	case '[':
		return c.array(dst, src, i, depth+1)
	case 't':
		return literal(dst, src, i, "true")
	case 'f':
		return literal(dst, src, i, "false")
	case 'n':
		return literal(dst, src, i, "null")
	default:
		if b == '-' || b-'0' <= 9 {
			return c.number(dst, src, i)
		}
		return dst, i, errUnexpected(src, i, "instead of a value")
	}
}

func literal(dst, src []byte, i int, lit string) ([]byte, int, error) {
	if len(src)-i >= len(lit) && string(src[i:i+len(lit)]) == lit {
		return append(dst, lit...), i + len(lit), nil
	}
	k := 0
	for k < len(lit) && i+k < len(src) && src[i+k] == lit[k] {
		k++
	}
	return dst, i, errUnexpected(src, i+k, "in literal "+lit)
}

func (c *Canonicalizer) array(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > c.maxDepth {
		return dst, i, newError(i, ErrTooDeep, fmt.Sprintf("limit is %d", c.maxDepth))
	}
	dst = append(dst, '[')
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	var err error
	for n := 1; ; n++ {
		if n > c.maxMembers {
			return dst, i, newError(i, ErrTooManyMembers, fmt.Sprintf("array has more than %d elements", c.maxMembers))
		}
		if dst, i, err = c.value(dst, src, i, depth); err != nil {
			return dst, i, err
		}
		i = skipWS(src, i)
		if i < len(src) {
			switch src[i] {
			case ',':
				dst = append(dst, ',')
				i = skipWS(src, i+1)
				continue
			case ']':
				return append(dst, ']'), i + 1, nil
			}
		}
		return dst, i, errUnexpected(src, i, "after array element")
	}
}

func (c *Canonicalizer) object(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > c.maxDepth {
		return dst, i, newError(i, ErrTooDeep, fmt.Sprintf("limit is %d", c.maxDepth))
	}
	dst = append(dst, '{')
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == '}' {
		return append(dst, '}'), i + 1, nil
	}
	body := len(dst)
	base := len(c.members)
	namesBase := len(c.names)
	var err error
	for n := 1; ; n++ {
		if n > c.maxMembers {
			return dst, i, newError(i, ErrTooManyMembers, fmt.Sprintf("object has more than %d members", c.maxMembers))
		}
		if i >= len(src) || src[i] != '"' {
			return dst, i, errUnexpected(src, i, "instead of object member name")
		}
		m := member{src: i, start: len(dst)}
		if dst, i, err = c.str(dst, src, i, true); err != nil {
			return dst, i, err
		}
		m.key, m.keyLen = c.keyOff, c.keyLen
		m.prefix = namePrefix(c.name(src, &m))
		i = skipWS(src, i)
		if i >= len(src) || src[i] != ':' {
			return dst, i, errUnexpected(src, i, "after object member name")
		}
		dst = append(dst, ':')
		if dst, i, err = c.value(dst, src, skipWS(src, i+1), depth); err != nil {
			return dst, i, err
		}
		m.end = len(dst)
		c.members = append(c.members, m)
		i = skipWS(src, i)
		if i < len(src) {
			switch src[i] {
			case ',':
				dst = append(dst, ',')
				i = skipWS(src, i+1)
				continue
			case '}':
				if len(c.members)-base > 1 {
					if err := c.sortMembers(dst, src, body, c.members[base:]); err != nil {
						return dst, i, err
					}
				}
				c.members = c.members[:base]
				c.names = c.names[:namesBase]
				return append(dst, '}'), i + 1, nil
			}
		}
		return dst, i, errUnexpected(src, i, "after object member value")
	}
}
