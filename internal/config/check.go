package config

// The checks of single values that several sections share: names, URLs,
// listen addresses, environment variable names, header names.

import (
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var nameRE = regexp.MustCompile(`^[a-z0-9-]+$`)

func checkName(s string) error {
	if s == "" {
		return missing("a name is required")
	}
	if len(s) > 64 || !nameRE.MatchString(s) {
		return invalid("%q: want 1 to 64 lower-case letters, digits and '-'", s)
	}
	return nil
}

// checkURL checks a URL of one of the schemes, without credentials. A
// NATS URL may leave out its scheme ("host:4222"), as nats.go allows.
func checkURL(s string, schemes ...string) error {
	if s == "" {
		return missing("a URL is required")
	}
	raw := s
	if !strings.Contains(s, "://") {
		if schemes[0] != "nats" {
			return invalid("%q: want a URL with a scheme (%s)", redactURL(s), strings.Join(schemes, ", "))
		}
		raw = "nats://" + s
	}
	u, err := url.Parse(raw)
	if err != nil {
		return invalid("%q is not a URL", redactURL(s))
	}
	if !slices.Contains(schemes, u.Scheme) {
		return invalid("%q: the scheme must be %s", redactURL(s), strings.Join(schemes, ", "))
	}
	if u.User != nil {
		return invalid("%q carries credentials; secrets are never read from the config file (use a creds, nkey, password or token file, or an environment variable)", redactURL(s))
	}
	if u.Host == "" {
		return invalid("%q has no host", redactURL(s))
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return invalid("%q: port %s is out of range", redactURL(s), p)
		}
	}
	return nil
}

// checkListen checks a host:port listen address; loopback requires a
// loopback host.
func checkListen(addr string, loopback bool) error {
	if addr == "" {
		return missing("an address (host:port) is required")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return invalid("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return invalid("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if loopback {
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return invalid("%q: the embedded server listens on loopback only (127.0.0.1, ::1 or localhost); to serve others, run a NATS server and set nats.url", addr)
		}
	}
	return nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkEnvName(s string) error {
	if !envNameRE.MatchString(s) {
		return invalid("%q is not an environment variable name", s)
	}
	if strings.HasPrefix(s, EnvPrefix) {
		return invalid("%q: names starting with %s are configuration overrides; choose another", s, EnvPrefix)
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0) {
			return false
		}
	}
	return true
}
