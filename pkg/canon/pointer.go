package canon

import (
	"encoding/binary"
	"unicode/utf8"
)

// A Pointer is a parsed JSON Pointer (RFC 6901) such as "/labels/alertname".
// The zero Pointer is the empty pointer "", which refers to the whole document.
// Pointers are comparable: two Pointers are == if they have the same text.
type Pointer struct {
	text string
	// toks holds each reference token, unescaped and then written as a
	// canonical JSON string, preceded by its length as a uvarint.
	// A canonical document writes every name one way only, so a member
	// matches a token if their bytes are equal.
	toks string
}

// ParsePointer parses a JSON Pointer: either "" or a sequence of "/"
// followed by a reference token, in which "~1" stands for "/" and "~0" for "~".
// It returns a [*PointerError] wrapping ErrPointerSyntax if s does not start
// with "/", has a "~" not followed by "0" or "1", or is not valid UTF-8.
func ParsePointer(s string) (Pointer, error) {
	if s == "" {
		return Pointer{}, nil
	}
	if s[0] != '/' || !utf8.ValidString(s) {
		return Pointer{}, &PointerError{Pointer: s, Err: ErrPointerSyntax}
	}
	var toks, tok, q []byte
	for i := 1; ; i++ {
		tok = tok[:0]
		for ; i < len(s) && s[i] != '/'; i++ {
			if s[i] != '~' {
				tok = append(tok, s[i])
				continue
			}
			switch {
			case i+1 < len(s) && s[i+1] == '0':
				tok = append(tok, '~')
			case i+1 < len(s) && s[i+1] == '1':
				tok = append(tok, '/')
			default:
				return Pointer{}, &PointerError{Pointer: s, Err: ErrPointerSyntax}
			}
			i++
		}
		q = appendQuoted(q[:0], string(tok))
		toks = binary.AppendUvarint(toks, uint64(len(q)))
		toks = append(toks, q...)
		if i == len(s) {
			break
		}
	}
	return Pointer{text: s, toks: string(toks)}, nil
}

// String returns the text of p as it was given to ParsePointer.
func (p Pointer) String() string { return p.text }

// nextToken splits the first token off toks, which must not be empty.
func nextToken(toks string) (tok, rest string) {
	var n, shift uint
	k := 0
	for ; ; k++ {
		b := toks[k]
		n |= uint(b&0x7F) << shift
		if b < 0x80 {
			break
		}
		shift += 7
	}
	k++
	return toks[k : k+int(n)], toks[k+int(n):]
}

// arrayIndex returns the array index that the quoted token tok stands for:
// "0", or digits without a leading zero.
func arrayIndex(tok string) (int, bool) {
	d := tok[1 : len(tok)-1]
	if d == "" || len(d) > 1 && d[0] == '0' || len(d) > 15 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(d); i++ {
		if d[i]-'0' > 9 {
			return 0, false
		}
		n = n*10 + int(d[i]-'0')
	}
	return n, true
}

// Lookup returns the canonical bytes of the value that p refers to in the
// canonical document, as a subslice of it, and true; or false if there is
// no such value. An array index past the end, the index "-", and a token
// that is not an index for an array are not found.
//
// Lookup, [Select] and [Omit] expect the output of [Append] and rely on it
// being canonical: they scan without whitespace, unescaping or number
// parsing, so they are much faster than canonicalizing again. They never
// panic on other input: bytes they traverse that cannot be canonical JSON
// are reported as an [*Error] wrapping ErrSyntax, or ErrTrailingData for
// bytes after the document. They are not validators, though: Lookup and
// Select look only at the parts of the document on the way to the values
// they select (all of it for the empty pointer), and none of them checks
// UTF-8, number forms or member order.
func Lookup(canonical []byte, p Pointer) (value []byte, ok bool, err error) {
	i := 0
	for toks := p.toks; toks != ""; {
		var tok string
		tok, toks = nextToken(toks)
		if i, ok, err = step(canonical, i, tok); !ok {
			return nil, false, err
		}
	}
	end, err := skipValue(canonical, i)
	if err != nil {
		return nil, false, err
	}
	if i == 0 && end < len(canonical) {
		// The whole document was scanned, so check that it ends there.
		return nil, false, newError(end, ErrTrailingData, quoteChar(canonical, end))
	}
	return canonical[i:end:end], true, nil
}

