package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The sentinels every *FieldError wraps one of. Test with errors.Is.
var (
	// ErrUnknownKey is wrapped by the error for a key in the file, or an
	// ONCEGATE_* environment variable, that names no configuration field.
	// A misspelt option is an error, never silently ignored.
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrInvalid is wrapped by the error for a value that is present but
	// wrong: of the wrong type, out of range, inconsistent with another
	// field, or a secret written where secrets are not read from. YAML
	// syntax errors wrap it too.
	ErrInvalid = errors.New("config: invalid value")
	// ErrMissing is wrapped by the error for a required field left out.
	ErrMissing = errors.New("config: missing value")
)

// FieldError is one problem with one configuration field. Parse, Load and
// Validate return every problem they find, joined with errors.Join; walk
// them with errors.As on each element of the joined error's Unwrap() []error.
type FieldError struct {
	// File is the name of the configuration file, if the problem is in one.
	File string
	// Line is the 1-based line in File of the value, or of the nearest
	// enclosing key when the value is missing. It is 0 when the value did
	// not come from the file.
	Line int
	// Env is the environment variable the value came from, if it did.
	Env string
	// Path names the field, as it reads in the file: "ledger.retention",
	// "pipelines[alerts].effect.url", "llm.prices[gpt-4o-mini]". It is
	// empty for problems with the document as a whole, or with an
	// environment variable that matches no field.
	Path string
	// Err wraps ErrUnknownKey, ErrInvalid or ErrMissing and says what is
	// wrong.
	Err error
}

func (e *FieldError) Error() string {
	var b []byte
	switch {
	case strings.HasPrefix(e.Env, "-"):
		b = append(b, "flag "...)
		b = append(b, e.Env...)
		b = append(b, ": "...)
	case e.Env != "":
		b = append(b, "env "...)
		b = append(b, e.Env...)
		b = append(b, ": "...)
	case e.File != "" && e.Line > 0:
		b = append(b, e.File...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(e.Line), 10)
		b = append(b, ": "...)
	case e.File != "":
		b = append(b, e.File...)
		b = append(b, ": "...)
	case e.Line > 0:
		b = append(b, "line "...)
		b = strconv.AppendInt(b, int64(e.Line), 10)
		b = append(b, ": "...)
	}
	if e.Path != "" {
		b = append(b, e.Path...)
		b = append(b, ": "...)
	}
	b = append(b, e.Err.Error()...)
	return string(b)
}

// Unwrap returns e.Err.
func (e *FieldError) Unwrap() error { return e.Err }

// problem is the Err of a FieldError: a message that wraps a sentinel
// without repeating the sentinel's text.
type problem struct {
	kind error
	msg  string
}

func (p *problem) Error() string { return p.msg }
func (p *problem) Unwrap() error { return p.kind }

func invalid(format string, args ...any) error {
	return &problem{ErrInvalid, fmt.Sprintf(format, args...)}
}

func missing(format string, args ...any) error {
	return &problem{ErrMissing, fmt.Sprintf(format, args...)}
}

func unknown(format string, args ...any) error {
	return &problem{ErrUnknownKey, fmt.Sprintf(format, args...)}
}

// maxProblems bounds the problems reported at once.
const maxProblems = 100

// issue is a problem at an internal path (pipelines by index), turned into
// a *FieldError once the pipeline names are known.
type issue struct {
	path string // internal path: "pipelines[0].effect.url"
	line int    // if known at the time of the problem (decoding); else looked up
	env  string // if the problem is with an environment variable
	err  error
}

// fieldErrors turns issues into FieldErrors with display paths and
// positions, joined. It returns nil for no issues.
func (c *Config) fieldErrors(issues []issue) error {
	if len(issues) == 0 {
		return nil
	}
	more := 0
	if len(issues) > maxProblems {
		issues, more = issues[:maxProblems], len(issues)-maxProblems
	}
	errs := make([]error, 0, len(issues)+1)
	for _, is := range issues {
		fe := &FieldError{Path: c.displayPath(is.path), Line: is.line, Env: is.env, Err: is.err}
		if c.meta != nil {
			fe.File = c.meta.file
			if fe.Env == "" && fe.Line == 0 && is.path != "" {
				fe.Env, fe.Line = c.meta.position(is.path)
			}
		}
		if fe.Env != "" {
			fe.Line = 0
		}
		errs = append(errs, fe)
	}
	if more > 0 {
		fe := &FieldError{Err: invalid("%d more problems not shown", more)}
		if c.meta != nil {
			fe.File = c.meta.file
		}
		errs = append(errs, fe)
	}
	return errors.Join(errs...)
}
