package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncegate/oncegate/internal/config"
)

// TestCheckModel: what needs a model (a model step, the proxy) has one
// only when llm.base_url names an endpoint or llm.standin asks for the
// stand-in by name; otherwise the error names what needs it and both ways
// to give it. Validate refuses both at once; the commands that call no
// model load the configuration all the same.
func TestCheckModel(t *testing.T) {
	for _, tt := range []struct {
		name    string
		yaml    string
		environ []string
		want    string // empty: nil
	}{
		{"built-in, no model", "", nil, "pipeline alerts needs a model"},
		{"built-in, the stand-in by name", "", []string{"ONCEGATE_LLM_STANDIN=true"}, ""},
		{"built-in, an endpoint", "", []string{"ONCEGATE_LLM_BASE_URL=http://127.0.0.1:11434/v1"}, ""},
		{"a gate, no model needed", "pipelines: [{name: hooks, subject: triggers.hooks, effect: {sink: jetstream, subject: effects.hooks}}]", nil, ""},
		{"the proxy alone", "proxy: {listen: 127.0.0.1:8081, keys_file: /k}", nil, "the proxy needs a model"},
		{"a step and the proxy", "proxy: {listen: 127.0.0.1:8081, keys_file: /k}\npipelines: [{name: a, subject: triggers.a, step: {name: s, prompt: p}, effect: {sink: jetstream, subject: effects.a}}]", nil, "pipeline a and the proxy need a model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var cfg *config.Config
			var err error
			if tt.yaml == "" {
				cfg = config.Default()
				err = cfg.LoadEnv(tt.environ)
			} else {
				cfg, err = config.ParseEnv([]byte(tt.yaml), "test.yaml", tt.environ)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.CheckModel()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckModel() = %v; want nil", err)
			case tt.want != "" && (!errors.Is(err, config.ErrMissing) || !strings.Contains(err.Error(), tt.want) ||
				!strings.Contains(err.Error(), "llm.base_url") || !strings.Contains(err.Error(), "llm.standin: true")):
				t.Errorf("CheckModel() = %v; want ErrMissing saying %q and both ways to give a model", err, tt.want)
			}
		})
	}
	_, err := config.ParseEnv([]byte("llm: {base_url: https://api.openai.com/v1, standin: true}"), "test.yaml", nil)
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "llm.standin") {
		t.Errorf("llm.base_url and llm.standin = %v; want ErrInvalid on llm.standin", err)
	}
}

// TestCheckAPIKey: an endpoint off this host needs its key's variable set
// (empty counts as set); one on loopback, or llm.api_key_env: "", needs
// none.
func TestCheckAPIKey(t *testing.T) {
	unset := func(string) (string, bool) { return "", false }
	empty := func(string) (string, bool) { return "", true }
	for _, tt := range []struct {
		url, keyEnv string
		lookup      config.LookupFunc
		bad         bool
	}{
		{"https://api.openai.com/v1", "OPENAI_API_KEY", unset, true},
		{"https://api.openai.com/v1", "OPENAI_API_KEY", empty, false},
		{"https://api.openai.com/v1", "", unset, false},
		{"http://127.0.0.1:11434/v1", "OPENAI_API_KEY", unset, false},
		{"http://localhost:8000/v1", "OPENAI_API_KEY", unset, false},
		{"http://[::1]:8000/v1", "OPENAI_API_KEY", unset, false},
		{"http://vllm.models.svc:8000/v1", "OPENAI_API_KEY", unset, true},
	} {
		cfg := config.Default()
		cfg.LLM.BaseURL, cfg.LLM.APIKeyEnv = tt.url, tt.keyEnv
		err := cfg.CheckAPIKey(tt.lookup)
		if bad := err != nil; bad != tt.bad || bad && (!errors.Is(err, config.ErrMissing) || !strings.Contains(err.Error(), "llm.api_key_env")) {
			t.Errorf("CheckAPIKey(%s, %q) = %v; want an error: %v", tt.url, tt.keyEnv, err, tt.bad)
		}
	}
}

// TestProxyAloneValid: no pipeline is valid with the proxy on, and only
// then; neither the ingress nor the console, which serve pipelines, come
// without one.
func TestProxyAloneValid(t *testing.T) {
	for _, tt := range []struct {
		yaml, want string // want empty: valid
	}{
		{"proxy: {listen: 127.0.0.1:8081, keys_file: /k}", ""},
		{"pipelines: []", "pipelines: at least one pipeline is required"},
		{"proxy: {listen: 127.0.0.1:8081, keys_file: /k}\ningress: {listen: 127.0.0.1:8080, sources: [{name: g, kind: github, subject: triggers.g, secret_env: G}]}", "ingress.listen"},
		{"proxy: {listen: 127.0.0.1:8081, keys_file: /k}\nconsole: {listen: 127.0.0.1:9465}", "console.listen"},
	} {
		_, err := config.ParseEnv([]byte(tt.yaml), "test.yaml", nil)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%q: %v; want %q", tt.yaml, err, tt.want)
		}
	}
}
