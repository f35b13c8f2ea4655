package config

import (
	"os"
	"reflect"
	"testing"

	"github.com/goccy/go-yaml"
)

// FuzzParse checks that no document makes Parse panic, and that a document
// Parse accepts stays accepted: it re-validates, it explains, and written
// back out as YAML it parses to the same configuration.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../examples/oncegate.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(defaultYAML))
	f.Add([]byte(minimal))
	f.Add([]byte(envDoc))
	f.Add([]byte("pipelines:\n  - &p {name: a, subject: triggers.a, effect: {sink: jetstream, subject: e.a}}\n  - <<: *p\n    name: b\n"))
	f.Add([]byte("ledger: {retention: 1h}\npipelines: [{name: a, subject: triggers.a, backoff: [1s, 2s], ack_wait: 1s, effect: {sink: file, dir: /x}}]\n"))
	f.Add([]byte("nats:\n  password: x\n"))
	f.Add([]byte("a: [1, 2\n"))
	f.Add([]byte("- 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			fieldErrors(t, err) // every problem is a *FieldError
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted config does not re-validate: %v", err)
		}
		if err := c.Explain(discard{}); err != nil {
			t.Fatalf("Explain error = %v", err)
		}
		out, err := yaml.Marshal(stripMeta(c))
		if err != nil {
			t.Fatalf("yaml.Marshal error = %v", err)
		}
		c2, err := Parse(out, "roundtrip.yaml")
		if err != nil {
			t.Fatalf("accepted config written out does not parse: %v\n%s", err, out)
		}
		if got, want := stripMeta(c2), stripMeta(c); !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip changed the config:\n got  %+v\n want %+v\n%s", got, want, out)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
