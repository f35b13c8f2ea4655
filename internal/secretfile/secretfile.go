// Package secretfile reads the secrets Oncegate is given in files (the
// console's operator tokens and the proxy's client keys) and
// holds them to one set of rules.
//
// # The rules
//
//   - A secret file may be read by its owner alone: [CheckMode] is the one
//     place that says which modes pass, and [ReadFile] applies it to the
//     open file, before reading it.
//   - Every secret is at least [MinBytes] bytes: a bearer secret that is
//     short can be guessed.
//   - A file of several secrets names each one, one a line: a name, blanks,
//     the secret (the `name secret` format, see [Parse]). Names are
//     [ValidName]s, none given twice, and no secret is given twice.
//   - A [Set] keeps only the secrets' SHA-256 digests and looks a
//     presented secret up by its digest, so that neither what it keeps
//     nor the time a lookup takes tells anything of the secrets.
//
// Errors wrap exactly one of [ErrMode], [ErrTooShort] and [ErrFormat]
// (test with [errors.Is]), name the file and line, and never hold a
// secret, nor a field that could be one.
package secretfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// Sentinel errors; every error this package returns wraps one of them, or
// is the file system's error (a file that does not exist, say) wrapped.
var (
	// ErrMode reports a secret file that others than its owner may read
	// or write (see CheckMode).
	ErrMode = errors.New("secretfile: file readable by others than its owner")
	// ErrTooShort reports a secret shorter than MinBytes.
	ErrTooShort = errors.New("secretfile: secret too short")
	// ErrFormat reports content that is not in the `name secret` format:
	// a line of more than two fields, a name that is not a ValidName, a
	// name or a secret given twice, a secret with no name where names are
	// needed, no secret at all, or a file larger than MaxFileBytes.
	ErrFormat = errors.New("secretfile: malformed")
)

// MinBytes is the length of the shortest secret accepted.
const MinBytes = 20

// MaxFileBytes is the size of the largest secret file read.
const MaxFileBytes = 1 << 20

// CheckMode returns nil if a secret file of mode m may be used, and an
// error wrapping ErrMode that says how to fix it if not. It is the one
// rule for the modes of secret files, and it is, for now: the file's
// group and others may neither read nor write it nor search it (m's
// permission bits & 0o077 are zero; 0600 and 0400 pass). Path is for the
// message.
//
// (A later change relaxes it to accept what kubelet makes of a mounted
// secret volume; that change belongs here, and nowhere else.)
func CheckMode(path string, m fs.FileMode) error {
	if perm := m.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s (mode %#o): it holds secrets; chmod 600 %s", ErrMode, path, perm, path)
	}
	return nil
}

// ReadFile opens the file at path, checks its mode with CheckMode and
// returns its contents, up to MaxFileBytes (more is ErrFormat). The mode
// checked is the open file's, so that the file read is the file checked.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("secretfile: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secretfile: %w", err)
	}
	if err := CheckMode(path, st.Mode()); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		clear(b)
		return nil, fmt.Errorf("secretfile: %w", err)
	}
	if len(b) > MaxFileBytes {
		clear(b)
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrFormat, path, MaxFileBytes)
	}
	return b, nil
}

// ValidName reports whether s may name a secret: 1 to 64 bytes of
// lower-case ASCII letters, digits, '-' and '_'.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Set is a set of named secrets. It keeps only the secrets' SHA-256
// digests. A Set is safe for concurrent use; a nil *Set holds nothing.
type Set struct {
	names map[[sha256.Size]byte]string
	list  []string // sorted
}

// Options configures Parse and Load.
type Options struct {
	// LoneName, if not empty, accepts content whose one entry is a secret
	// with no name (a line of one field), and names that secret LoneName.
	// A secret with no name among named ones is refused whatever it says.
	// The default, empty, needs every secret named.
	LoneName string
}

// Parse parses b in the `name secret` format: one secret a line, its name
// (a ValidName), blanks, the secret (at least MinBytes bytes, with no
// blanks in it); blank lines and lines that start with '#' are skipped.
// With o.LoneName set, content whose one entry is a secret alone is a Set
// of that secret named o.LoneName. Src names the content in errors (a
// path, or "$VARIABLE").
//
// The errors wrap ErrFormat or ErrTooShort and say the line (and the
// other line, for a name or a secret given twice); they show nothing of
// the content, since a field taken for a name may be a secret written
// first.
func Parse(src string, b []byte, o Options) (*Set, error) {
	s := &Set{names: map[[sha256.Size]byte]string{}}
	lines := map[string]int{}              // a name's line
	secrets := map[[sha256.Size]byte]int{} // a secret's line
	loneLine := 0
	for i, raw := range bytes.Split(b, []byte("\n")) {
		n := i + 1
		line := strings.TrimSpace(string(raw))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		at := fmt.Sprintf("%s:%d", src, n)
		f := strings.Fields(line)
		var name, secret string
		switch {
		case len(f) == 1 && o.LoneName == "":
			return nil, fmt.Errorf("%w: %s: want a name and its secret, separated by blanks", ErrFormat, at)
		case len(f) == 1 && len(lines) > 0:
			return nil, fmt.Errorf("%w: %s: a secret with no name beside named ones: give each a name (a name, blanks, its secret)", ErrFormat, at)
		case len(f) == 2 && loneLine != 0:
			return nil, fmt.Errorf("%w: %s: a named secret beside one with no name (line %d): give each a name (a name, blanks, its secret)", ErrFormat, at, loneLine)
		case len(f) == 1:
			name, secret, loneLine = o.LoneName, f[0], n
		case len(f) == 2:
			name, secret = f[0], f[1]
			if !ValidName(name) {
				return nil, fmt.Errorf("%w: %s: the first field is not a name (1 to 64 of lower-case letters, digits, '-' and '_')", ErrFormat, at)
			}
			if l, ok := lines[name]; ok {
				return nil, fmt.Errorf("%w: %s: the name is given twice (line %d too)", ErrFormat, at, l)
			}
		default:
			return nil, fmt.Errorf("%w: %s: %d fields; want a name and its secret, separated by blanks (a secret has no blanks in it)", ErrFormat, at, len(f))
		}
		if len(secret) < MinBytes {
			return nil, fmt.Errorf("%w: %s: the secret is %d bytes; want at least %d", ErrTooShort, at, len(secret), MinBytes)
		}
		h := sha256.Sum256([]byte(secret))
		if l, ok := secrets[h]; ok {
			return nil, fmt.Errorf("%w: %s: the secret is also line %d's: give each its own", ErrFormat, at, l)
		}
		secrets[h], lines[name] = n, n
		s.names[h] = name
		s.list = append(s.list, name)
	}
	if len(s.list) == 0 {
		return nil, fmt.Errorf("%w: %s holds no secret", ErrFormat, src)
	}
	slices.Sort(s.list)
	return s, nil
}

// Load reads the file at path with ReadFile and parses it with Parse.
func Load(path string, o Options) (*Set, error) {
	b, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return Parse(path, b, o)
}

// Lookup returns the name of secret, and whether the set has it.
func (s *Set) Lookup(secret string) (string, bool) {
	if s == nil {
		return "", false
	}
	name, ok := s.names[sha256.Sum256([]byte(secret))]
	return name, ok
}

// Names returns the secrets' names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.list)
}

// Len returns how many secrets the set holds.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}
