package ingress_test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ingress"
	"github.com/oncegate/oncegate/internal/ingress/spec"
)

// githubInYAML re-creates GitHub's scheme in configuration only, without
// the github kind: a new provider is a few lines of YAML.
const githubInYAML = `
pipelines:
  - name: hooks
    subject: triggers.webhooks
    effect: {sink: jetstream, subject: effects.webhooks}
ingress:
  sources:
    - name: github
      kind: github
      secret_env: GH_SECRET
      subject: triggers.webhooks
    - name: gh-yaml
      secret_env: GH_SECRET
      subject: triggers.webhooks
      signature:
        header: X-Hub-Signature-256
        prefix: "sha256="
        # algorithm: hmac-sha256, encoding: hex and signed: "{body}" are the defaults
      delivery: [header:X-GitHub-Delivery]
      event: [header:X-GitHub-Event]
      handshake: {event: ping}
`

// TestGitHubSchemeInYAML: a source that spells GitHub's scheme out in YAML
// answers every GitHub fixture exactly as the github kind does (status,
// answer, outcome) and stores the same triggers under the same ids: the
// push, the ping, the provider's retry, a tampered body, another secret, a
// missing or malformed signature, a missing delivery id, and an old body
// replayed under the next delivery id.
func TestGitHubSchemeInYAML(t *testing.T) {
	cfg, err := config.Parse([]byte(githubInYAML), "oncegate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *ingress.Options) { c.Sources = cfg.Ingress.Sources })
	push := fixture(t, "github-push.json")
	ping := fixture(t, "github-ping.json")
	old := bytes.Replace(push, []byte(`"ref": "refs/heads/main"`), []byte(`"ref": "refs/heads/old"`), 1)
	sign := func(body []byte, secret, id, event string) http.Header {
		h, err := ingress.Sign(spec.Source{Name: "github", Kind: "github"}, []byte(secret), body, e.now, id, event)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	edit := func(h http.Header, k, v string) http.Header {
		h = h.Clone()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	good := secrets["GH_SECRET"]
	steps := []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"push", sign(push, good, "d-1", "push"), push},
		{"the provider's retry", sign(push, good, "d-1", "push"), push},
		{"ping", sign(ping, good, "d-ping", "ping"), ping},
		{"tampered body", sign(push, good, "d-2", "push"), append([]byte(" "), push...)},
		{"another secret", sign(push, "not the secret", "d-3", "push"), push},
		{"no signature", edit(sign(push, good, "d-4", "push"), ingress.HeaderGitHubSignature, ""), push},
		{"sha1 signature", edit(sign(push, good, "d-5", "push"), ingress.HeaderGitHubSignature, "sha1=0a4d55a8d778e5022fab701977c5d840bbc486d0"), push},
		{"upper-case hex", edit(sign(push, good, "d-6", "push"), ingress.HeaderGitHubSignature, "sha256="+strings.ToUpper(strings.TrimPrefix(sign(push, good, "d-6", "push").Get(ingress.HeaderGitHubSignature), "sha256="))), push},
		{"no delivery id", edit(sign(push, good, "d-7", "push"), ingress.HeaderGitHubDelivery, ""), push},
		{"an old body under the next delivery id", sign(old, good, "d-8", "push"), old},
		{"the real next delivery", sign(push, good, "d-8", "push"), push},
		{"an old body as another event", sign(old, good, "d-8", "release"), old},
	}
	for _, st := range steps {
		var answers [2]string
		for i, src := range []string{"github", "gh-yaml"} {
			status, _, answer := e.post(src, st.h, st.body)
			answers[i] = strconv.Itoa(status) + " " + strings.TrimSpace(answer)
		}
		if answers[0] != answers[1] {
			t.Errorf("%s: the github kind answered %s; the YAML scheme %s", st.name, answers[0], answers[1])
		} else {
			t.Logf("%s: both %s", st.name, answers[0])
		}
	}
	ids := map[string][]string{}
	for _, m := range e.messages() {
		src, id, _ := strings.Cut(m.Header.Get(nats.MsgIdHdr), ":")
		ids[src] = append(ids[src], id+" "+m.Header.Get(ingress.HeaderEvent)+" "+string(m.Data[:16]))
	}
	if len(ids["github"]) == 0 || strings.Join(ids["github"], "\n") != strings.Join(ids["gh-yaml"], "\n") {
		t.Errorf("the stream holds, for the github kind:\n%s\nand for the YAML scheme:\n%s", strings.Join(ids["github"], "\n"), strings.Join(ids["gh-yaml"], "\n"))
	}
	for _, o := range []ingress.Outcome{ingress.OutcomeStored, ingress.OutcomeDuplicate, ingress.OutcomePing, ingress.OutcomeBadSignature,
		ingress.OutcomeNoSignature, ingress.OutcomeBadRequest} {
		if a, b := e.outcome("github", o), e.outcome("gh-yaml", o); a != b || a == 0 {
			t.Errorf("outcome %s: github %v, YAML %v; want equal and not zero", o, a, b)
		}
	}
}
