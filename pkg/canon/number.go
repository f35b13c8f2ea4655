package canon

import (
	"fmt"
	"math"
	"strconv"
)

// maxExact is 2^53, the largest magnitude below which every integer is
// exactly representable in binary64, as a decimal literal.
const maxExact = "9007199254740992"

// number appends the canonical form of the number at src[i] to dst.
func (c *Canonicalizer) number(dst, src []byte, i int) ([]byte, int, error) {
	start := i
	neg := src[i] == '-'
	if neg {
		i++
	}
	intStart := i
	switch {
	case i >= len(src):
		return dst, i, errUnexpected(src, i, "in number")
	case src[i] == '0':
		i++
		if i < len(src) && src[i]-'0' <= 9 {
			return dst, i, newError(i, ErrSyntax, "leading zero in number")
		}
	case src[i]-'1' <= 8:
		i++
		for i < len(src) && src[i]-'0' <= 9 {
			i++
		}
	default:
		return dst, i, errUnexpected(src, i, "in number")
	}
	intEnd := i

	fracEnd := i // fraction digits are src[intEnd+1:fracEnd]
	if i < len(src) && src[i] == '.' {
		i++
		if i >= len(src) || src[i]-'0' > 9 {
			return dst, i, errUnexpected(src, i, "after decimal point")
		}
		for i < len(src) && src[i]-'0' <= 9 {
			i++
		}
		fracEnd = i
	}
	hasExp := false
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		hasExp = true
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		if i >= len(src) || src[i]-'0' > 9 {
			return dst, i, errUnexpected(src, i, "in exponent")
		}
		for i < len(src) && src[i]-'0' <= 9 {
			i++
		}
	}
	lit := src[start:i]

	switch {
	case hasExp:
	case fracEnd == intEnd:
		// An integer. Up to 2^53 its canonical form is its literal,
		// except for -0.
		nd := intEnd - intStart
		if nd < len(maxExact) || nd == len(maxExact) && string(src[intStart:intEnd]) <= maxExact {
			if neg && nd == 1 && src[intStart] == '0' {
				return append(dst, '0'), i, nil
			}
			return append(dst, lit...), i, nil
		}
		if c.allowInexact {
			break
		}
		// Above 2^53 only a literal that is its own canonical form, and so
		// stands for one binary64 value unambiguously, is accepted.
		// Canonical forms of integers have at most 21 digits.
		if nd <= 21 {
			if f, err := strconv.ParseFloat(string(lit), 64); err == nil {
				n := len(dst)
				dst, _ = AppendFloat(dst, f)
				if string(dst[n:]) == string(lit) {
					return dst, i, nil
				}
				dst = dst[:n]
			}
		}
		return dst, start, newError(start, ErrInexactInteger, inexactDetail(lit))
	case isShortDecimal(src[intStart:intEnd], src[intEnd+1:fracEnd]):
		return append(dst, lit...), i, nil
	}

	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil {
		// The grammar is checked above, so this can only be overflow.
		return dst, start, newError(start, ErrNumberRange, quoteTrunc(lit))
	}
	dst, _ = AppendFloat(dst, f)
	return dst, i, nil
}

func inexactDetail(lit []byte) string {
	detail := truncate(lit) + " exceeds 2^53"
	if f, err := strconv.ParseFloat(string(lit), 64); err == nil && len(lit) <= maxDetail {
		b, _ := AppendFloat(nil, f)
		detail += " and would become " + string(b)
	}
	return detail + " (send IDs as strings)"
}

// isShortDecimal reports whether the number with integer digits ip and
// fraction digits fp (at least one) is its own canonical form. That is the
// case when it has at most 15 significant digits, no trailing zero, and a
// magnitude of at least 1e-6: binary64 tells apart all decimals of 15
// significant digits, so no shorter or closer decimal rounds to the same
// double, and ECMAScript writes numbers from 1e-6 up to 1e21 without exponent.
func isShortDecimal(ip, fp []byte) bool {
	if fp[len(fp)-1] == '0' {
		return false
	}
	if ip[0] != '0' {
		return len(ip)+len(fp) <= 15
	}
	z := 0
	for fp[z] == '0' { // terminates: the last digit is not '0'
		z++
	}
	return z <= 5 && len(fp)-z <= 15
}

// AppendFloat appends the canonical form of f to dst: the shortest decimal
// that reads back as f, laid out as ECMAScript's Number.prototype.toString
// does (RFC 8785 section 3.2.2.3). For example 1e21 is "1e+21", 1e-7 is
// "1e-7", 0.000001 is "0.000001", and -0 is "0".
// It returns dst unchanged and an error wrapping ErrNumberRange if f is NaN
// or an infinity, which JSON cannot represent.
func AppendFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("%w: %v", ErrNumberRange, f)
	}
	if f == 0 {
		return append(dst, '0'), nil
	}
	if abs := math.Abs(f); 1e-6 <= abs && abs < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64), nil
	}
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	// Go writes at least two exponent digits (1e-07); ECMAScript does not.
	if n := len(dst); dst[n-2] == '0' && (dst[n-3] == '-' || dst[n-3] == '+') {
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst, nil
}