// step returns the offset of the member or element that tok names in the
// container at doc[i].
func step(doc []byte, i int, tok string) (int, bool, error) {
	if i >= len(doc) {
		return i, false, errUnexpected(doc, i, "instead of a value")
	}
	var err error
	switch doc[i] {
	case '{':
		i++
		if i < len(doc) && doc[i] == '}' {
			return i, false, nil
		}
		for {
			j, err := skipName(doc, i)
			if err != nil {
				return j, false, err
			}
			if string(doc[i:j-1]) == tok {
				return j, true, nil
			}
			if i, err = skipValue(doc, j); err != nil {
				return i, false, err
			}
			if i < len(doc) && doc[i] == ',' {
				i++
				continue
			}
			if i < len(doc) && doc[i] == '}' {
				return i, false, nil
			}
			return i, false, errUnexpected(doc, i, "after object member value")
		}
	case '[':
		i++
		if i < len(doc) && doc[i] == ']' {
			return i, false, nil
		}
		idx, ok := arrayIndex(tok)
		if !ok {
			return i, false, nil
		}
		for k := 0; k < idx; k++ {
			if i, err = skipValue(doc, i); err != nil {
				return i, false, err
			}
			if i < len(doc) && doc[i] == ',' {
				i++
				continue
			}
			if i < len(doc) && doc[i] == ']' {
				return i, false, nil
			}
			return i, false, errUnexpected(doc, i, "after array element")
		}
		return i, true, nil
	case '"', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return i, false, nil // a scalar has no members
	}
	return i, false, errUnexpected(doc, i, "instead of a value")
}

// Select appends to dst a canonical JSON array of the values that ptrs refer
// to in the canonical document, in the order of ptrs. If a pointer refers to
// nothing, it returns dst unchanged and a [*PointerError] wrapping ErrNotFound
// that names the pointer. See [Lookup] for what it expects of canonical.
func Select(dst, canonical []byte, ptrs []Pointer) ([]byte, error) {
	out := append(dst, '[')
	for k, p := range ptrs {
		v, ok, err := Lookup(canonical, p)
		if err != nil {
			return dst, err
		}
		if !ok {
			return dst, &PointerError{Pointer: p.text, Err: ErrNotFound}
		}
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']'), nil
}

// Omit appends to dst the canonical document with the members and elements
// that drop refers to removed, and returns the extended buffer. The result
// is canonical: members keep their order. Array indices refer to the
// document as given, so dropping /0 and /1 removes the first two elements.
// Pointers that refer to nothing are ignored. The empty pointer, which refers
// to the whole document, cannot be omitted: Omit returns a [*PointerError]
// wrapping ErrPointerSyntax for it. On error Omit returns dst unchanged.
// Unlike Lookup and Select, Omit scans the whole document; see [Lookup].
func Omit(dst, canonical []byte, drop []Pointer) ([]byte, error) {
	active := make([]string, 0, len(drop))
	for _, p := range drop {
		if p.toks == "" {
			return dst, &PointerError{Pointer: p.text, Err: ErrPointerSyntax}
		}
		active = append(active, p.toks)
	}
	out, i, err := omit(dst, canonical, 0, active)
	if err != nil {
		return dst, err
	}
	if i < len(canonical) {
		return dst, newError(i, ErrTrailingData, quoteChar(canonical, i))
	}
	return out, nil
}

