package sink_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/receiver"
	"github.com/oncegate/oncegate/internal/sink"
	"github.com/oncegate/oncegate/internal/tmpl"
)

// alertData is the data value of a firing (or, with status "resolved",
// its resolve) of one alert, with a structured answer.
func alertData(t *testing.T, status string) map[string]any {
	t.Helper()
	trig, err := tmpl.DecodeJSON([]byte(`{"status":"` + status + `","alert":{"fingerprint":"c1d7b5e2a9f04417","labels":{"alertname":"DiskAlmostFull","instance":"db-2:9100","severity":"page"},"annotations":{"summary":"Disk 93% full","runbook":"https://runbooks.example/disk"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	in := tmpl.Input{Trigger: trig, Key: key1, Identity: "9f86d081884c7d659a2feaa0c55ad015", Status: status, Pipeline: "alerts", Step: "triage"}
	if status != "resolved" {
		in.Answer = &tmpl.Answer{Text: `{"severity":"critical","summary":"the disk fills"}`, Fields: map[string]any{"severity": "critical", "summary": "the disk fills"}, Model: "m"}
	}
	return in.Data()
}

func render(t *testing.T, o sink.TemplateOptions, data map[string]any) []byte {
	t.Helper()
	tp, err := sink.NewTemplate(o)
	if err != nil {
		t.Fatalf("NewTemplate(%+v): %v", o, err)
	}
	body, _, err := tp.Render(data)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return body
}

func TestPresetSlack(t *testing.T) {
	slack := receiver.NewSlack("/services/T0123/B0456/Xk3v9QmZp2Lr8sWd7fGh")
	ts := newServer(t, slack)
	url := ts.URL + slack.Path
	s, _ := newHTTPSink(t, sink.HTTPOptions{URL: url, OneShot: true, SecretURL: true}, false)
	o := sink.TemplateOptions{Name: "effects[slack]", Preset: sink.PresetSlack, Fields: sink.PresetFields{
		Text: `*{{.trigger.alert.labels.alertname}}* on {{.trigger.alert.labels.instance}}: {{.answer.summary}}`,
		Link: `{{.trigger.alert.annotations.runbook}}`,
	}}
	res, err := s.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, o, alertData(t, "firing"))})
	if err != nil || res.Status != 200 || string(res.Body) != "ok" {
		t.Fatalf("Deliver = %+v, %v; want 200 ok", res, err)
	}
	msgs := slack.Messages()
	if len(msgs) != 1 || msgs[0].Text != "*DiskAlmostFull* on db-2:9100: the disk fills" || len(msgs[0].Blocks) != 2 {
		t.Fatalf("Slack got %+v; want one message with the text and 2 blocks", msgs)
	}
	if ua := msgs[0].UserAgent; !strings.HasPrefix(ua, "oncegate/") {
		t.Errorf("User-Agent = %q; want oncegate/<version>", ua)
	}

	// A body Slack refuses: the error quotes Slack's answer and not the URL.
	bad := sink.TemplateOptions{Name: "effects[slack]", Body: `{"text":{{len .key}}}`, JSON: true}
	_, err = s.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, bad, alertData(t, "firing"))})
	checkClass(t, "Deliver(text not a string)", err, "permanent")
	if msg := err.Error(); !strings.Contains(msg, "400 Bad Request: invalid_payload") || strings.Contains(msg, "Xk3v9QmZp2Lr8sWd7fGh") || strings.Contains(msg, "B0456") {
		t.Errorf("error %q; want Slack's invalid_payload and no part of the webhook URL's path", msg)
	}
	_, err = s.Deliver(t.Context(), sink.Effect{Key: key1, Body: []byte(`{"blocks":[]}`)})
	if err == nil || !strings.Contains(err.Error(), "no_text") {
		t.Errorf("Deliver(no text) error %v; want no_text", err)
	}
}

func TestPresetPagerDuty(t *testing.T) {
	const routingKey = "R0123456789abcdef0123456789abcde"
	pd := receiver.NewPagerDuty(routingKey)
	ts := newServer(t, pd)
	s, waits := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL + "/v2/enqueue", BodyFields: map[string]string{"routing_key": routingKey}}, false)
	o := sink.TemplateOptions{Name: "effects[pagerduty]", Preset: sink.PresetPagerDuty, Fields: sink.PresetFields{
		Summary: `{{.trigger.alert.labels.alertname}} on {{.trigger.alert.labels.instance}}: {{.answer.summary}} {{truncate 2000 (printf "%0900d%0900d" 1 2)}}`,
	}}
	firing := render(t, o, alertData(t, "firing"))
	if strings.Contains(string(firing), routingKey) {
		t.Fatalf("the rendered body holds the routing key: %s", firing)
	}
	// A 429 first: the sink waits the Retry-After and sends again.
	pd.Fail(1, 429, 3*time.Second)
	res, err := s.Deliver(t.Context(), sink.Effect{Key: key1, Body: firing})
	if err != nil || res.Status != 202 || res.Attempts != 2 {
		t.Fatalf("Deliver(trigger) = %+v, %v; want 202 after 2 attempts", res, err)
	}
	if len(*waits) != 1 || (*waits)[0] != 3*time.Second {
		t.Errorf("waits %v; want the 429's Retry-After, 3s", *waits)
	}
	var ack struct{ Status, DedupKey string }
	json.Unmarshal(res.Body, &struct {
		Status   *string `json:"status"`
		DedupKey *string `json:"dedup_key"`
	}{&ack.Status, &ack.DedupKey})
	identity := "9f86d081884c7d659a2feaa0c55ad015"
	if ack.Status != "success" || ack.DedupKey != identity || !pd.IsOpen(identity) {
		t.Fatalf("answer %s; want success with dedup_key %s, the alert open", res.Body, identity)
	}
	ev := pd.Events()[0]
	if ev.Severity != "critical" || len(ev.Summary) > 1024 {
		t.Errorf("event severity %q, summary of %d bytes; want critical (from page), at most 1024", ev.Severity, len(ev.Summary))
	}

	// The resolve of the same alert, another intent key, closes it.
	res, err = s.Deliver(t.Context(), sink.Effect{Key: key2, Body: render(t, o, alertData(t, "resolved"))})
	if err != nil || res.Status != 202 {
		t.Fatalf("Deliver(resolve) = %+v, %v; want 202", res, err)
	}
	if st := pd.Stats(); st.Opened != 1 || st.Resolved != 1 || st.Open != 0 || st.Dropped != 0 {
		t.Errorf("PagerDuty %+v; want one alert opened and resolved", st)
	}

	// A summary left empty is an invalid event, permanent, and the error says
	// why.
	o.Fields.Summary = `{{if false}}x{{end}}`
	_, err = s.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, o, alertData(t, "firing"))})
	checkClass(t, "Deliver(empty summary)", err, "permanent")
	if msg := err.Error(); !strings.Contains(msg, "Event object is invalid") || !strings.Contains(msg, "payload.summary") || strings.Contains(msg, routingKey) {
		t.Errorf("error %q; want PagerDuty's invalid event naming payload.summary, without the routing key", msg)
	}
}

func TestPresetJira(t *testing.T) {
	jira := receiver.NewJira("ops@example.com", "atl_t0ken_s3cret", "OPS")
	ts := newServer(t, jira)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops@example.com:atl_t0ken_s3cret"))
	s, _ := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL + "/rest/api/3/issue", OneShot: true, Header: map[string]string{"Authorization": auth}}, false)
	o := sink.TemplateOptions{Name: "effects[jira]", Preset: sink.PresetJira, Fields: sink.PresetFields{
		Project: "OPS", IssueType: "Bug",
		Summary: `Dispute on {{.trigger.alert.labels.instance}}`,
		Text:    "First line\nsecond line\n\n{{.answer.summary}}",
	}}
	res, err := s.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, o, alertData(t, "firing"))})
	if err != nil || res.Status != 201 || !strings.Contains(string(res.Body), `"key":"OPS-1"`) {
		t.Fatalf("Deliver = %+v (%s), %v; want 201 with the issue key OPS-1", res, res.Body, err)
	}
	is := jira.Issues()
	if len(is) != 1 || is[0].IssueType != "Bug" || is[0].Summary != "Dispute on db-2:9100" {
		t.Fatalf("Jira issues %+v", is)
	}

	o.Fields.Project = "NOPE"
	_, err = s.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, o, alertData(t, "firing"))})
	checkClass(t, "Deliver(unknown project)", err, "permanent")
	if msg := err.Error(); !strings.Contains(msg, "valid project is required") {
		t.Errorf("error %q; want Jira's errors by field", msg)
	}

	// Without the credentials: 401, and the error does not show them.
	s2, _ := newHTTPSink(t, sink.HTTPOptions{URL: ts.URL + "/rest/api/3/issue", OneShot: true, Header: map[string]string{"Authorization": "Basic bm9wZTpub3Bl"}}, false)
	_, err = s2.Deliver(t.Context(), sink.Effect{Key: key1, Body: render(t, o, alertData(t, "firing"))})
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "bm9wZTpub3Bl") {
		t.Errorf("Deliver(wrong credentials) error %v; want a 401 without the credentials", err)
	}
}

func TestPresetWebhookIsTheEnvelope(t *testing.T) {
	body := render(t, sink.TemplateOptions{Name: "e", Preset: sink.PresetWebhook}, alertData(t, "firing"))
	var env struct {
		Key, Pipeline, Step, Model, Answer string
		Trigger                            map[string]any
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Key != key1 || env.Pipeline != "alerts" || env.Step != "triage" || env.Trigger["status"] != "firing" {
		t.Fatalf("webhook body %s (%v); want the envelope", body, err)
	}
}

func TestTemplateErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    sink.TemplateOptions
		want string
	}{
		{"unknown preset", sink.TemplateOptions{Name: "e", Preset: "teams"}, `unknown preset "teams"`},
		{"field of another preset", sink.TemplateOptions{Name: "e", Preset: sink.PresetSlack, Fields: sink.PresetFields{DedupKey: "x"}}, "preset slack has no field dedup_key"},
		{"does not parse", sink.TemplateOptions{Name: "e", Body: "{{.key"}, "e.body"},
	} {
		if _, err := sink.NewTemplate(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: NewTemplate = %v; want an error with %q", tt.name, err, tt.want)
		}
	}
	// A missing key fails the render, with nothing rendered.
	tp, err := sink.NewTemplate(sink.TemplateOptions{Name: "e", Preset: sink.PresetSlack, Fields: sink.PresetFields{Text: "{{.trigger.alert.labels.team}}"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := tp.Render(alertData(t, "firing"))
	if body != nil || !errors.Is(err, tmpl.ErrTemplate) || !strings.Contains(err.Error(), `e.text`) {
		t.Errorf("Render = %q, %v; want nothing and a template error naming e.text", body, err)
	}
}
