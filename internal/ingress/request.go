package ingress

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/oncegate/oncegate/internal/ingress/spec"
	"github.com/oncegate/oncegate/pkg/canon"
)

// request is one request as verification and id extraction see it.
type request struct {
	h   http.Header
	raw []byte // the body as received (what is signed)
	uri string // the request URI, for {url}
	// form is the parsed form of a form body, nil otherwise.
	form url.Values
	// body is what is published: raw, or the form's JSON.
	body []byte

	canonical []byte // body, canonicalized for pointers; once
	canonErr  error
	canonDone bool

	id     string // the delivery id; once
	idFrom spec.From
	idErr  error
	idDone bool

	// canons holds the Canonicalizers for pointer lookups.
	canons *sync.Pool
}

// newCanonPool returns a pool of Canonicalizers that take bodies up to
// maxBody bytes (canon's default limit is 1 MiB), and integers past 2^53
// as they come (a provider's ids may be such numbers).
func newCanonPool(maxBody int64) *sync.Pool {
	return &sync.Pool{New: func() any {
		c, err := canon.New(canon.Options{MaxBytes: int(max(maxBody, 1<<20)), AllowInexactIntegers: true})
		if err != nil {
			panic(err) // the options are valid
		}
		return c
	}}
}

// canonBody returns the published body in canonical form.
func (rq *request) canonBody() ([]byte, error) {
	if rq.canonDone {
		return rq.canonical, rq.canonErr
	}
	rq.canonDone = true
	c := rq.canons.Get().(*canon.Canonicalizer)
	rq.canonical, rq.canonErr = c.Append(nil, rq.body)
	rq.canons.Put(c)
	if rq.canonErr != nil {
		rq.canonErr = fmt.Errorf("the body is not valid JSON: %w", rq.canonErr)
	}
	return rq.canonical, rq.canonErr
}

// lookup returns the value a place holds in this request: a header's, a
// body member's (a string, or a number's text), or the body's digest. It
// returns "" when the place has none; an error when the body does not
// parse, or the member is not a string or a number.
func (rq *request) lookup(f spec.From) (string, bool, error) {
	switch f.Kind {
	case spec.FromHeader:
		v := rq.h.Get(f.Name)
		return v, v != "", nil
	case spec.FromDigest:
		sum := sha256.Sum256(rq.raw)
		return "sha256-" + hex.EncodeToString(sum[:]), true, nil
	case spec.FromBody:
		doc, err := rq.canonBody()
		if err != nil {
			return "", false, err
		}
		v, ok, err := canon.Lookup(doc, f.Pointer)
		if err != nil || !ok {
			return "", false, err
		}
		switch {
		case len(v) > 0 && v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return "", false, err
			}
			return s, s != "", nil
		case len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9'):
			return string(v), true, nil
		case bytes.Equal(v, []byte("null")):
			return "", false, nil
		}
		return "", false, fmt.Errorf("the body's %s is not a string or a number", f.Name)
	}
	return "", false, nil
}

// first returns the value of the first place in list that has one, and
// that place.
func (rq *request) first(list []spec.From) (string, spec.From, error) {
	for _, f := range list {
		v, ok, err := rq.lookup(f)
		if err != nil {
			return "", f, err
		}
		if ok {
			return v, f, nil
		}
	}
	return "", spec.From{}, nil
}

// delivery returns the delivery id and where it came from.
func (rq *request) delivery(sc *scheme) (string, spec.From, error) {
	if !rq.idDone {
		rq.idDone = true
		rq.id, rq.idFrom, rq.idErr = rq.first(sc.delivery)
	}
	return rq.id, rq.idFrom, rq.idErr
}

// readForm parses a form body into rq.form and sets the body to publish:
// the JSON of the payload field, or the form's fields as a JSON object
// (a field sent several times, an array of its values).
func (rq *request) readForm(payload string) error {
	f, err := url.ParseQuery(string(rq.raw))
	if err != nil {
		return errors.New("the form body does not parse")
	}
	rq.form = f
	if payload != "" {
		if vs, ok := f[payload]; ok && len(vs) == 1 {
			rq.body = []byte(vs[0])
			return nil
		}
	}
	obj := make(map[string]any, len(f))
	for k, vs := range f {
		if len(vs) == 1 {
			obj[k] = vs[0]
		} else {
			obj[k] = vs
		}
	}
	rq.body, err = json.Marshal(obj) // map keys are sorted
	return err
}

// isForm reports whether a Content-Type is a form.
func isForm(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/x-www-form-urlencoded")
}