// omit appends the value at doc[i] without what the remaining tokens of the
// pointers in active refer to; none of them is empty.
func omit(dst, doc []byte, i int, active []string) ([]byte, int, error) {
	if len(active) > 0 && i < len(doc) {
		switch doc[i] {
		case '{':
			return omitObject(dst, doc, i, active)
		case '[':
			return omitArray(dst, doc, i, active)
		}
	}
	end, err := skipValue(doc, i)
	if err != nil {
		return dst, end, err
	}
	return append(dst, doc[i:end]...), end, nil
}

// match collects into sub the rest of the pointers in active whose next token
// satisfies is, and reports whether one of them ends with it.
func match(active, sub []string, is func(tok string) bool) (drop bool, _ []string) {
	for _, a := range active {
		tok, rest := nextToken(a)
		if !is(tok) {
			continue
		}
		if rest == "" {
			drop = true
		} else {
			sub = append(sub, rest)
		}
	}
	return drop, sub
}

func omitObject(dst, doc []byte, i int, active []string) ([]byte, int, error) {
	dst = append(dst, '{')
	i++
	if i < len(doc) && doc[i] == '}' {
		return append(dst, '}'), i + 1, nil
	}
	var sub []string
	first := true
	for {
		j, err := skipName(doc, i)
		if err != nil {
			return dst, j, err
		}
		name := doc[i : j-1]
		drop, s := match(active, sub[:0], func(tok string) bool { return tok == string(name) })
		sub = s
		if drop {
			i, err = skipValue(doc, j)
		} else {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, doc[i:j]...)
			dst, i, err = omit(dst, doc, j, sub)
		}
		if err != nil {
			return dst, i, err
		}
		if i < len(doc) && doc[i] == ',' {
			i++
			continue
		}
		if i < len(doc) && doc[i] == '}' {
			return append(dst, '}'), i + 1, nil
		}
		return dst, i, errUnexpected(doc, i, "after object member value")
	}
}

