package config

import (
	"fmt"
	"strings"
)

// NATS subjects, by the server's rules: tokens separated by '.', none empty
// and none with whitespace; '*' as a whole token matches one token, '>' as
// the whole last token matches one or more. One rule is stricter than the
// server's: a token may not mix '*' or '>' with other characters. The
// server takes "a*" as a literal token in some places and as a wildcard in
// others (its filter-subset check looks only at a token's first byte).

// checkSubject reports what is wrong with subject s, or nil. A literal
// subject (to publish to) may have no wildcards.
func checkSubject(s string, literal bool) error {
	if s == "" {
		return missing("a subject is required")
	}
	if strings.ContainsRune(s, 0) {
		return invalid("subject %q contains a NUL byte", s)
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return invalid("subject %q has an empty token", s)
		case strings.ContainsAny(t, " \t\r\n\f"):
			return invalid("subject %q contains whitespace", s)
		case t == ">" && i != len(toks)-1:
			return invalid("subject %q has '>' before its last token", s)
		case literal && (t == ">" || t == "*"):
			return invalid("subject %q has a wildcard; a subject to publish to must be literal", s)
		case len(t) > 1 && strings.ContainsAny(t, "*>"):
			return invalid("subject %q has a token %q that mixes a wildcard with other characters", s, t)
		}
	}
	return nil
}

// subjectCovers reports whether every subject the filter narrow matches is
// also matched by wide: whether a stream on wide captures everything a
// consumer filtered on narrow can ask for. Both must be valid subjects.
func subjectCovers(wide, narrow string) bool {
	return tokensCover(strings.Split(wide, "."), strings.Split(narrow, "."))
}

// tokensCover is subjectCovers on subjects split into tokens.
func tokensCover(w, n []string) bool {
	for i, wt := range w {
		if wt == ">" {
			return i < len(n)
		}
		if i >= len(n) {
			return false
		}
		switch nt := n[i]; {
		case nt == ">":
			return false
		case wt == "*":
		case nt == "*" || nt != wt:
			return false
		}
	}
	return len(w) == len(n)
}

// subjectsCollide reports whether some subject is matched by both a and b.
// Both must be valid subjects.
func subjectsCollide(a, b string) bool {
	x, y := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; ; i++ {
		switch {
		case i == len(x) || i == len(y):
			return len(x) == len(y)
		case x[i] == ">" || y[i] == ">":
			return true
		case x[i] == "*" || y[i] == "*" || x[i] == y[i]:
		default:
			return false
		}
	}
}

// checkName reports what is wrong with a stream or bucket name.
func checkStreamName(s string) error {
	if s == "" {
		return missing("a name is required")
	}
	if len(s) > 255 {
		return invalid("name is %d bytes long; the limit is 255", len(s))
	}
	if i := strings.IndexAny(s, " \t\r\n\f.*>/\\\x00"); i >= 0 {
		return invalid("name %q contains %q; names may not contain whitespace, '.', '*', '>', '/' or '\\'", s, s[i])
	}
	return nil
}

func checkBucketName(s string) error {
	if s == "" {
		return missing("a bucket name is required")
	}
	for i := 0; i < len(s); i++ {
		if ch := s[i]; !(ch == '-' || ch == '_' || 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9') {
			return invalid("bucket name %q: only letters, digits, '-' and '_' are allowed", s)
		}
	}
	return nil
}

// quoteSubjects formats a subject list for messages.
func quoteSubjects(ss []string) string {
	if len(ss) == 1 {
		return fmt.Sprintf("%q", ss[0])
	}
	return fmt.Sprintf("%q", ss)
}
