package canon

import (
	"encoding/binary"
	"slices"
	"unsafe"
)

// A member records one object member while its object is being parsed.
type member struct {
	prefix uint64 // the first 8 bytes of the name, see namePrefix
	key    int    // unescaped name: src[key:][:keyLen] if key >= 0, else names[^key:][:keyLen]
	keyLen int
	src    int // offset in src of the name's opening quote
	start  int // the member's canonical bytes are dst[start:end]
	end    int
}

const memberSize = int(unsafe.Sizeof(member{}))

// name returns the unescaped name of m.
func (c *Canonicalizer) name(src []byte, m *member) []byte {
	if m.key >= 0 {
		return src[m.key : m.key+m.keyLen]
	}
	k := ^m.key
	return c.names[k : k+m.keyLen]
}

// compareNames compares two valid UTF-8 strings by their UTF-16 code units,
// as RFC 8785 section 3.2.3 requires. UTF-8 byte order is code point order,
// which agrees with UTF-16 order except that code points U+10000 and above
// (surrogate pairs, 0xD800 to 0xDFFF) sort before U+E000 to U+FFFF. At the
// first differing byte, those are exactly lead bytes 0xF0-0xF4 against
// 0xEE-0xEF: continuation bytes are below 0xC0.
func compareNames(a, b []byte) int {
	n := min(len(a), len(b))
	for i, x := range a[:n] {
		y := b[i]
		if x == y {
			continue
		}
		if x >= 0xEE && y >= 0xEE && (x >= 0xF0) != (y >= 0xF0) {
			if x >= 0xF0 {
				return -1
			}
			return 1
		}
		if x < y {
			return -1
		}
		return 1
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// namePrefix returns the first 8 bytes of name as a big-endian integer,
// padded with zeros, such that comparing the prefixes of two names agrees
// with compareNames unless they are equal. Lead bytes 0xF0-0xF4 are mapped
// below 0xEE-0xEF for UTF-16 order; no other byte at or above 0xEE occurs
// in UTF-8.
func namePrefix(name []byte) uint64 {
	var p uint64
	switch {
	case len(name) >= 8:
		p = binary.BigEndian.Uint64(name)
	case cap(name) >= 8:
		// Load 8 bytes and clear those past the name.
		p = binary.BigEndian.Uint64(name[:8]) &^ (1<<(64-8*len(name)) - 1)
	default:
		for i, b := range name {
			p |= uint64(b) << (56 - 8*i)
		}
	}
	if p&msb == 0 {
		return p
	}
	var q uint64
	for i := 56; i >= 0; i -= 8 {
		q |= uint64(utf16Byte[byte(p>>i)]) << i
	}
	return q
}

// utf16Byte maps UTF-8 bytes to bytes whose order is UTF-16 order,
// as the comment on compareNames explains.
var utf16Byte = func() (t [256]byte) {
	for b := range t {
		t[b] = byte(b)
	}
	for b := 0xF0; b <= 0xF4; b++ {
		t[b] = byte(b - 2)
	}
	t[0xEE], t[0xEF] = 0xF3, 0xF4
	return t
}()

// compare orders members by name.
func (c *Canonicalizer) compare(src []byte, a, b *member) int {
	if a.prefix != b.prefix {
		if a.prefix < b.prefix {
			return -1
		}
		return 1
	}
	if a.keyLen <= 8 && b.keyLen <= 8 {
		// Equal prefixes of short names: one is the other with zero bytes after it.
		return a.keyLen - b.keyLen
	}
	return compareNames(c.name(src, a), c.name(src, b))
}

// sortMembers checks the members ms of the object whose body starts at
// dst[body:] for duplicate names and reorders the body by name.
func (c *Canonicalizer) sortMembers(dst, src []byte, body int, ms []member) error {
	// Fast path: already sorted, as output of RFC 8785 and of many encoders is.
	sorted := true
	for k := 1; k < len(ms); k++ {
		r := c.compare(src, &ms[k-1], &ms[k])
		if r == 0 {
			return c.duplicate(src, &ms[k])
		}
		if r > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}

	// Sort small keys that refer to the members, rather than the members.
	ord := c.order[:0]
	for k := range ms {
		ord = append(ord, sortKey{prefix: ms[k].prefix, i: k})
	}
	cmp := func(a, b sortKey) int {
		if a.prefix != b.prefix {
			if a.prefix < b.prefix {
				return -1
			}
			return 1
		}
		if r := c.compare(src, &ms[a.i], &ms[b.i]); r != 0 {
			return r
		}
		return a.i - b.i // input order
	}
	if len(ord) <= 12 {
		for k := 1; k < len(ord); k++ {
			o := ord[k]
			j := k
			for ; j > 0 && cmp(o, ord[j-1]) < 0; j-- {
				ord[j] = ord[j-1]
			}
			ord[j] = o
		}
	} else {
		slices.SortFunc(ord, cmp)
	}
	c.order = ord[:0]

	// Duplicates are now adjacent, in input order; report the one that
	// appears first in the input.
	dup := -1
	for k := 1; k < len(ord); k++ {
		if ord[k-1].prefix == ord[k].prefix && c.compare(src, &ms[ord[k-1].i], &ms[ord[k].i]) == 0 && (dup < 0 || ord[k].i < dup) {
			dup = ord[k].i
		}
	}
	if dup >= 0 {
		return c.duplicate(src, &ms[dup])
	}

	// Rewrite the body in sorted order.
	c.tmp = append(c.tmp[:0], dst[body:]...)
	w := body
	for k, o := range ord {
		if k > 0 {
			dst[w] = ','
			w++
		}
		m := &ms[o.i]
		w += copy(dst[w:], c.tmp[m.start-body:m.end-body])
	}
	return nil
}

// A sortKey stands for ms[i] while sorting.
type sortKey struct {
	prefix uint64
	i      int
}

func (c *Canonicalizer) duplicate(src []byte, m *member) error {
	return newError(m.src, ErrDuplicateName, quoteTrunc(c.name(src, m)))
}
