package ingress

import (
	"encoding/json"
	"testing"

	"github.com/prometheus/common/model"
)

// TestAlertmanagerFingerprint: an alert that comes without its
// fingerprint gets the one Alertmanager gives it, prometheus/common's
// LabelSet.Fingerprint, so that a sender mixing notifications with and
// without the field gets one id for one alert. The expected values come
// from that library, not from the ingress.
func TestAlertmanagerFingerprint(t *testing.T) {
	sets := []model.LabelSet{
		{"alertname": "DiskAlmostFull", "instance": "db-2:9100", "job": "node", "severity": "page"},
		{"alertname": "Watchdog"},
		{"a": "b", "ab": ""},
		{"a": "bab", "aba": "b"},
		{"alertname": "HighLatency", "route": "/api/v1/ünïcødé", "le": "0.5"},
		{"__name__": "up", "instance": "10.0.0.1:9090", "job": "prometheus", "zone": "eu-west-1a"},
	}
	for _, ls := range sets {
		want := ls.Fingerprint().String()
		alert, _ := json.Marshal(map[string]any{"status": "firing", "labels": ls, "startsAt": "2026-11-29T07:09:03.118Z"})
		body := []byte(`{"version":"4","status":"firing","alerts":[` + string(alert) + `]}`)
		ts, err := splitAlerts(body)
		if err != nil {
			t.Fatalf("splitAlerts(%v): %v", ls, err)
		}
		var doc struct {
			Alert struct {
				Fingerprint string `json:"fingerprint"`
			} `json:"alert"`
		}
		if err := json.Unmarshal(ts[0].body, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Alert.Fingerprint != want {
			t.Errorf("the fingerprint derived for %v = %q; want %q (prometheus/common)", ls, doc.Alert.Fingerprint, want)
		}
		if got := ts[0].delivery; got != want+"/2026-11-29T07:09:03.118Z/firing" {
			t.Errorf("the delivery id for %v = %q; want it to start with %s", ls, got, want)
		}
	}
}

// FuzzSplitAlerts: splitting never panics, and every trigger it makes is
// a JSON object whose alert carries the fingerprint, status and startsAt
// of its delivery id, and whose status is the alert's.
func FuzzSplitAlerts(f *testing.F) {
	for _, s := range []string{
		`{"status":"firing","alerts":[{"status":"firing","labels":{"a":"b"},"startsAt":"2026-01-01T00:00:00Z"}]}`,
		`{"alerts":[{"status":"resolved","startsAt":"t","fingerprint":"ab","occurrence":"x"},{"startsAt":"t","status":"firing","labels":{"x":"y"}}],"groupKey":"{}"}`,
		`{"alerts":[{}]}`, `{"alerts":[]}`, `{"alerts":[1]}`, `{"alerts":[{"status":"firing","startsAt":"t","fingerprint":"f","status":"x"}]}`,
		`{ "alerts" : [ { "status" : "firing" , "startsAt" : "t" , "fingerprint" : "f" } ] , "alert" : 1 }`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ts, err := splitAlerts(body)
		if err != nil {
			return
		}
		for i, tr := range ts {
			var doc struct {
				Status string `json:"status"`
				Alert  struct {
					Status, StartsAt, Fingerprint string
				} `json:"alert"`
			}
			if err := json.Unmarshal(tr.body, &doc); err != nil {
				t.Fatalf("splitAlerts(%q) trigger %d is not JSON: %v\n%s", body, i, err, tr.body)
			}
			if want := doc.Alert.Fingerprint + "/" + doc.Alert.StartsAt + "/" + doc.Alert.Status; tr.delivery != want || doc.Status != doc.Alert.Status {
				t.Fatalf("splitAlerts(%q) trigger %d: id %q, status %q; the body says %q, %q\n%s", body, i, tr.delivery, doc.Status, want, doc.Alert.Status, tr.body)
			}
		}
	})
}
