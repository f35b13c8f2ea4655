package natsrun

import (
	"slices"
	"strings"
)

// redacted replaces a secret in URLs, log records and error texts.
const redacted = "xxxxx"

// Redact returns s, one server URL or several separated by commas, with the
// user information hidden: "nats://alice:s3cret@host:4222" becomes
// "nats://alice:xxxxx@host:4222", and "nats://s3cret@host:4222", where NATS
// takes the lone user part as a token, becomes "nats://xxxxx@host:4222".
// URLs without a scheme ("alice:pw@host:4222") are redacted alike. Redact
// works on the text and never fails, so even a URL that does not parse
// loses its secrets. Like nats.go, it splits the list at every comma, so a
// password containing a raw comma (which nats.go cannot use either) is
// only partly hidden; percent-encode it as %2C.
func Redact(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = redactOne(p)
	}
	return strings.Join(parts, ",")
}

// redactOne redacts the user information of one URL.
func redactOne(s string) string {
	start, end, ok := userinfo(s)
	if !ok {
		return s
	}
	info := s[start:end]
	if user, _, hasPass := strings.Cut(info, ":"); hasPass {
		info = user + ":" + redacted
	} else {
		info = redacted
	}
	return s[:start] + info + s[end:]
}

// userinfo returns the bounds of the user information of the URL s: from
// after "scheme://" (or the start, without a scheme) to before the last '@'
// of the authority.
func userinfo(s string) (start, end int, ok bool) {
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	auth := s[start:]
	if j := strings.IndexAny(auth, "/?#"); j >= 0 {
		auth = auth[:j]
	}
	at := strings.LastIndex(auth, "@")
	if at < 0 {
		return 0, 0, false
	}
	return start, start + at, true
}

// urlSecrets returns the secrets in the user information of the URLs of s:
// each password, each lone user part (a token), and each user:password
// pair as written.
func urlSecrets(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		start, end, ok := userinfo(p)
		if !ok || start == end {
			continue
		}
		info := p[start:end]
		out = append(out, info)
		if _, pass, hasPass := strings.Cut(info, ":"); hasPass {
			out = append(out, pass)
		}
	}
	return out
}

// scrubber hides known secrets in texts.
type scrubber struct {
	secrets []string // longest first, so that a pair goes before its parts
}

func newScrubber(secrets ...string) *scrubber {
	s := &scrubber{}
	for _, v := range secrets {
		if v != "" && v != redacted && !slices.Contains(s.secrets, v) {
			s.secrets = append(s.secrets, v)
		}
	}
	slices.SortFunc(s.secrets, func(a, b string) int { return len(b) - len(a) })
	return s
}

// text returns t with every known secret replaced.
func (s *scrubber) text(t string) string {
	for _, v := range s.secrets {
		t = strings.ReplaceAll(t, v, redacted)
	}
	return t
}

// err returns err with a scrubbed text; it still unwraps to err, so that
// errors.Is and errors.As see the cause. Nil stays nil.
func (s *scrubber) err(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := s.text(msg)
	if clean == msg {
		return err
	}
	return &scrubbedError{msg: clean, err: err}
}

// scrubbedError is an error whose text has had its secrets removed. Its
// cause, reached with errors.Unwrap, still has them: print the wrapper,
// never the cause.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
