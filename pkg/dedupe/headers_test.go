package dedupe_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/oncegate/oncegate/pkg/dedupe"
)

func TestHeaderIntent(t *testing.T) {
	spec := dedupe.KeySpec{Pipeline: "webhooks", Step: "gate", Volatile: []string{"/delivery_id"}}
	plain := mustKeyer(t, spec)
	spec.Headers = []string{"oncegate-event"}
	byEvent := mustKeyer(t, spec)
	payload := []byte(`{"delivery_id":"d-1","ref":"refs/heads/main","after":"0d1a26e6"}`)
	redelivery := []byte(`{"delivery_id":"d-2","ref":"refs/heads/main","after":"0d1a26e6"}`)
	h := func(ev string) func(string) string { return http.Header{"Oncegate-Event": {ev}}.Get }

	push, err := byEvent.HeaderIntent("", h("push"), payload)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := byEvent.HeaderIntent("", h("push"), redelivery)
	other, _ := byEvent.HeaderIntent("", h("create"), payload)
	without, _ := plain.Intent(payload)
	if push.Key != again.Key {
		t.Errorf("a redelivery (new delivery id, same event) got another key")
	}
	if push.Key == other.Key {
		t.Errorf("another event type with the same payload got the same key")
	}
	if push.Key == without.Key {
		t.Errorf("a spec with headers shares a key with the spec without")
	}
	if push.Fingerprint != without.Fingerprint {
		t.Errorf("the fingerprint depends on the headers; want the payload's alone")
	}
	if _, err := byEvent.HeaderIntent("", h(""), payload); !errors.Is(err, dedupe.ErrMissingHeader) {
		t.Errorf("without the header: %v; want ErrMissingHeader", err)
	}
	if _, err := byEvent.Intent(payload); !errors.Is(err, dedupe.ErrMissingHeader) {
		t.Errorf("Intent on a spec with headers: %v; want ErrMissingHeader", err)
	}
	// A spec without headers keys alike through either call.
	viaHeader, err := plain.HeaderIntent("", nil, payload)
	if err != nil || viaHeader != without {
		t.Errorf("HeaderIntent on a spec without headers = %v, %v; want %v", viaHeader, err, without)
	}
	for _, bad := range [][]string{{"Bad Header"}, {""}, {"X-A", "x-a"}} {
		if _, err := dedupe.NewKeyer(dedupe.KeySpec{Pipeline: "p", Step: "s", Headers: bad}); !errors.Is(err, dedupe.ErrInvalidKeySpec) {
			t.Errorf("NewKeyer(headers %q) error = %v; want ErrInvalidKeySpec", bad, err)
		}
	}
}
