package canon

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// plain[b] is true for the bytes that stand for themselves both in JSON input
// and in canonical output: printable ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 0x80; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// plainRun returns the offset of the first byte at or after i, and before
// end, that is not plain; or end.
func plainRun(src []byte, i, end int) int {
	// Eight bytes at a time: a byte is not plain if it is below 0x20,
	// is '"' or '\\', or has its high bit set.
	for ; i+8 <= end; i += 8 {
		x := binary.LittleEndian.Uint64(src[i:])
		q := x ^ (lsb * '"')
		s := x ^ (lsb * '\\')
		// x-0x20 sets the high bit of bytes below 0x20; q-1 and s-1 set it
		// for the zero bytes of q and s, that is '"' and '\\'. None of the
		// three sets it for a plain byte. A borrow only starts at a byte
		// that is not plain, so the lowest flagged byte is the first one
		// that is not plain (higher bytes may be flagged wrongly).
		if m := ((x - lsb*0x20) | (q - lsb) | (s - lsb) | x) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < end && plain[src[i]] {
		i++
	}
	return i
}

// str appends the canonical form of the string starting with the quote at
// src[i] to dst and returns the offset after the closing quote. If name is
// set, it records the unescaped string in c.keyOff and c.keyLen.
func (c *Canonicalizer) str(dst, src []byte, i int, name bool) ([]byte, int, error) {
	// Fast path: plain ASCII without escapes is copied as it is.
	j := i + 1
	end := min(len(src), j+c.maxString+1)
	j = plainRun(src, j, end)
	if j < len(src) && src[j] == '"' {
		if j-i-1 > c.maxString {
			return dst, i, c.tooLong(i)
		}
		if name {
			c.keyOff, c.keyLen = i+1, j-i-1
		}
		return append(dst, src[i:j+1]...), j + 1, nil
	}
	return c.strSlow(dst, src, i, j, name)
}

// strSlow continues str at src[j], the first byte that is not plain.
func (c *Canonicalizer) strSlow(dst, src []byte, i, j int, name bool) ([]byte, int, error) {
	dst = append(dst, src[i:j]...)
	n := j - i - 1   // bytes of the unescaped string so far
	escaped := false // whether the unescaped name is in c.names
	keyStart := len(c.names)
	for {
		if n > c.maxString {
			return dst, i, c.tooLong(i)
		}
		if j >= len(src) {
			return dst, j, newError(j, ErrSyntax, "unexpected end of input in string")
		}
		switch b := src[j]; {
		case b == '"':
			if name {
				if escaped {
					c.keyOff, c.keyLen = ^keyStart, len(c.names)-keyStart
				} else {
					c.keyOff, c.keyLen = i+1, j-i-1
				}
			}
			return append(dst, '"'), j + 1, nil

		case b == '\\':
			r, k, err := unescape(src, j)
			if err != nil {
				return dst, j, err
			}
			if name {
				if !escaped {
					escaped = true
					c.names = append(c.names, src[i+1:j]...)
				}
				c.names = utf8.AppendRune(c.names, r)
			}
			dst = appendRune(dst, r)
			n += utf8.RuneLen(r)
			j = k

		case b < 0x20:
			return dst, j, newError(j, ErrSyntax, fmt.Sprintf("control character U+%04X in string must be escaped", b))

		case b < utf8.RuneSelf:
			// A plain run.
			k := plainRun(src, j, min(len(src), j+c.maxString-n+1))
			dst = append(dst, src[j:k]...)
			if escaped {
				c.names = append(c.names, src[j:k]...)
			}
			n += k - j
			j = k

		default:
			r, size := utf8.DecodeRune(src[j:])
			if r == utf8.RuneError && size == 1 {
				return dst, j, newError(j, ErrInvalidUTF8, fmt.Sprintf("byte 0x%02x", b))
			}
			dst = append(dst, src[j:j+size]...)
			if escaped {
				c.names = append(c.names, src[j:j+size]...)
			}
			n += size
			j += size
		}
	}
}

func (c *Canonicalizer) tooLong(i int) error {
	return newError(i, ErrStringTooLong, fmt.Sprintf("limit is %d bytes", c.maxString))
}

// unescape decodes the escape sequence at src[j], which is a backslash, and
// returns the rune and the offset after the sequence.
func unescape(src []byte, j int) (rune, int, error) {
	if j+1 >= len(src) {
		return 0, j, errUnexpected(src, j+1, "in escape sequence")
	}
	switch src[j+1] {
	case '"':
		return '"', j + 2, nil
	case '\\':
		return '\\', j + 2, nil
	case '/':
		return '/', j + 2, nil
	case 'b':
		return '\b', j + 2, nil
	case 'f':
		return '\f', j + 2, nil
	case 'n':
		return '\n', j + 2, nil
	case 'r':
		return '\r', j + 2, nil
	case 't':
		return '\t', j + 2, nil
	case 'u':
		r, err := hex4(src, j+2)
		if err != nil {
			return 0, j, err
		}
		switch {
		case r < 0xD800 || r > 0xDFFF:
			return r, j + 6, nil
		case r >= 0xDC00:
			return 0, j, newError(j, ErrSurrogate, fmt.Sprintf(`low surrogate \u%04x without a high surrogate before it`, r))
		}
		// A high surrogate: a low one must follow.
		if len(src) < j+12 || src[j+6] != '\\' || src[j+7] != 'u' {
			return 0, j, newError(j, ErrSurrogate, fmt.Sprintf(`high surrogate \u%04x without a low surrogate after it`, r))
		}
		r2, err := hex4(src, j+8)
		if err != nil {
			return 0, j, err
		}
		if r2 < 0xDC00 || r2 > 0xDFFF {
			return 0, j, newError(j, ErrSurrogate, fmt.Sprintf(`high surrogate \u%04x followed by \u%04x`, r, r2))
		}
		return 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00), j + 12, nil
	}
	return 0, j, newError(j, ErrSyntax, "invalid escape sequence "+quoteTrunc(src[j:j+2]))
}

// hex4 decodes four hexadecimal digits at src[k:].
func hex4(src []byte, k int) (rune, error) {
	var r rune
	for p := k; p < k+4; p++ {
		if p >= len(src) {
			return 0, errUnexpected(src, p, `in \u escape`)
		}
		b := src[p]
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, errUnexpected(src, p, `in \u escape`)
		}
		r = r<<4 | rune(b)
	}
	return r, nil
}

// appendRune appends the canonical form of r inside a string: RFC 8785
// section 3.2.2.2 escapes only '"', '\\' and the controls below U+0020.
func appendRune(dst []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(dst, '\\', byte(r))
	case r < 0x20:
		return appendControl(dst, byte(r))
	case r < utf8.RuneSelf:
		return append(dst, byte(r))
	}
	return utf8.AppendRune(dst, r)
}

func appendControl(dst []byte, b byte) []byte {
	switch b {
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
}

// appendQuoted appends s, which must be valid UTF-8, as a canonical JSON string.
func appendQuoted(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case b == '"' || b == '\\':
			dst = append(dst, '\\', b)
		case b < 0x20:
			dst = appendControl(dst, b)
		default:
			dst = append(dst, b)
		}
	}
	return append(dst, '"')
}
