package consumer

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/ledger/badgerstore"
	"github.com/oncegate/oncegate/internal/natstest"
)

// diagram reads the chains doc.go draws, by the kind of gate: its stage
// names in order, a bracketed one (a fault point) marked optional.
func diagram(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chains := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "//\t")
		if !ok {
			continue
		}
		kind, chain, ok := strings.Cut(line, ":")
		if !ok || (kind != "pipeline" && kind != "dispatcher") {
			continue
		}
		for name := range strings.SplitSeq(chain, "→") {
			chains[kind] = append(chains[kind], strings.TrimSpace(name))
		}
	}
	if len(chains) != 2 {
		t.Fatalf("doc.go draws %d chains; want the pipeline's and the dispatcher's", len(chains))
	}
	return chains
}

// fits reports whether got, a gate's stage names, is drawn: the diagram's
// stages in its order, some left out (the ones a pipeline does not need,
// and the fault points a build does not arm).
func fits(got, drawn []string) bool {
	i := 0
	for _, name := range got {
		for i < len(drawn) && strings.Trim(drawn[i], "[]") != name {
			i++
		}
		if i == len(drawn) {
			return false
		}
		i++
	}
	return true
}

// TestChainDiagram: every kind of pipeline the configuration allows builds
// a chain that doc.go's diagram draws, in its order, and every stage the
// diagram draws (the fault points aside) is in some kind's chain. A stage
// added, renamed or moved without the diagram fails it.
func TestChainDiagram(t *testing.T) {
	drawn := diagram(t)
	kinds := []struct {
		name string
		edit func(p *config.Pipeline)
		// want are the chains the kind builds, the pipeline's and (with a
		// one-shot effect) its dispatcher's, without fault points.
		want, dispatch string
	}{
		{"a gate with a JetStream effect", func(p *config.Pipeline) {},
			"key window claim effect", ""},
		{"gate-window", func(p *config.Pipeline) { p.Mode = config.ModeGateWindow },
			"key window effect", ""},
		{"a model step", func(p *config.Pipeline) {
			p.Step = &config.Step{Name: "triage", Prompt: "{{.}}", Model: "m"}
			p.Mode = config.ModeFull
		}, "key window claim step effect", ""},
		{"a one-shot effect through the outbox", func(p *config.Pipeline) {
			p.Effect = config.Effect{Sink: config.SinkHTTP, URL: "http://127.0.0.1:1", Class: config.ClassOneShot}
		}, "key window claim effect", "key approval claim effect"},
		{"a one-shot effect with an approval", func(p *config.Pipeline) {
			p.Effect = config.Effect{Sink: config.SinkHTTP, URL: "http://127.0.0.1:1", Class: config.ClassOneShot, ApprovalSubject: "approve.x"}
		}, "key window claim effect", "key approval claim effect"},
		{"a templated effect (the last mile)", func(p *config.Pipeline) {
			p.Effect.Body = `{"k":"{{.key}}"}`
		}, "key window claim route effect", ""},
		{"an alert lifecycle: when, key.status, skip_when, routes, named effects", func(p *config.Pipeline) {
			p.Mode = config.ModeFull
			p.When = `trigger.sev != "info"`
			p.Key.Status = "/status"
			p.Step = &config.Step{Name: "triage", Prompt: "{{.}}", Model: "m", SkipWhen: `status == "resolved"`}
			p.Effect = config.Effect{}
			p.Effects = map[string]config.Effect{
				"page": {Sink: config.SinkHTTP, URL: "http://127.0.0.1:1", Class: config.ClassReplayable},
				"chat": {Sink: config.SinkHTTP, URL: "http://127.0.0.1:1", Class: config.ClassOneShot},
			}
			p.Routes = []config.Route{{Name: "critical", When: `trigger.sev == "critical"`, Effects: []string{"page"}}, {Name: "rest", Effects: []string{"chat"}}}
		}, "key filter window order claim recall step route effect", "key approval claim order-entries effect"},
	}
	s := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, s)
	db, err := badgerstore.Open(filepath.Join(t.TempDir(), "ledger"), badgerstore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	led, err := badgerstore.New(db, badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	seen := map[string]bool{}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			cfg := config.Default()
			p := cfg.Pipelines[1] // webhooks: a gate-ledger pipeline with a JetStream effect
			k.edit(&p)
			cfg.Pipelines = []config.Pipeline{p}
			c, err := New(Options{Config: cfg, Conn: nc, Ledger: led, Model: openai.NewClient("x")})
			if err != nil {
				t.Fatal(err)
			}
			check := func(kind string, g *gate, want string) {
				got := g.stageNames()
				for _, name := range got {
					seen[kind+" "+name] = true
				}
				if !fits(got, drawn[kind]) {
					t.Errorf("the %s's chain %q is not drawn in doc.go: %q", kind, got, drawn[kind])
				}
				if want != "" && strings.Join(got, " ") != want {
					t.Errorf("the %s's chain = %q; want %q", kind, strings.Join(got, " "), want)
				}
			}
			pl := c.pipes[0]
			check("pipeline", pl.gate, k.want)
			switch {
			case pl.dispatch != nil && k.dispatch == "":
				t.Errorf("a dispatcher; want none")
			case pl.dispatch == nil && k.dispatch != "":
				t.Errorf("no dispatcher; want one")
			case pl.dispatch != nil:
				check("dispatcher", pl.dispatch.gate, k.dispatch)
			}
		})
	}
	for kind, names := range drawn {
		for _, name := range names {
			if !strings.HasPrefix(name, "[") && !seen[kind+" "+name] {
				t.Errorf("doc.go draws %s in the %s's chain; no kind of pipeline has it", name, kind)
			}
		}
	}
}
