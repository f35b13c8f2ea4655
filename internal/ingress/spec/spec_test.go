package spec

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the parts, written back
		wantErr bool
	}{
		{"", "{body}", false},
		{"{body}", "{body}", false},
		{"v0:{timestamp}:{body}", "'v0:'{timestamp}':'{body}", false},
		{"{id}.{timestamp}.{body}", "{id}'.'{timestamp}'.'{body}", false},
		{"{url}{form}", "{url}{form}", false},
		{"{header:X-Request-Id}|{body}", "{header:X-Request-Id}'|'{body}", false},
		{"{{literal}}{body}", "'{literal}'{body}", false},
		{"{bdy}", "", true},
		{"{body", "", true},
		{"{header:}", "", true},
		{"{header:Bad Name}", "", true},
	}
	for _, tt := range tests {
		parts, err := ParseTemplate(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseTemplate(%q) error = %v; want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Errorf("ParseTemplate(%q) error %v does not wrap ErrTemplate", tt.in, err)
			}
			continue
		}
		if got := write(parts); got != tt.want {
			t.Errorf("ParseTemplate(%q) = %s; want %s", tt.in, got, tt.want)
		}
	}
}

// write writes parts back as a template, literals quoted.
func write(parts []Part) string {
	var b strings.Builder
	for _, p := range parts {
		switch p.Kind {
		case Literal:
			b.WriteString("'" + p.Text + "'")
		case Body:
			b.WriteString("{body}")
		case Timestamp:
			b.WriteString("{timestamp}")
		case ID:
			b.WriteString("{id}")
		case URL:
			b.WriteString("{url}")
		case Form:
			b.WriteString("{form}")
		case Header:
			b.WriteString("{header:" + p.Text + "}")
		}
	}
	return b.String()
}

func TestParseFromAndCovered(t *testing.T) {
	slack, _ := ParseTemplate("v0:{timestamp}:{body}")
	standard, _ := ParseTemplate("{id}.{timestamp}.{body}")
	named, _ := ParseTemplate("{header:X-Delivery}{body}")
	tests := []struct {
		from     string
		parts    []Part
		delivery bool
		covered  bool
	}{
		{"header:X-GitHub-Delivery", nil, true, false},
		{"header:X-GitHub-Delivery", slack, true, false},
		{"header:Webhook-Id", standard, true, true},
		{"header:Webhook-Id", standard, false, false}, // {id} covers the delivery id only
		{"header:x-delivery", named, true, true},
		{"body:/event_id", slack, true, true},
		{"body:/alert/fingerprint", nil, true, true}, // a function of the body
		{"digest", nil, true, true},
	}
	for _, tt := range tests {
		f, err := ParseFrom(tt.from)
		if err != nil {
			t.Fatalf("ParseFrom(%q): %v", tt.from, err)
		}
		if f.String() != tt.from {
			t.Errorf("ParseFrom(%q).String() = %q", tt.from, f.String())
		}
		if got := Covered(tt.parts, f, tt.delivery); got != tt.covered {
			t.Errorf("Covered(%s, %s, delivery %v) = %v; want %v", write(tt.parts), tt.from, tt.delivery, got, tt.covered)
		}
	}
	for _, bad := range []string{"", "header:", "header:a b", "body:", "body:event_id", "body:/a~2", "digest:x", "signature:", "cookie:x"} {
		if _, err := ParseFrom(bad); !errors.Is(err, ErrFrom) {
			t.Errorf("ParseFrom(%q) error = %v; want ErrFrom", bad, err)
		}
	}
	ts, _ := ParseFrom("body:/webhookTimestamp")
	if !TimestampCovered([]Part{{Kind: Body}}, ts) {
		t.Error("a timestamp in a signed body is covered")
	}
	sentry, _ := ParseFrom("header:Sentry-Hook-Timestamp")
	if TimestampCovered([]Part{{Kind: Body}}, sentry) {
		t.Error("a timestamp header outside the signed string is not covered")
	}
}

// Every preset's scheme parses, and its ids come from places that parse.
func TestPresets(t *testing.T) {
	for _, k := range Kinds() {
		p, _ := Lookup(k)
		if p.Signature.Header != "" {
			if _, err := ParseTemplate(p.Signature.Signed); err != nil {
				t.Errorf("%s: %v", k, err)
			}
		}
		for _, f := range append(append([]string{}, p.Delivery...), p.Event...) {
			if _, err := ParseFrom(f); err != nil {
				t.Errorf("%s: %v", k, err)
			}
		}
		if p.Auth == "" || (p.Auth == AuthSignature) != (p.Signature.Header != "") {
			t.Errorf("%s: auth %q with signature header %q", k, p.Auth, p.Signature.Header)
		}
		if k != "hmac" && !strings.HasPrefix(p.Doc, "https://") {
			t.Errorf("%s: no documentation URL", k)
		}
	}
}

// FuzzParseTemplate: the template parser never panics, fails only with
// ErrTemplate, and what it accepts writes back to a template that parses
// to the same parts.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"", "{body}", "v0:{timestamp}:{body}", "{id}.{timestamp}.{body}", "{url}{form}", "{header:X-A}{body}", "{{", "}}", "{", "}{", "{header:}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		parts, err := ParseTemplate(in)
		if err != nil {
			if !errors.Is(err, ErrTemplate) {
				t.Fatalf("ParseTemplate(%q) error %v does not wrap ErrTemplate", in, err)
			}
			return
		}
		var b strings.Builder
		for _, p := range parts {
			switch p.Kind {
			case Literal:
				b.WriteString(strings.NewReplacer("{", "{{", "}", "}}").Replace(p.Text))
			case Header:
				b.WriteString("{header:" + p.Text + "}")
			default:
				b.WriteString(map[PartKind]string{Body: "{body}", Timestamp: "{timestamp}", ID: "{id}", URL: "{url}", Form: "{form}"}[p.Kind])
			}
		}
		again, err := ParseTemplate(b.String())
		if err != nil || write(again) != write(parts) {
			t.Fatalf("ParseTemplate(%q) = %s; written back %q parses to %s (%v)", in, write(parts), b.String(), write(again), err)
		}
	})
}
