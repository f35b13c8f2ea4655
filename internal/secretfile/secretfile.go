// Package secretfile reads the secrets Oncegate is given in files (the
// console's operator tokens, the proxy's client keys, the encryption key,
// NATS credentials, webhook and effect secrets) and holds them to one set
// of rules.
//
// # The rules
//
//   - A secret file may be written by its owner alone, and read by its
//     owner alone, or by its owner and its group when the owner is root and
//     the process is not: [CheckMode] is the one place that says which
//     files pass, and [ReadFile] applies it to the open file, before
//     reading it. The second case is what kubelet makes of a Kubernetes
//     secret volume under the pod's fsGroup (a root-owned file of mode
//     0440, the group the pod's), and what PostgreSQL accepts for its key
//     (a root-owned 0640). A file others may read, or that its group or
//     others may write, is refused; so is one owned by another user.
//   - A secret file is read through its path as given, symbolic links
//     followed, as kubelet lays a secret volume out (each key a link
//     through ..data to a directory of the current version): the file
//     checked is the file read.
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
	// ErrMode reports a secret file that CheckMode refuses: others may
	// read it, its group or others may write it, its group may read it
	// although it is not root's, or it belongs to another user.
	ErrMode = errors.New("secretfile: file open to others")
	// ErrTooShort reports a secret shorter than MinBytes.
	ErrTooShort = errors.New("secretfile: secret too short")
	// ErrFormat reports content that is not in the `name secret` format:
	// a line of more than two fields, a name that is not a ValidName, a
	// name or a secret given twice, a secret with no name where names are
	// needed, no secret at all, a file larger than MaxFileBytes, or a
	// directory where a file was expected.
	ErrFormat = errors.New("secretfile: malformed")
)

// MinBytes is the length of the shortest secret accepted.
const MinBytes = 20

// MaxFileBytes is the size of the largest secret file read.
const MaxFileBytes = 1 << 20

// CheckMode returns nil if a secret file of mode m, owned by the user id
// owner, may be used by a process whose effective user id is self, and an
// error wrapping ErrMode that says how to fix it if not. It is the one
// rule for secret files:
//
//   - no one but the owner may write it (m & 0o022 is zero), and others
//     may not read it (m & 0o007 is zero);
//   - a file owned by self may be read by its owner alone: 0600 and 0400
//     pass, 0640 does not;
//   - a file owned by root, read by a process that is not root, may be
//     read by its group as well: 0640 and 0440 pass, as kubelet makes a
//     secret volume's files under fsGroup (root-owned, mode defaultMode
//     with the group's read bit, the group the pod's);
//   - a file owned by another user is refused.
//
// A process running as root gets the first two rules: the files it owns
// are root's. Path is for the message.
func CheckMode(path string, m fs.FileMode, owner, self int) error {
	perm := m.Perm()
	const kube = "(in a Kubernetes secret volume: defaultMode: 0440 with the pod's fsGroup, or 0400)"
	switch {
	case perm&0o022 != 0:
		return fmt.Errorf("%w: %s (mode %04o) may be written by its group or others; it holds secrets: chmod 600 %s %s", ErrMode, path, perm, path, kube)
	case perm&0o007 != 0:
		return fmt.Errorf("%w: %s (mode %04o) may be read by every user; it holds secrets: chmod 600 %s %s", ErrMode, path, perm, path, kube)
	case owner == self:
		if perm&0o070 != 0 {
			return fmt.Errorf("%w: %s (mode %04o) may be read by its group; a secret file of this process's own user is for it alone: chmod 600 %s "+
				"(a group may read a secret file only when root owns it, as kubelet's secret volumes are)", ErrMode, path, perm, path)
		}
	case owner == 0:
		if perm&0o010 != 0 {
			return fmt.Errorf("%w: %s (mode %04o, owned by root): its group may read it and nothing more: chmod 640 %s", ErrMode, path, perm, path)
		}
	default:
		return fmt.Errorf("%w: %s is owned by uid %d, neither this process's user (uid %d) nor root: chown %d %s", ErrMode, path, owner, self, self, path)
	}
	return nil
}

// Check applies CheckMode to a file described by fi (from os.Stat or
// File.Stat; a symbolic link's target, not the link), owned as fi says,
// for this process's effective user. Where files have no owner (not
// Unix), it accepts every file.
func Check(path string, fi fs.FileInfo) error {
	owner, ok := fileOwner(fi)
	if !ok {
		return nil
	}
	return CheckMode(path, fi.Mode(), owner, geteuid())
}

// geteuid is os.Geteuid; a test may play another user with it.
var geteuid = os.Geteuid

// ReadFile opens the file at path, checks it with Check and returns its
// contents, up to MaxFileBytes (more is ErrFormat). The file checked is
// the open file (symbolic links followed), so that the file read is the
// file checked.
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
	if st.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory, not a file", ErrFormat, path)
	}
	if err := Check(path, st); err != nil {
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