func omitArray(dst, doc []byte, i int, active []string) ([]byte, int, error) {
	dst = append(dst, '[')
	i++
	if i < len(doc) && doc[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	var sub []string
	first := true
	for k := 0; ; k++ {
		drop, s := match(active, sub[:0], func(tok string) bool {
			idx, ok := arrayIndex(tok)
			return ok && idx == k
		})
		sub = s
		var err error
		if drop {
			i, err = skipValue(doc, i)
		} else {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst, i, err = omit(dst, doc, i, sub)
		}
		if err != nil {
			return dst, i, err
		}
		if i < len(doc) && doc[i] == ',' {
			i++
			continue
		}
		if i < len(doc) && doc[i] == ']' {
			return append(dst, ']'), i + 1, nil
		}
		return dst, i, errUnexpected(doc, i, "after array element")
	}
}

// skipValue returns the offset after the canonical value at doc[i]. It keeps
// its own stack, so that deep input cannot exhaust the goroutine stack.
func skipValue(doc []byte, i int) (int, error) {
	var buf [32]byte
	stack := buf[:0] // the closing bracket of each open container
	var err error
	for {
		// A value is expected at doc[i].
		if i >= len(doc) {
			return i, errUnexpected(doc, i, "instead of a value")
		}
		switch doc[i] {
		case '{':
			if i+1 < len(doc) && doc[i+1] == '}' {
				i += 2
				break
			}
			stack = append(stack, '}')
			if i, err = skipName(doc, i+1); err != nil {
				return i, err
			}
			continue
		case '[':
			if i+1 < len(doc) && doc[i+1] == ']' {
				i += 2
				break
			}
			stack = append(stack, ']')
			i++
			continue
		case '"':
			i, err = skipString(doc, i)
		case 't':
			i, err = skipLiteral(doc, i, "true")
		case 'f':
			i, err = skipLiteral(doc, i, "false")
		case 'n':
			i, err = skipLiteral(doc, i, "null")
		default:
			i, err = skipNumber(doc, i)
		}
		if err != nil {
			return i, err
		}
		// After a value: close containers, or go on to the next member.
		for {
			if len(stack) == 0 {
				return i, nil
			}
			top := stack[len(stack)-1]
			if i < len(doc) && doc[i] == top {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			if i >= len(doc) || doc[i] != ',' {
				if top == '}' {
					return i, errUnexpected(doc, i, "after object member value")
				}
				return i, errUnexpected(doc, i, "after array element")
			}
			i++
			if top == '}' {
				if i, err = skipName(doc, i); err != nil {
					return i, err
				}
			}
			break
		}
	}
}

// skipName returns the offset after the member name at doc[i] and its colon.
func skipName(doc []byte, i int) (int, error) {
	j, err := skipString(doc, i)
	if err != nil {
		return j, err
	}
	if j >= len(doc) || doc[j] != ':' {
		return j, errUnexpected(doc, j, "after object member name")
	}
	return j + 1, nil
}

// skipString returns the offset after the canonical string at doc[i]. It
// accepts only the escapes that canonical strings use and does not check UTF-8.
func skipString(doc []byte, i int) (int, error) {
	if i >= len(doc) || doc[i] != '"' {
		return i, errUnexpected(doc, i, "instead of a string")
	}
	for j := i + 1; ; {
		for j < len(doc) && doc[j] != '"' && doc[j] != '\\' && doc[j] >= 0x20 {
			j++
		}
		if j >= len(doc) {
			return j, errUnexpected(doc, j, "in string")
		}
		switch doc[j] {
		case '"':
			return j + 1, nil
		case '\\':
			if j+1 < len(doc) {
				switch doc[j+1] {
				case '"', '\\', 'b', 'f', 'n', 'r', 't':
					j += 2
					continue
				case 'u':
					// Canonical \u escapes are controls without a short form.
					if j+5 < len(doc) && doc[j+2] == '0' && doc[j+3] == '0' && (doc[j+4] == '0' || doc[j+4] == '1') {
						if h := doc[j+5]; h-'0' <= 9 || h-'a' <= 5 {
							if v := unhex(doc[j+4])<<4 | unhex(h); v != '\b' && v != '\t' && v != '\n' && v != '\f' && v != '\r' {
								j += 6
								continue
							}
						}
					}
				}
			}
			return j, newError(j, ErrSyntax, "escape sequence not in canonical form")
		}
		return j, errUnexpected(doc, j, "in string")
	}
}

func unhex(b byte) byte {
	if b <= '9' {
		return b - '0'
	}
	return b - 'a' + 10
}

func skipLiteral(doc []byte, i int, lit string) (int, error) {
	if len(doc)-i >= len(lit) && string(doc[i:i+len(lit)]) == lit {
		return i + len(lit), nil
	}
	return i, errUnexpected(doc, i, "instead of a value")
}

// skipNumber returns the offset after the number at doc[i], checking the
// JSON number grammar only.
func skipNumber(doc []byte, i int) (int, error) {
	start := i
	digits := func() bool {
		k := i
		for i < len(doc) && doc[i]-'0' <= 9 {
			i++
		}
		return i > k
	}
	if i < len(doc) && doc[i] == '-' {
		i++
	}
	switch {
	case i < len(doc) && doc[i] == '0':
		i++
	case i < len(doc) && doc[i]-'1' <= 8:
		digits()
	default:
		if i == start {
			return i, errUnexpected(doc, i, "instead of a value")
		}
		return i, errUnexpected(doc, i, "in number")
	}
	if i < len(doc) && doc[i] == '.' {
		i++
		if !digits() {
			return i, errUnexpected(doc, i, "after decimal point")
		}
	}
	if i < len(doc) && (doc[i] == 'e' || doc[i] == 'E') {
		i++
		if i < len(doc) && (doc[i] == '+' || doc[i] == '-') {
			i++
		}
		if !digits() {
			return i, errUnexpected(doc, i, "in exponent")
		}
	}
	return i, nil
}
