package config

import (
	"strings"
	"testing"
	"time"
)

func TestRateLimitDefaultIsOff(t *testing.T) {
	c := Default()
	r := c.LLM.RateLimit
	if r.On() || r.CompletionTokens != DefaultRateLimitCompletionTokens || r.MaxWait != c.LLM.Timeout/2 {
		t.Fatalf("default rate_limit = %+v; want off, 256 completion tokens, max_wait half of llm.timeout", r)
	}
	// max_wait follows llm.timeout, and the environment turns it on.
	if err := c.LoadEnv([]string{"ONCEGATE_LLM_TIMEOUT=20s", "ONCEGATE_LLM_RATE_LIMIT_REQUESTS_PER_MINUTE=500"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := c.LLM.RateLimit; !r.On() || r.RequestsPerMinute != 500 || r.MaxWait != 10*time.Second {
		t.Fatalf("after the environment: %+v; want on at 500/min, max_wait 10s", r)
	}

	// Off, max_wait is not checked: Go code may shorten llm.timeout after
	// the defaults were filled in (the demo does).
	c = Default()
	c.LLM.Timeout = 2 * time.Second
	if err := c.Validate(); err != nil {
		t.Fatalf("rate limit off, llm.timeout shortened in Go: %v", err)
	}
	c.LLM.RateLimit.RequestsPerMinute = 6000
	if err := c.Validate(); err == nil {
		t.Fatal("rate limit on with max_wait 30s and llm.timeout 2s: no error")
	}
}

func TestRateLimitParse(t *testing.T) {
	const base = `
pipelines:
  - name: hooks
    subject: triggers.webhooks
    effect: {sink: jetstream, subject: effects.webhooks}
  - name: alerts
    subject: triggers.alerts
    step: {name: triage, prompt: "Triage {{.alert}}"}
    effect: {sink: jetstream, subject: effects.alerts}
llm:
  timeout: 40s
  rate_limit:
`
	c, err := Parse([]byte(base+"    requests_per_minute: 6000\n    tokens_per_minute: 2000000\n    max_wait: 15s\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.LLM.RateLimit; r.RequestsPerMinute != 6000 || r.TokensPerMinute != 2e6 || r.MaxWait != 15*time.Second || r.CompletionTokens != 256 {
		t.Fatalf("rate_limit = %+v", r)
	}

	tests := []struct {
		name, yaml, wantPath string
		wantErr              error
	}{
		{"unknown key", "    requests_per_second: 5\n", "llm.rate_limit.requests_per_second", ErrUnknownKey},
		{"negative requests", "    requests_per_minute: -1\n", "llm.rate_limit.requests_per_minute", ErrInvalid},
		{"negative tokens", "    tokens_per_minute: -10\n", "llm.rate_limit.tokens_per_minute", ErrInvalid},
		{"negative completion", "    completion_tokens: -1\n", "llm.rate_limit.completion_tokens", ErrInvalid},
		{"zero wait", "    requests_per_minute: 5\n    max_wait: 0s\n", "llm.rate_limit.max_wait", ErrInvalid},
		{"wait past the timeout", "    requests_per_minute: 5\n    max_wait: 40s\n", "llm.rate_limit.max_wait", ErrInvalid},
		{"too little wait for the triggers in flight", "    requests_per_minute: 60\n    max_wait: 30s\n", "llm.rate_limit.max_wait", ErrInvalid},
		{"not a number", "    requests_per_minute: lots\n", "llm.rate_limit.requests_per_minute", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(base+tt.yaml), "t.yaml")
			if err == nil {
				t.Fatal("no error")
			}
			fe := findError(t, err, tt.wantPath, tt.wantErr)
			if fe.Line == 0 {
				t.Errorf("error %v names no line", fe)
			}
		})
	}
}

func TestRateLimitExplained(t *testing.T) {
	c := Default()
	explain := func() string {
		var b strings.Builder
		if err := c.Explain(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got := explain(); !strings.Contains(got, "llm rate limit   off") {
		t.Errorf("explanation of the default has no rate limit row saying off:\n%s", got)
	}
	if err := c.LoadEnv([]string{"ONCEGATE_LLM_RATE_LIMIT_TOKENS_PER_MINUTE=90000"}); err != nil {
		t.Fatal(err)
	}
	if got := explain(); !strings.Contains(got, "no request budget (default); 90000 tokens/min; completion allowance 256 (default); max wait 30s (default)") {
		t.Errorf("explanation with a token budget:\n%s", got)
	}
}
