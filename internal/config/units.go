package config

// The text forms of the configuration's values: sizes and durations.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ByteSize is a size in bytes. Its text form is a whole number with an
// optional unit: B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers
// of 1024): "1MiB", "512KiB", "65536".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
}

func (s ByteSize) String() string {
	for _, u := range byteUnits[:3] {
		if s != 0 && int64(s)%u.n == 0 {
			return strconv.FormatInt(int64(s)/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText implements encoding.TextMarshaler.
func (s ByteSize) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *ByteSize) UnmarshalText(b []byte) error {
	t := strings.TrimSpace(string(b))
	mul := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mul = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)/mul {
		return fmt.Errorf("invalid size %q: want a whole number of bytes, optionally with a unit such as KiB or MiB", b)
	}
	*s = ByteSize(n * mul)
	return nil
}

// parseDuration is time.ParseDuration that also takes a bare "0".
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as \"30s\", \"10m\" or \"168h\"", s)
	}
	return d, nil
}

// formatDuration prints d without zero units: "168h", "2m30s", "100ms".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
