package config

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/oncegate/oncegate/internal/secretfile"
)

// EffectSecrets are the secret values of one effect, read from the
// environment and files.
type EffectSecrets struct {
	// URL is the effect's URL: URL as written, or read from URLEnv or
	// URLFile.
	URL string
	// Headers are the HeadersEnv headers' values.
	Headers map[string]string
	// RoutingKey, User and Token are the presets' secrets.
	RoutingKey, User, Token string
}

// LookupFunc reads an environment variable, as os.LookupEnv.
type LookupFunc func(string) (string, bool)

// Secrets reads the effect's secrets with lookup (os.LookupEnv when nil)
// and secretfile.ReadFile (a file open to others is refused). path is the effect's path for the error, which is a
// *FieldError naming the field and the variable or file: the one error
// run, which refuses to start without them, and config check give.
func (e *Effect) Secrets(path string, lookup LookupFunc) (EffectSecrets, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	var errs []error
	read := func(field, env, file string) string {
		switch {
		case env != "":
			v, ok := lookup(env)
			if !ok {
				errs = append(errs, &FieldError{Path: joinPath(path, field), Err: invalid("environment variable %s is not set", env)})
			}
			return v
		case file != "":
			b, err := secretfile.ReadFile(file)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					err = fs.ErrNotExist
				}
				errs = append(errs, &FieldError{Path: joinPath(path, strings.Replace(field, "_env", "_file", 1)), Err: invalid("%s: %v", file, err)})
			}
			return strings.TrimSpace(string(b))
		}
		return ""
	}
	s := EffectSecrets{URL: e.URL, Headers: map[string]string{}}
	if u := read("url_env", e.URLEnv, e.URLFile); u != "" {
		s.URL = u
		if err := checkURL(u, "http", "https"); err != nil {
			errs = append(errs, &FieldError{Path: joinPath(path, "url_env"), Err: err})
		}
	}
	for _, h := range slices.Sorted(mapKeys(e.HeadersEnv)) {
		env := e.HeadersEnv[h]
		v, ok := lookup(env)
		if !ok {
			errs = append(errs, &FieldError{Path: keyPath(joinPath(path, "headers_env"), h), Err: invalid("effect header %s: environment variable %s is not set", h, env)})
		}
		s.Headers[h] = v
	}
	s.RoutingKey = read("routing_key_env", e.RoutingKeyEnv, e.RoutingKeyFile)
	s.User = read("user_env", e.UserEnv, e.UserFile)
	s.Token = read("token_env", e.TokenEnv, e.TokenFile)
	return s, errors.Join(errs...)
}

// CheckSecrets reads the secrets of every effect as run does, and returns
// the errors run would refuse to start with.
func (c *Config) CheckSecrets(lookup LookupFunc) error {
	var errs []error
	for i := range c.Pipelines {
		p := &c.Pipelines[i]
		for _, e := range p.AllEffects() {
			path := joinPath(indexPath("pipelines", i), "effect")
			if e.Name != "" {
				path = keyPath(joinPath(indexPath("pipelines", i), "effects"), e.Name)
			}
			if _, err := e.Secrets(c.displayPath(path), lookup); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
