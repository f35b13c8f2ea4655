package httponce

import (
	"errors"
	"fmt"
	"strings"
)

// parseKey returns the client's string from the Idempotency-Key field
// values of a request: one value, either a structured-field string (RFC
// 8941, the draft's form: "8e03978e-40d5-43e8-bc93-6894a57f9324") or, as
// many clients send it, the bare string. The string's characters are
// checked by dedupe.ClientKey.
func parseKey(values []string) (string, error) {
	if len(values) != 1 {
		return "", errors.New("An Idempotency-Key header is given more than once; send one.")
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", errors.New("The Idempotency-Key header is empty.")
	}
	if v[0] != '"' {
		return v, nil
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			if i+1 == len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", fmt.Errorf("The Idempotency-Key string has an invalid escape at byte %d.", i)
			}
			i++
			b.WriteByte(v[i])
		case c == '"':
			if rest := strings.TrimLeft(v[i+1:], " \t"); rest != "" {
				return "", fmt.Errorf("The Idempotency-Key string is followed by %q; send the string alone.", truncate(rest))
			}
			if b.Len() == 0 {
				return "", errors.New("The Idempotency-Key string is empty.")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("The Idempotency-Key string has a byte that is not printable ASCII at byte %d.", i)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("The Idempotency-Key string has no closing quote.")
}

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}
