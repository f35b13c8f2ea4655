// Package canon converts untrusted JSON text to the canonical form of
// RFC 8785 (JSON Canonicalization Scheme), validating it strictly, and
// selects values from canonical documents with JSON Pointers (RFC 6901).
//
// Two payloads that mean the same JSON value canonicalize to the same bytes,
// so the canonical form can be hashed into an idempotency key:
//
//	out, err := canon.Append(nil, payload) // {"b":1,"a":"x"} → {"a":"x","b":1}
//
// [Append] is safe for concurrent use. A [Canonicalizer] from [New] takes
// [Options] and keeps its scratch memory between calls.
//
// # Canonical form
//
// The output follows RFC 8785 exactly: no whitespace; object members sorted
// by the UTF-16 code units of their unescaped names (recursively; array
// order is kept); strings with only '"', '\\' and the control characters
// below U+0020 escaped, as \b \f \n \r \t or \u00xx with lowercase hex, and
// everything else, including '<', '>', '&', U+2028 and U+2029, written as
// UTF-8; numbers written as ECMAScript's Number.prototype.toString writes
// binary64 values: the shortest decimal that reads back as the same double,
// without exponent from 1e-6 up to but excluding 1e21 (0.000001,
// 100000000000000000000) and with one otherwise (1e-7, 1e+21), and -0 as 0.
// [AppendFloat] exposes the number formatting.
//
// Canonicalizing canonical output gives the same bytes back.
//
// # Strictness
//
// Input must be JSON text as RFC 8259 defines it, restricted to I-JSON
// (RFC 7493); anything else is an error, as an [*Error] that wraps one of
// the sentinel errors and gives the byte offset of the offending byte:
//
//   - grammar (ErrSyntax): only space, tab, line feed and carriage return
//     as whitespace; no leading zeros (01), plus signs (+1), bare decimal
//     points (.5, 1.), NaN, Infinity, comments or trailing commas; control
//     characters in strings must be escaped. Any top-level value is allowed;
//     after it only whitespace may follow (ErrTrailingData).
//   - strings (ErrInvalidUTF8, ErrSurrogate): strings and names must be valid
//     UTF-8, and \u escapes must not encode a lone or reversed surrogate.
//     Noncharacters such as U+FFFE, which RFC 7493 also excludes, are accepted:
//     they are valid scalar values and canonicalize unambiguously.
//   - names (ErrDuplicateName): no object may have two members of the same
//     name, compared after unescaping, so "a" and "\u0061" are duplicates.
//   - numbers (ErrNumberRange): a number whose magnitude rounds beyond the
//     largest binary64, such as 1e400, is rejected. A number too small for
//     binary64, such as 1e-400, rounds to 0 as binary64 arithmetic does.
//
// Large integers. Numbers are binary64 values in RFC 8785, so the integer
// literals 9007199254740993 and 9007199254740992 are the same number and
// would canonicalize alike, giving two different payloads, typically two
// different IDs, one idempotency key. To keep that from happening silently,
// an integer literal (one with no fraction and no exponent) whose magnitude
// exceeds 2^53 is rejected with ErrInexactInteger, whose message says to
// send IDs as strings. The one exception is a literal that is already its
// own canonical form, such as 9007199254740994 or 100000000000000000000:
// no other integer literal is accepted for its value, and canonical output
// must be acceptable input again (1e20, for one, canonicalizes to
// 100000000000000000000, and a JavaScript sender writes every number this
// way). Set [Options.AllowInexactIntegers] to round all integer literals as
// RFC 8785 does instead.
//
// Other numbers are compared as binary64 values, as RFC 8785 specifies:
// distinct literals that round to the same double canonicalize alike, so
// 1.0, 1 and 1e0 are all 1, and 0.1000000000000000055511151231257827 is 0.1.
//
// Byte order marks. Input that starts with a UTF-8 byte order mark is
// rejected with ErrBOM. RFC 8259 section 8.1 says JSON text must not start
// with one, and I-JSON senders never add one; skipping it silently would
// make two different byte streams one payload.
//
// # Limits
//
// Limits bound the work and memory that one hostile input can cost. They are
// checked as the input is read, so that a depth bomb or an oversized object
// fails at the offending byte, and memory stays bounded by the limits, not
// by the payload. The defaults, set by the zero [Options]:
//
//   - MaxBytes: 1 MiB of input, checked before reading (ErrTooLarge)
//   - MaxDepth: 64 levels of nested arrays and objects (ErrTooDeep)
//   - MaxStringBytes: 256 KiB in one unescaped string or name (ErrStringTooLong)
//   - MaxMembers: 10,000 members in one object or elements in one array
//     (ErrTooManyMembers)
//
// The output is at most a few times the size of the input: numbers such as
// 1e20 expand to their decimal form.
//
// # Pointers
//
// [ParsePointer] parses a JSON Pointer such as "/labels/alertname" or
// "/commits/0/id" into a [Pointer]. [Lookup] returns the canonical bytes of
// the value a pointer refers to, [Select] appends a canonical array of the
// values that several pointers refer to (for building a key from chosen
// fields), and [Omit] removes members and elements (for dropping volatile
// fields such as timestamps before hashing). They work on canonical
// documents, the output of Append, and are fast because of it: they never
// panic on other input, but they are not validators. Array indices are
// decimal without leading zeros; "-", which RFC 6901 defines as the element
// after the last, refers to nothing.
//
// # Concurrency
//
// The package-level functions are safe for concurrent use; [Append] and
// [Valid] take a Canonicalizer from a [sync.Pool]. A Canonicalizer is not
// safe for concurrent use: give each goroutine its own, or use Append.
// A Pointer is an immutable value and may be shared.
package canon
