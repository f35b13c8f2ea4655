package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/oncegate/oncegate/internal/admin"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/outcome"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// waitJob waits until job id is done, and returns it.
func (f *fixture) waitJob(api admin.API, id string) admin.Job {
	f.t.Helper()
	var j admin.Job
	waitFor(f.t, "the bulk redrive done", func() bool {
		var err error
		j, err = api.Job(ctx, admin.JobRequest{ID: id})
		if err != nil {
			f.t.Fatal(err)
		}
		if j.State == admin.JobFailed {
			f.t.Fatalf("the bulk redrive failed: %s", j.Error)
		}
		return j.State == admin.JobDone
	})
	return j
}

// TestBulkRedrive: twelve orders are refused for good and dead-lettered;
// two are then done by a duplicate, and one more's record failed with an
// unknown outcome. The preview of a redrive of every dead letter says, per
// letter and in all, what it will do: the effect it fires for nine, the
// two the ledger skips (committed meanwhile), the one refused (no
// statement), and it changes nothing. Started, it fires nine effects, one
// each, skips and refuses the same, and every letter's redrive is in the
// audit, with who and what came of it; the intent's story tells it.
func TestBulkRedrive(t *testing.T) {
	f := start(t)
	var keys []string
	for i := range 12 {
		keys = append(keys, f.publish(fmt.Sprintf("B-%02d", i), "first"))
	}
	f.dead(12)
	f.settled()
	f.recv.fix()
	// Two done meanwhile by a duplicate: forgotten and published again.
	for _, i := range []int{3, 7} {
		if _, err := f.app.Admin.Forget(ctx, admin.ForgetRequest{Key: keys[i], By: alice}); err != nil {
			t.Fatal(err)
		}
		f.publish(fmt.Sprintf("B-%02d", i), "a duplicate")
	}
	waitFor(t, "the duplicates' effects", func() bool { n, _ := f.recv.effects(keys[3]); m, _ := f.recv.effects(keys[7]); return n == 1 && m == 1 })
	f.settled()
	// One whose effect may have happened.
	k11, _ := dedupe.ParseKey(keys[11])
	rec, err := f.app.Ledger.Get(ctx, k11)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.app.Ledger.Clear(ctx, k11, rec.Token, "test"); err != nil {
		t.Fatal(err)
	}
	c, err := f.app.Ledger.Begin(ctx, k11, ledger.BeginOptions{Owner: "gone", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.app.Ledger.Fail(ctx, k11, c.Lease.Token, string(outcome.ReasonUnknownOutcome)+": the holder stopped mid-send"); err != nil {
		t.Fatal(err)
	}

	sel := admin.Selection{Pipeline: "orders", Reason: string(outcome.ReasonPermanentEffect), Limit: 5}
	p, err := f.app.Admin.Preview(ctx, admin.PreviewRequest{Selection: sel, By: alice})
	if err != nil {
		t.Fatal(err)
	}
	pv := p.Job.Preview
	if pv.Letters != 12 || pv.ByOutcome[admin.OutcomeWouldRedrive] != 9 || pv.ByOutcome[admin.OutcomeCommitted] != 2 || pv.ByOutcome[admin.OutcomeRefused] != 1 || pv.Fire["http"] != 9 {
		t.Errorf("preview totals = %+v; want 12 letters: 9 would redrive (http), 2 committed, 1 refused", pv)
	}
	want := func(key string) string {
		switch key {
		case keys[3], keys[7]:
			return admin.OutcomeCommitted
		case keys[11]:
			return admin.OutcomeRefused
		}
		return admin.OutcomeWouldRedrive
	}
	if len(p.Rows) != 5 || p.Job.State != admin.JobPreviewed {
		t.Errorf("preview: %d rows, job %s; want 5, previewed", len(p.Rows), p.Job.State)
	}
	more, err := f.app.Admin.Preview(ctx, admin.PreviewRequest{Job: p.Job.ID, Offset: 5, Selection: admin.Selection{Limit: 10}})
	if err != nil || len(more.Rows) != 7 {
		t.Errorf("preview rows from 5 = %d, %v; want the 7 left", len(more.Rows), err)
	}
	for i, r := range append(p.Rows, more.Rows...) {
		if r.Outcome != want(r.Key) || i > 0 && r.Seq <= p.Rows[0].Seq {
			t.Errorf("preview row %d = %+v; want %s, in the order of the stream", i, r, want(r.Key))
		}
		if r.Outcome == admin.OutcomeRefused && !strings.Contains(r.Detail, admin.StatementNotSent) {
			t.Errorf("preview row %d refused: %s; want the detail to name %s", i, r.Detail, admin.StatementNotSent)
		}
	}
	if _, all := f.recv.effects(""); all != 2 {
		t.Fatalf("the preview changed something: %d effects; want the duplicates' 2", all)
	}

	j, err := f.app.Admin.StartJob(ctx, admin.JobRequest{ID: p.Job.ID, By: alice})
	if err != nil || j.State != admin.JobRunning {
		t.Fatalf("StartJob = %+v, %v; want running", j, err)
	}
	j = f.waitJob(f.app.Admin, j.ID)
	if pr := j.Progress; pr.Letters != 12 || pr.ByOutcome[admin.OutcomeRedriven] != 9 || pr.ByOutcome[admin.OutcomeCommitted] != 2 || pr.ByOutcome[admin.OutcomeRefused] != 1 {
		t.Errorf("the job's progress = %+v; want 12: 9 redriven, 2 committed, 1 refused", pr)
	}
	waitFor(t, "nine effects more", func() bool { _, all := f.recv.effects(""); return all >= 11 })
	f.settled()
	for i, k := range keys {
		n, _ := f.recv.effects(k)
		if want := 1; i == 11 {
			want = 0
			if n != want {
				t.Errorf("order %d: %d effects; want %d", i, n, want)
			}
		} else if n != want {
			t.Errorf("order %d: %d effects; want %d", i, n, want)
		}
	}
	// Starting it again does nothing.
	if j2, err := f.app.Admin.StartJob(ctx, admin.JobRequest{ID: j.ID, By: alice}); err != nil || j2.State != admin.JobDone {
		t.Errorf("StartJob of a done job = %+v, %v; want it as it was", j2, err)
	}
	au, err := f.app.Admin.Audit(ctx, admin.AuditRequest{Job: j.ID, Action: admin.AuditRedrive, Limit: 100})
	if err != nil || len(au.Entries) != 12 {
		t.Fatalf("the audit of the job = %d entries, %v; want 12", len(au.Entries), err)
	}
	for _, e := range au.Entries {
		if !strings.Contains(e.By, "alice") || e.Letter == nil || e.Outcome == "" {
			t.Errorf("audit entry %+v: want by alice, the letter and the outcome", e)
		}
	}
	r, err := f.app.Admin.Record(ctx, admin.RecordRequest{Key: keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	var whats []string
	for _, e := range r.Story {
		whats = append(whats, e.What)
	}
	if got := strings.Join(whats, " → "); got != admin.EventFailed+" → "+admin.EventRedriven+" → "+admin.EventCommitted {
		t.Errorf("the story of order 0 = %s; want %s → %s → %s", got, admin.EventFailed, admin.EventRedriven, admin.EventCommitted)
	}
}

// outage is a ledger whose reads of one key fail while down is set.
type outage struct {
	ledger.Ledger
	key  dedupe.Key
	down atomic.Bool
}

func (o *outage) Get(ctx context.Context, key dedupe.Key) (ledger.Record, error) {
	if key == o.key && o.down.Load() {
		return ledger.Record{}, errors.New("the ledger is out (test)")
	}
	return o.Ledger.Get(ctx, key)
}

// TestBulkRedriveFailsMidChunk: a bulk redrive of six dead letters, the
// first of which cannot be read from the ledger (an outage): the job
// fails on it, while the five after it, redriven side by side, are done.
// Their entries are in the audit although the job's progress stops before
// them (a failed job may never be resumed); resumed once the ledger is
// back — here after the audit stream's duplicate window, as a person may
// resume it hours later — the job redrives the first, counts the five as
// its own (Job.Ahead), and the audit holds one entry per letter: six, each
// redriven once.
func TestBulkRedriveFailsMidChunk(t *testing.T) {
	f := start(t)
	const window = 100 * time.Millisecond
	st, err := f.js.Stream(ctx, admin.AuditStream("ONCEGATE"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Duplicates = window
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 6 {
		keys = append(keys, f.publish(fmt.Sprintf("M-%02d", i), "first"))
	}
	ls := f.dead(6)
	f.settled()
	f.recv.fix()
	first := ls[0]
	for _, d := range ls {
		if d.Seq < first.Seq {
			first = d
		}
	}
	k, err := dedupe.ParseKey(first.Key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.app.Admin.Preview(ctx, admin.PreviewRequest{Selection: admin.Selection{Pipeline: "orders"}, By: alice})
	if err != nil {
		t.Fatal(err)
	}
	out := &outage{key: k}
	out.down.Store(true)
	admin.WrapLedger(f.app.Admin, func(l ledger.Ledger) ledger.Ledger { out.Ledger = l; return out })
	if _, err := f.app.Admin.StartJob(ctx, admin.JobRequest{ID: p.Job.ID, By: alice}); err != nil {
		t.Fatal(err)
	}
	var j admin.Job
	waitFor(t, "the bulk redrive failed", func() bool {
		j, err = f.app.Admin.Job(ctx, admin.JobRequest{ID: p.Job.ID})
		return err == nil && j.State == admin.JobFailed
	})
	if j.Progress.Letters != 0 || !strings.Contains(j.Error, "the ledger is out") {
		t.Errorf("the failed job: %d letters taken, error %q; want none (it failed on the first), the ledger's error", j.Progress.Letters, j.Error)
	}
	waitFor(t, "the five effects after the first", func() bool { _, all := f.recv.effects(""); return all >= 5 })
	entries := func() map[uint64][]string {
		t.Helper()
		au, err := f.app.Admin.Audit(ctx, admin.AuditRequest{Job: p.Job.ID, Action: admin.AuditRedrive, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		by := map[uint64][]string{}
		for _, e := range au.Entries {
			if e.Letter != nil {
				by[e.Letter.Seq] = append(by[e.Letter.Seq], e.Outcome)
			}
		}
		return by
	}
	got := entries()
	if len(got) != 5 || got[first.Seq] != nil {
		t.Errorf("the audit of the failed job: %v; want the five letters after dead letter %d, redriven", got, first.Seq)
	}

	failedAt := time.Now()
	waitFor(t, "the audit's duplicate window past", func() bool { return time.Since(failedAt) > 2*window })
	out.down.Store(false)
	if _, err := f.app.Admin.StartJob(ctx, admin.JobRequest{ID: p.Job.ID, By: alice}); err != nil {
		t.Fatal(err)
	}
	j = f.waitJob(f.app.Admin, p.Job.ID)
	if j.Progress.Letters != 6 || j.Progress.ByOutcome[admin.OutcomeRedriven] != 6 || j.Resumed != 1 {
		t.Errorf("the resumed job: %+v, resumed %d times; want 6 letters, 6 redriven, resumed once", j.Progress, j.Resumed)
	}
	got = entries()
	if len(got) != 6 {
		t.Errorf("the audit of the job: %v; want the six letters", got)
	}
	for seq, outcomes := range got {
		if len(outcomes) != 1 || outcomes[0] != admin.OutcomeRedriven {
			t.Errorf("dead letter %d: audit entries %v; want one, redriven", seq, outcomes)
		}
	}
	f.settled()
	for i, key := range keys {
		if n, _ := f.recv.effects(key); n != 1 {
			t.Errorf("order %d: %d effects; want 1", i, n)
		}
	}
}

// TestFind: the console's pages over many dead letters: newest first, by
// filter, with totals and counts by reason and pipeline, and the letters
// already redriven or forgotten left out unless asked for.
func TestFind(t *testing.T) {
	f := start(t)
	dead := f.app.Config.Stream.DeadLetter("orders")
	forge := func(reason, detail, effect string, n int) {
		for i := range n {
			m := nats.NewMsg(dead)
			m.Data = []byte(`{"order":"x"}`)
			k := fmt.Sprintf("%032x", len(reason)*1000+i+len(detail))
			for h, v := range map[string]string{
				consumer.HeaderReason: reason, consumer.HeaderDetail: detail, consumer.HeaderPipeline: "orders",
				consumer.HeaderSubject: "triggers.orders", consumer.HeaderKey: k, consumer.HeaderDeliveries: "3",
			} {
				m.Header.Set(h, v)
			}
			if effect != "" {
				m.Header.Set(consumer.HeaderEffect, effect)
			}
			if _, err := f.js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	forge("permanent_effect", `sink: http: key 0: attempt 1 of 3: POST "http://x": 400 Bad Request: invalid_payload`, "", 30)
	forge("exhausted", `sink: http: key 0: attempt 3 of 3: POST "http://x": 500 Internal Server Error: boom`, "", 20)
	forge("poison", "the model refused it", "", 5)
	r, err := f.app.Admin.Find(ctx, admin.FindRequest{Selection: admin.Selection{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Total != 55 || len(r.Letters) != 10 || r.Letters[0].Seq != 55 || r.Letters[9].Seq != 46 {
		t.Fatalf("Find = total %d, %d letters from %d; want 55, 10 from 55 down", r.Total, len(r.Letters), r.Letters[0].Seq)
	}
	if r.ByReason[0] != (admin.Count{Value: "permanent_effect", N: 30}) || len(r.ByPipeline) != 1 || r.ByPipeline[0].N != 55 {
		t.Errorf("counts = %+v, %+v; want permanent_effect 30 first, orders 55", r.ByReason, r.ByPipeline)
	}
	r, err = f.app.Admin.Find(ctx, admin.FindRequest{Selection: admin.Selection{Status: "5xx", Limit: 10}, Offset: 15})
	if err != nil || r.Total != 20 || len(r.Letters) != 5 || r.Letters[0].Status != 500 || r.Letters[0].Answer != "boom" {
		t.Errorf("Find 5xx from 15 = %+v, %v; want 20 in all, 5 from the 16th, status 500, answer boom", r, err)
	}
	r, err = f.app.Admin.Find(ctx, admin.FindRequest{Selection: admin.Selection{Text: "INVALID_payload"}})
	if err != nil || r.Total != 30 {
		t.Errorf("Find text = %d, %v; want 30", r.Total, err)
	}
	// Redrive five of them: left out unless asked for.
	if _, err := f.app.Admin.Redrive(ctx, admin.RedriveRequest{Selection: admin.Selection{Seqs: []admin.Range{{From: 1, To: 5}}}, Yes: true, By: alice}); err != nil {
		t.Fatal(err)
	}
	f.settled()
	r, err = f.app.Admin.Find(ctx, admin.FindRequest{Selection: admin.Selection{Unhandled: true, Text: "invalid_payload"}})
	if err != nil || r.Total != 25 || r.Handled != 5 {
		t.Errorf("Find unhandled = total %d, handled %d, %v; want 25 and 5", r.Total, r.Handled, err)
	}
	b, _ := json.Marshal(r.ByReason)
	t.Logf("counts: %s", b)
}
