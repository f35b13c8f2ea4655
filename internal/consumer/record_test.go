package consumer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/internal/standin"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// refuseFirstCommit refuses the first commit of every key, as a ledger
// that fails after the effect went out: the work's claim runs out and a
// later delivery takes it over.
type refuseFirstCommit struct {
	ledger.Ledger
	mu      sync.Mutex
	refused map[dedupe.Key]bool
}

func (l *refuseFirstCommit) Commit(ctx context.Context, k dedupe.Key, token uint64, r ledger.Result) error {
	l.mu.Lock()
	first := !l.refused[k]
	l.refused[k] = true
	l.mu.Unlock()
	if first {
		return errLedgerDown
	}
	return l.Ledger.Commit(ctx, k, token, r)
}

// TestAnswerKeptInTheRecord: a model step's answer is kept in its intent's
// ledger record before the effect, and the LLM cache's store is not
// written. Each alert's first commit is refused, so each is taken over
// by a later delivery after its effect went out: the takeover takes the
// answer from the record, and the model is called once per alert.
func TestAnswerKeptInTheRecord(t *testing.T) {
	const alerts = 5
	l := &refuseFirstCommit{refused: map[dedupe.Key]bool{}}
	f := start(t, func(c *config.Config) {
		c.Ledger.Lease = time.Second
		c.Pipelines[0].MaxDeliver = 10
	}, standin.Options{}, func(o *consumer.Options) { l.Ledger = o.Ledger; o.Ledger = l })
	for i := range alerts {
		f.publish("triggers.alerts", alert(fmt.Sprintf("rec%02d", i), 1, 0))
	}
	waitFor(t, 60*time.Second, "every alert committed after a takeover", func() bool {
		s := f.stats("alerts")
		return s.TakenOver == alerts && settled(s) == alerts
	}, f)

	if got := f.model.Stats().Completions; got != alerts {
		t.Errorf("model calls = %d; want %d (one per alert, the takeovers answered from the record)", got, alerts)
	}
	effects := f.streamMsgs("ONCEGATE_EFFECTS", "effects.alerts")
	if len(effects) != alerts {
		t.Fatalf("%d effects; want %d", len(effects), alerts)
	}
	for _, m := range effects {
		var e struct{ Key, Answer string }
		if err := json.Unmarshal(m.Data(), &e); err != nil {
			t.Fatal(err)
		}
		k, err := dedupe.ParseKey(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := f.ledger.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		var note struct {
			Answers []struct{ Text string }
		}
		if err := json.Unmarshal(rec.Note, &note); err != nil {
			t.Fatalf("record of %s: note %q: %v", k, rec.Note, err)
		}
		if rec.State != ledger.StateCommitted || rec.Attempts != 2 || len(note.Answers) != 1 || note.Answers[0].Text != e.Answer {
			t.Errorf("record of %s: %v after %d attempts, note %q; want committed after 2, with the effect's answer %q", k, rec.State, rec.Attempts, rec.Note, e.Answer)
		}
	}
	for _, s := range llmhook.Stats(f.cache) {
		if s.Step != "" && (s.Stored != 0 || s.Hits != 0 || s.Misses != 0 || s.Bypassed != alerts) {
			t.Errorf("cache stats of %s/%s: %d stored, %d hits, %d misses, %d past the store; want nothing stored or read, %d past the store",
				s.Namespace, s.Step, s.Stored, s.Hits, s.Misses, s.Bypassed, alerts)
		}
	}
}

// TestSharedAnswerAcrossIntents: with llm.cache.share, the step's calls go
// through the cache keyed by the rendered prompt: two alerts that render
// the same prompt (their distinct fields are not in it) share one answer,
// and each intent's record keeps it.
func TestSharedAnswerAcrossIntents(t *testing.T) {
	f := start(t, func(c *config.Config) {
		c.LLM.Cache.Share = true
		c.Pipelines[0].Step.Prompt = "Triage a {{.alert.labels.alertname}} alert."
		c.Pipelines[0].Step.System = ""
	}, standin.Options{})
	f.publish("triggers.alerts", alert("sharedA", 1, 0))
	waitFor(t, 20*time.Second, "the first alert", func() bool { return settled(f.stats("alerts")) == 1 }, f)
	f.publish("triggers.alerts", alert("sharedB", 1, 0))
	waitFor(t, 20*time.Second, "the second alert", func() bool { return settled(f.stats("alerts")) == 2 }, f)
	if got := f.model.Stats().Completions; got != 1 {
		t.Errorf("model calls = %d; want 1 (the second alert's identical prompt answered from the cache)", got)
	}
	if s := f.stats("alerts"); s.Effects != 2 {
		t.Errorf("%d effects; want 2", s.Effects)
	}
}

// noteOutage refuses Note, as a ledger that is away (a KV leader
// election), until up is closed; with commits set, it also refuses the
// first commit of every key.
type noteOutage struct {
	refuseFirstCommit
	up      chan struct{}
	commits bool
	refused atomic.Int64
}

func (l *noteOutage) Note(ctx context.Context, k dedupe.Key, token uint64, note []byte, d time.Duration) (ledger.Lease, error) {
	select {
	case <-l.up:
		return l.Ledger.Note(ctx, k, token, note, d)
	default:
		l.refused.Add(1)
		return ledger.Lease{}, errLedgerDown
	}
}

func (l *noteOutage) Commit(ctx context.Context, k dedupe.Key, token uint64, r ledger.Result) error {
	if l.commits {
		return l.refuseFirstCommit.Commit(ctx, k, token, r)
	}
	return l.Ledger.Commit(ctx, k, token, r)
}

// TestAnswerKeptThroughALedgerOutage: a paid answer is not lost to a
// ledger that refuses its note for a while. Through a short outage the
// note is written once the ledger is back, within the lease; through one
// that outlasts the lease (here, with each alert's first commit refused
// too, so that each comes back), the process keeps the answer, and the
// intent's next try here takes it from there. Either way the model is
// called once per alert.
func TestAnswerKeptThroughALedgerOutage(t *testing.T) {
	for _, long := range []bool{false, true} {
		t.Run(fmt.Sprintf("long=%v", long), func(t *testing.T) {
			const alerts = 4
			l := &noteOutage{refuseFirstCommit: refuseFirstCommit{refused: map[dedupe.Key]bool{}}, up: make(chan struct{}), commits: long}
			f := start(t, func(c *config.Config) {
				c.Ledger.Lease = time.Second
				c.Pipelines[0].MaxDeliver = 10
			}, standin.Options{}, func(o *consumer.Options) { l.Ledger = o.Ledger; o.Ledger = l })
			for i := range alerts {
				f.publish("triggers.alerts", alert(fmt.Sprintf("out%v%02d", long, i), 1, 0))
			}
			waitFor(t, 20*time.Second, "every answer's note refused", func() bool { return l.refused.Load() >= alerts }, f)
			if long {
				// Past every alert's lease, and its first commit refused:
				// then the ledger takes notes again.
				waitFor(t, 30*time.Second, "every first commit refused", func() bool {
					l.mu.Lock()
					defer l.mu.Unlock()
					return len(l.refuseFirstCommit.refused) == alerts
				}, f)
			}
			close(l.up)
			waitFor(t, 60*time.Second, "every alert settled", func() bool { return settled(f.stats("alerts")) == alerts }, f)
			if got := f.model.Stats().Completions; got != alerts {
				t.Errorf("model calls = %d; want %d (one per alert)", got, alerts)
			}
			s := f.stats("alerts")
			if long && s.RecordAnswers != alerts {
				t.Errorf("%d answers taken from the process after the outage; want %d", s.RecordAnswers, alerts)
			}
			{
				for _, m := range f.streamMsgs("ONCEGATE_EFFECTS", "effects.alerts") {
					var e struct{ Key string }
					json.Unmarshal(m.Data(), &e)
					k, _ := dedupe.ParseKey(e.Key)
					if rec, err := f.ledger.Get(context.Background(), k); err != nil || len(rec.Note) == 0 {
						t.Errorf("record of %s: %v, note %q; want the answer noted once the ledger took it", k, err, rec.Note)
					}
				}
			}
		})
	}
}
