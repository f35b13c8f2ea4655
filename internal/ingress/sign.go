package ingress

import (
	"crypto/ed25519"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// Delivery is what SignDelivery signs: a payload as a provider would send
// it to a source.
type Delivery struct {
	// Secret is the source's secret as it is configured (a signing secret,
	// a token, a password); for an ed25519 source, the provider's private
	// key, in the source's secret encoding (a 32-byte seed or a 64-byte
	// key).
	Secret []byte
	// Body is the payload.
	Body []byte
	// Time is when it is signed; the zero Time is now.
	Time time.Time
	// ID is the delivery id, for a source that takes it from a header.
	ID string
	// Event is the event type, for a source that takes it from a header;
	// empty, the preset's usual one (github: push, sentry: issue).
	Event string
	// Tenant is the tenant of a per-tenant source, for a signature over
	// {url}.
	Tenant string
	// Query is the query string of the URL called, without "?", for a
	// signature over {url}.
	Query string
}

// Sign returns the headers a provider would send to src with body, signed
// with secret at now: id is the delivery id and event the event type,
// where the source takes them from headers. See SignDelivery.
func Sign(src spec.Source, secret []byte, body []byte, now time.Time, id, event string) (http.Header, error) {
	return SignDelivery(src, Delivery{Secret: secret, Body: body, Time: now, ID: id, Event: event})
}

// SignDelivery returns the headers a provider would send to src with d's
// body, signed or authenticated as the source checks it: what `consumer
// webhook sign` prints, and what tests and benchmarks send. A signed
// timestamp that lives in the body (Linear's webhookTimestamp) is the
// body's own: d.Time does not change it.
func SignDelivery(src spec.Source, d Delivery) (http.Header, error) {
	r := src.Resolved()
	sc, err := compile(r)
	if err != nil {
		return nil, fmt.Errorf("ingress: source %s: %w", src.Name, err)
	}
	if d.Time.IsZero() {
		d.Time = time.Now()
	}
	p, _ := spec.Lookup(src.Kind)
	if d.Event == "" {
		d.Event = p.SignEvent
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if sc.form && !looksJSON(d.Body) {
		h.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if f, ok := firstHeader(sc.delivery); ok && d.ID != "" {
		h.Set(f.Name, d.ID)
	}
	if f, ok := firstHeader(sc.event); ok && d.Event != "" {
		h.Set(f.Name, d.Event)
	}
	switch sc.auth {
	case spec.AuthNone:
		return h, nil
	case spec.AuthToken:
		h.Set(sc.tokenHeader, string(d.Secret))
		return h, nil
	case spec.AuthBearer:
		h.Set("Authorization", "Bearer "+string(d.Secret))
		return h, nil
	case spec.AuthBasic:
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(sc.user+":"+string(d.Secret))))
		return h, nil
	}
	ts := ""
	if sc.ts.Kind == spec.FromHeader || sc.ts.Kind == spec.FromSignature {
		if sc.tsMillis {
			ts = strconv.FormatInt(d.Time.UnixMilli(), 10)
		} else {
			ts = strconv.FormatInt(d.Time.Unix(), 10)
		}
		if sc.ts.Kind == spec.FromHeader {
			h.Set(sc.ts.Name, ts)
		}
	}
	uri := PathPrefix + src.Name
	if d.Tenant != "" {
		uri += "/" + d.Tenant
	}
	if d.Query != "" {
		uri += "?" + d.Query
	}
	rq := &request{h: h, raw: d.Body, body: d.Body, uri: uri, canons: newCanonPool(int64(len(d.Body)))}
	if h.Get("Content-Type") == "application/x-www-form-urlencoded" {
		if err := rq.readForm(sc.payload); err != nil {
			return nil, fmt.Errorf("ingress: %w", err)
		}
	}
	if sc.ts.Kind == spec.FromBody {
		if ts, _, err = rq.lookup(sc.ts); err != nil || ts == "" {
			return nil, fmt.Errorf("ingress: source %s signs the body's %s, which the payload lacks", src.Name, sc.ts.Name)
		}
	}
	if spec.Has(sc.parts, spec.ID) && d.ID == "" {
		return nil, fmt.Errorf("ingress: source %s signs the delivery id: give one", src.Name)
	}
	if spec.Has(sc.parts, spec.Form) && rq.form == nil {
		return nil, errors.New("ingress: a body that is not a form is signed through the URL's bodySHA256; sign a form body")
	}
	pieces, err := sc.signed(rq, ts)
	if err != nil {
		return nil, err
	}
	sig, err := sc.sign(d.Secret, slices.Concat(pieces...))
	if err != nil {
		return nil, err
	}
	v := sc.prefix + sc.enc.encode(sig)
	if sc.ts.Kind == spec.FromSignature {
		v = sc.ts.Name + ts + sc.sep + v
	}
	h.Set(sc.header, v)
	return h, nil
}

// sign signs msg with the source's secret (for ed25519, the private key).
func (sc *scheme) sign(secret, msg []byte) ([]byte, error) {
	key, err := decodeSecret(string(secret), sc.secretEncoding)
	if err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	if sc.newHash == nil {
		switch len(key) {
		case ed25519.SeedSize:
			key = ed25519.NewKeyFromSeed(key)
		case ed25519.PrivateKeySize:
		default:
			return nil, fmt.Errorf("ingress: an ed25519 private key is a %d-byte seed or a %d-byte key, got %d bytes", ed25519.SeedSize, ed25519.PrivateKeySize, len(key))
		}
		return ed25519.Sign(ed25519.PrivateKey(key), msg), nil
	}
	m := hmac.New(sc.newHash, key)
	m.Write(msg)
	return m.Sum(nil), nil
}

// firstHeader returns the first header in list.
func firstHeader(list []spec.From) (spec.From, bool) {
	for _, f := range list {
		if f.Kind == spec.FromHeader {
			return f, true
		}
	}
	return spec.From{}, false
}
