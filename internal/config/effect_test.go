package config

import (
	"testing"
	"time"
)

// TestEffectDefaults: the presets' rate limits are their receivers'
// quotas, every effect retries on its own schedule, and a resolve waits
// for its firing a minute by default.
func TestEffectDefaults(t *testing.T) {
	c, err := Parse([]byte(`
pipelines:
  - name: alerts
    subject: triggers.alerts
    key: {fields: [/alert/fingerprint], status: /status}
    effects:
      pd: {preset: pagerduty, routing_key_env: PD_KEY}
      chat: {preset: slack, url_env: SLACK_URL, digest: {window: 5s}}
      hook: {sink: http, url: "https://example.com/hook", rate_limit: {requests: 7}}
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := c.Pipelines[0]
	for name, want := range map[string]EffectRateLimit{
		"pd": {Requests: 120, Per: time.Minute}, "chat": {Requests: 20, Per: 20 * time.Second}, "hook": {Requests: 7, Per: time.Minute},
	} {
		e := p.Effects[name]
		if e.RateLimit != want {
			t.Errorf("effects[%s].rate_limit = %+v; want %+v", name, e.RateLimit, want)
		}
		if e.Retry != (EffectRetry{Backoff: DefaultEffectBackoff, MaxBackoff: DefaultEffectMaxBackoff}) {
			t.Errorf("effects[%s].retry = %+v; want the defaults", name, e.Retry)
		}
	}
	if g := p.Effects["chat"].Digest.Group; g != DefaultDigestGroup {
		t.Errorf("digest.group = %q; want %q", g, DefaultDigestGroup)
	}
	if p.Key.ResolveWait != DefaultResolveWait {
		t.Errorf("key.resolve_wait = %v; want %v", p.Key.ResolveWait, DefaultResolveWait)
	}
	r := EffectRetry{Backoff: time.Second, MaxBackoff: 4 * time.Second}
	for n, want := range map[int][2]time.Duration{1: {500 * time.Millisecond, time.Second}, 2: {time.Second, 2 * time.Second}, 5: {2 * time.Second, 4 * time.Second}} {
		if d := r.Delay(n); d < want[0] || d > want[1] {
			t.Errorf("Delay(%d) = %v; want in [%v, %v]", n, d, want[0], want[1])
		}
	}
}
