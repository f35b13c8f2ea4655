package app_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// The pipeline converters (consumer.KeySpec, consumer.StepTemplates) live
// with the consumer, which runs the pipelines and is below this package;
// their tests are here, with the other translations of the configuration.

// TestKeySpecCarriesEveryField: every setting of a pipeline's key section
// reaches dedupe.KeySpec (the scope and the hash as its PerRun and SHA256),
// or is the consumer's to read per trigger (the run id, the status, the
// resolve wait); a field added to the section fails here until it is
// given a place.
func TestKeySpecCarriesEveryField(t *testing.T) {
	perTrigger := map[string]bool{"RunIDField": true, "Status": true, "ResolveWait": true}
	p := config.Pipeline{Name: "orders", Step: &config.Step{Name: "triage"}}
	set := map[string]reflect.Value{}
	fillLeaves(t, reflect.ValueOf(&p.Key).Elem(), "", set)
	p.Key.Scope, p.Key.Hash = config.ScopeRun, config.HashSHA256
	ks := reflect.ValueOf(consumer.KeySpec(&p))
	for path, want := range set {
		switch {
		case perTrigger[path]:
			continue
		case path == "Scope":
			if !consumer.KeySpec(&p).PerRun {
				t.Errorf("KeySpec(scope %s).PerRun = false; want true", config.ScopeRun)
			}
			continue
		case path == "Hash":
			if !consumer.KeySpec(&p).SHA256 {
				t.Errorf("KeySpec(hash %s).SHA256 = false; want true", config.HashSHA256)
			}
			continue
		}
		got, ok := field(ks, path)
		if !ok {
			t.Errorf("config.Key.%s has no dedupe.KeySpec.%s: carry it, or say here why the consumer reads it itself", path, path)
			continue
		}
		if !sameValue(got, want) {
			t.Errorf("KeySpec: %s = %v; want %v", path, got, want)
		}
	}
	if ks := consumer.KeySpec(&p); ks.Pipeline != "orders" || ks.Step != "triage" {
		t.Errorf("KeySpec: pipeline %q, step %q; want orders, triage", ks.Pipeline, ks.Step)
	}
	gate := config.Pipeline{Name: "hooks"}
	if ks := consumer.KeySpec(&gate); ks.Step != "gate" || ks.PerRun || ks.SHA256 {
		t.Errorf("KeySpec(a gate pipeline) = step %q, per run %v, sha256 %v; want step gate, input scope, xxh", ks.Step, ks.PerRun, ks.SHA256)
	}
}

// TestValidKeysMakeKeyers: a key section Validate accepts makes a Keyer,
// and one dedupe.NewKeyer refuses is refused by Validate (at the pipeline's
// key), so that the configuration's checks, which no longer call the
// keyer, cover everything the keyer checks.
func TestValidKeysMakeKeyers(t *testing.T) {
	for _, key := range []string{
		`{fields: [/order]}`,
		`{fields: [/order, /customer], version: /rev}`,
		`{volatile: [/sent_at]}`,
		`{fields: [/order], volatile: [/sent_at]}`,
		`{fields: [order]}`,
		`{volatile: ["~2"]}`,
		`{fields: [/order], version: rev}`,
		`{fields: [/order], headers: [Oncegate-Event]}`,
		`{fields: [/order], headers: [Oncegate-Event, X-Tenant]}`,
		`{fields: [/order], headers: [Oncegate-Event, oncegate-event]}`,
		`{fields: [/order], headers: [X-Tenant, X-Tenant]}`,
		`{fields: [/order], headers: ["Bad Header"]}`,
		`{fields: [/order], headers: [""]}`,
		`{fields: [/order], scope: run, run_id_field: /run}`,
		`{fields: [/order], hash: sha256}`,
		`{fields: [/order], status: /status}`,
	} {
		doc := fmt.Sprintf(`
pipelines:
  - name: orders
    subject: triggers.orders
    key: %s
    effect: {sink: jetstream, subject: effects.orders}
`, key)
		cfg, err := config.Parse([]byte(doc), "keys.yaml")
		if cfg == nil {
			t.Fatalf("key %s: the document does not decode: %v", key, err)
		}
		refused := false
		var fe *config.FieldError
		for _, e := range unjoin(err) {
			if errors.As(e, &fe) && strings.HasPrefix(fe.Path, "pipelines[orders].key") {
				refused = true
			}
		}
		if !refused && err != nil {
			t.Fatalf("key %s: problems elsewhere: %v", key, err)
		}
		if _, kerr := dedupe.NewKeyer(consumer.KeySpec(&cfg.Pipelines[0])); kerr != nil && !refused {
			t.Errorf("key %s: Validate accepts it, NewKeyer refuses it: %v", key, kerr)
		}
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestDefaultKeysDeriveFromExample checks the alert pipeline's key spec
// against the example payloads: a re-delivery of the same alert occurrence
// (new delivery id and timestamp, reordered members) has the same key.
func TestDefaultKeysDeriveFromExample(t *testing.T) {
	first, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	retry, err := os.ReadFile("../../examples/alert-retry.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range config.Default().Pipelines {
		k, err := dedupe.NewKeyer(consumer.KeySpec(&p))
		if err != nil {
			t.Fatalf("pipeline %s: %v", p.Name, err)
		}
		i1, err := k.Intent(first)
		if err != nil {
			t.Fatalf("pipeline %s: Intent(alert.json) error = %v", p.Name, err)
		}
		i2, err := k.Intent(retry)
		if err != nil {
			t.Fatalf("pipeline %s: Intent(alert-retry.json) error = %v", p.Name, err)
		}
		if p.Name == "alerts" && i1.Key != i2.Key {
			t.Errorf("pipeline alerts: retry key %v != first key %v", i2.Key, i1.Key)
		}
	}
}

func TestDefaultPromptRenders(t *testing.T) {
	data, err := os.ReadFile("../../examples/alert.json")
	if err != nil {
		t.Fatal(err)
	}
	var trigger map[string]any
	if err := json.Unmarshal(data, &trigger); err != nil {
		t.Fatal(err)
	}
	tmpl, err := consumer.StepTemplates(config.Default().Pipelines[0].Step)
	if err != nil {
		t.Fatalf("StepTemplates() error = %v", err)
	}
	var b strings.Builder
	if err := tmpl.ExecuteTemplate(&b, "prompt", trigger); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DiskAlmostFull on db-2:9100 (severity page)", "occurrence 3", "https://runbooks.example/disk"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := tmpl.ExecuteTemplate(&b, "system", trigger); err != nil || !strings.Contains(b.String(), "site reliability") {
		t.Errorf("system template: %q, %v", b.String(), err)
	}
}
