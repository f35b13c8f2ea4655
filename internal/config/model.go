package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// ModelUsers lists what needs a model: "pipeline NAME" for each pipeline
// with a step, and "the proxy" when it is on. Empty, no model is called.
func (c *Config) ModelUsers() []string {
	var out []string
	for _, p := range c.Pipelines {
		if p.Step != nil {
			out = append(out, "pipeline "+p.Name)
		}
	}
	if c.ProxyOn() {
		out = append(out, "the proxy")
	}
	return out
}

// CheckModel returns nil if what needs a model has one: llm.base_url, or
// the stand-in model asked for by name (llm.standin). Otherwise it returns
// a *FieldError wrapping ErrMissing that names what needs the model and
// both ways to give one: Oncegate never answers a model step with the
// stand-in, which makes its answers up, unless it is asked to. The start
// and config check call it; Validate does not, so that the commands that
// call no model (key, inspect) load any configuration.
func (c *Config) CheckModel() error {
	users := c.ModelUsers()
	if len(users) == 0 || c.LLM.BaseURL != "" || c.LLM.Standin {
		return nil
	}
	who := strings.Join(users, ", ")
	if len(users) > 1 {
		who = strings.Join(users[:len(users)-1], ", ") + " and " + users[len(users)-1]
	}
	verb := "needs"
	if len(users) > 1 {
		verb = "need"
	}
	key := "its API key in $" + c.LLM.APIKeyEnv
	if c.LLM.APIKeyEnv == "" {
		key = "no API key: llm.api_key_env is empty"
	}
	return &FieldError{Path: "llm.base_url", Err: missing(
		"%s %s a model, and none is set: set llm.base_url to an OpenAI-compatible endpoint (%s), "+
			"or llm.standin: true (%s=true) to answer with the offline stand-in model, which makes its answers up",
		who, verb, key, EnvName("llm.standin"))}
}

// ModelEndpoint says in a few words which model answers: the endpoint
// (its URL redacted), the stand-in, or none.
func (c *Config) ModelEndpoint() string {
	switch {
	case c.LLM.BaseURL != "":
		return fmt.Sprintf("OpenAI-compatible endpoint %s", redactURL(c.LLM.BaseURL))
	case c.LLM.Standin:
		return "the offline stand-in model (llm.standin: its answers are made up)"
	}
	return "none (set llm.base_url, or llm.standin: true)"
}

// CheckAPIKey returns nil unless the model endpoint, llm.base_url, is off
// this host, something needs it, and the variable llm.api_key_env names is
// not set (lookup reads the environment; os.LookupEnv when nil): every
// call would then be refused. It returns a *FieldError wrapping ErrMissing
// that names the variable. An endpoint on loopback (a model server on
// this host) may take no key, and llm.api_key_env: "" says that one takes
// none; a variable set empty is set.
func (c *Config) CheckAPIKey(lookup LookupFunc) error {
	m := &c.LLM
	if m.BaseURL == "" || m.APIKeyEnv == "" || len(c.ModelUsers()) == 0 || onLoopback(m.BaseURL) {
		return nil
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if _, ok := lookup(m.APIKeyEnv); ok {
		return nil
	}
	return &FieldError{Path: "llm.api_key_env", Err: missing("environment variable %s is not set: the %s takes its API key from it "+
		"(for an endpoint that takes none, set llm.api_key_env: \"\")", m.APIKeyEnv, c.ModelEndpoint())}
}

// onLoopback reports whether the URL's host is a loopback address or
// localhost.
func onLoopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
