package canon

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sentinel errors. Errors returned by this package wrap exactly one of them:
// test with [errors.Is], and use [errors.As] with [*Error] or [*PointerError]
// for the offset or the pointer.
var (
	// ErrSyntax reports input that does not match the JSON grammar of RFC 8259:
	// an unexpected or missing character, a truncated value, an invalid escape,
	// an unescaped control character in a string, a number such as 01, +1, .5
	// or 1., and the literals NaN and Infinity.
	ErrSyntax = errors.New("canon: invalid JSON")

	// ErrTrailingData reports bytes other than whitespace after the top-level value.
	ErrTrailingData = errors.New("canon: data after top-level value")

	// ErrDuplicateName reports an object with two members of the same name.
	// Names are compared after unescaping, so "a" and "\u0061" are duplicates.
	ErrDuplicateName = errors.New("canon: duplicate object member name")

	// ErrInvalidUTF8 reports a string containing bytes that are not valid UTF-8,
	// including encoded surrogates, overlong forms and code points above U+10FFFF.
	ErrInvalidUTF8 = errors.New("canon: invalid UTF-8 in string")

	// ErrSurrogate reports a \u escape of a lone or reversed UTF-16 surrogate.
	ErrSurrogate = errors.New("canon: invalid surrogate escape in string")

	// ErrNumberRange reports a number whose magnitude is too large for binary64,
	// such as 1e400 or -1e400. AppendFloat reports it for NaN and ±Inf.
	ErrNumberRange = errors.New("canon: number out of binary64 range")

	// ErrInexactInteger reports an integer literal whose magnitude exceeds 2^53
	// and that binary64 cannot hold as written, so that it would canonicalize
	// like other integers, such as 9007199254740993 (which would become
	// 9007199254740992). It is not reported when
	// [Options.AllowInexactIntegers] is set.
	ErrInexactInteger = errors.New("canon: integer cannot be represented exactly")

	// ErrTooLarge reports an input longer than [Options.MaxBytes].
	ErrTooLarge = errors.New("canon: input too large")

	// ErrTooDeep reports arrays and objects nested deeper than [Options.MaxDepth].
	ErrTooDeep = errors.New("canon: nesting too deep")

	// ErrStringTooLong reports a string or member name longer than
	// [Options.MaxStringBytes] once unescaped.
	ErrStringTooLong = errors.New("canon: string too long")

	// ErrTooManyMembers reports an object with more members, or an array with
	// more elements, than [Options.MaxMembers].
	ErrTooManyMembers = errors.New("canon: too many members")

	// ErrBOM reports input that starts with a UTF-8 byte order mark.
	ErrBOM = errors.New("canon: byte order mark not allowed")

	// ErrNotFound reports a pointer that selects nothing in a document.
	ErrNotFound = errors.New("canon: no value at pointer")

	// ErrPointerSyntax reports a malformed JSON Pointer, or a pointer that
	// cannot be used where it was given (the empty pointer in [Omit]).
	ErrPointerSyntax = errors.New("canon: invalid JSON pointer")

	// ErrInvalidOptions reports an [Options] value that [New] rejects.
	ErrInvalidOptions = errors.New("canon: invalid options")
)

// An Error describes why an input was rejected and where.
type Error struct {
	// Offset is the byte offset in the input of the offending byte. For limit
	// errors it is the start of the value that exceeds the limit, and for
	// ErrTooLarge it is the first byte past Options.MaxBytes.
	Offset int64

	// Err is one of the sentinel errors of this package.
	Err error

	// Detail is a short human-readable explanation; it may be empty.
	// Its wording is not part of the API.
	Detail string
}

// Error returns a message of the form
// `canon: duplicate object member name "id" at byte 57`.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		if e.Detail[0] == '"' {
			b.WriteByte(' ')
		} else {
			b.WriteString(": ")
		}
		b.WriteString(e.Detail)
	}
	b.WriteString(" at byte ")
	b.WriteString(strconv.FormatInt(e.Offset, 10))
	return b.String()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// A PointerError reports a JSON Pointer that is malformed or selects nothing.
type PointerError struct {
	// Pointer is the text of the pointer.
	Pointer string

	// Err is ErrPointerSyntax or ErrNotFound.
	Err error
}

// Error returns a message of the form `canon: pointer "/a/b": no value at pointer`.
func (e *PointerError) Error() string {
	return "canon: pointer " + quoteTrunc(e.Pointer) + ": " + strings.TrimPrefix(e.Err.Error(), "canon: ")
}

// Unwrap returns e.Err.
func (e *PointerError) Unwrap() error { return e.Err }

// maxDetail bounds the bytes of input quoted in an error message,
// so that hostile input cannot make error strings large.
const maxDetail = 40

// quoteTrunc quotes s, shortened to maxDetail bytes.
func quoteTrunc[T string | []byte](s T) string {
	if len(s) <= maxDetail {
		return strconv.Quote(string(s))
	}
	t := s[:maxDetail]
	for len(t) > 0 && !utf8.RuneStart(s[len(t)]) {
		t = t[:len(t)-1]
	}
	return strconv.Quote(string(t)) + "…"
}

// truncate shortens ASCII s to maxDetail bytes.
func truncate(s []byte) string {
	if len(s) <= maxDetail {
		return string(s)
	}
	return string(s[:maxDetail]) + "…"
}

// quoteChar describes the byte at src[i] for an error message.
func quoteChar(src []byte, i int) string {
	if i >= len(src) {
		return "end of input"
	}
	c := src[i]
	if c < utf8.RuneSelf {
		return "character " + strconv.QuoteRune(rune(c))
	}
	return "byte 0x" + strconv.FormatUint(uint64(c), 16)
}

func newError(off int, sentinel error, detail string) *Error {
	return &Error{Offset: int64(off), Err: sentinel, Detail: detail}
}

// errUnexpected reports an unexpected byte (or the end of input) at src[i].
func errUnexpected(src []byte, i int, context string) *Error {
	if i >= len(src) {
		return newError(len(src), ErrSyntax, "unexpected end of input "+context)
	}
	return newError(i, ErrSyntax, "unexpected "+quoteChar(src, i)+" "+context)
}
