package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/internal/ledger"
	"github.com/oncegate/oncegate/internal/llmhook"
	"github.com/oncegate/oncegate/pkg/dedupe"
	"github.com/oncegate/oncegate/pkg/llmcache"
)

// A bulk redrive (a job) takes every dead letter a filter chooses, up to
// the last one its preview saw, as Redrive takes each: fenced by the
// ledger, marked, and audited.
//
//  1. Preview evaluates each letter without changing anything: the effect
//     the redrive will fire, or why it will not (committed meanwhile, in
//     progress, refused for an unknown outcome without the statement,
//     redriven already), and what the model step of the redriven trigger
//     will cost (an answer in the LLM cache costs nothing). It saves the
//     job, in state JobPreviewed, in the KV bucket JobsBucket.
//  2. StartJob confirms it: the job runs in the process that answered, a
//     chunk of letters at a time, recording after each chunk how far it
//     got (Job.Cursor) and renewing its lease (Job.Lease).
//  3. If that process dies, its lease runs out and the job is taken over
//     where it got to: by StartJob again, by the command line following
//     it, or by any process whose Admin has Options.ResumeJobs. The
//     letters of the chunk under way when it died are taken again: their
//     marks say they were redriven (by this job), and a letter whose
//     republished trigger was not marked yet finds its intent's record
//     cleared or committed, and its republish is the same message under
//     the same Nats-Msg-Id. Never a second effect.
//  4. When every letter is done the job is JobDone, with what became of
//     them (Job.Progress).

// JobsBucket is the KV bucket of the bulk redrives.
const JobsBucket = "oncegate-redrive-jobs"

// jobLease is how long a job's runner holds it without renewing;
// jobRenew how often it renews.
const (
	jobLease = 15 * time.Second
	jobRenew = 3 * time.Second
)

// jobChunk is how many letters a runner takes between records of its
// progress; jobWorkers how many of them it redrives side by side (one at
// a time under a rate).
const (
	jobChunk   = 256
	jobWorkers = 16
)

// Job states.
const (
	JobPreviewed = "previewed" // saved, not confirmed
	JobRunning   = "running"   // confirmed, under way (or its runner died: see Lease)
	JobDone      = "done"      // every letter taken
	JobFailed    = "failed"    // stopped on an error (see Error); StartJob resumes it
)

// Job is a bulk redrive.
type Job struct {
	ID string `json:"id"`
	// Selection is the filter, with UpTo: the last dead letter the
	// preview saw.
	Selection      Selection `json:"selection"`
	Again          bool      `json:"again,omitempty"`
	UnknownOutcome string    `json:"unknown_outcome,omitempty"`
	// Rate is the most letters a second it takes (0: no limit).
	Rate float64 `json:"rate,omitempty"`
	// By previewed it; StartedBy confirmed it.
	By        string    `json:"by"`
	StartedBy string    `json:"started_by,omitempty"`
	Created   time.Time `json:"created"`
	State     string    `json:"state"`
	// Preview is what the preview found.
	Preview Totals `json:"preview"`
	// Progress is what became of the letters taken so far: Letters of
	// them, by outcome.
	Progress Totals `json:"progress"`
	// Cursor is the last dead letter taken: every one the filter chooses
	// up to it is done.
	Cursor uint64 `json:"cursor,omitempty"`
	// Ahead lists the letters past Cursor the job redrove and audited
	// already: those redriven beside a letter that failed the job. A
	// runner that resumes it counts them without auditing them again.
	Ahead []uint64 `json:"ahead,omitempty"`
	// Owner is the process that runs it, and Lease how long it holds it
	// without renewing.
	Owner    string    `json:"owner,omitempty"`
	Lease    time.Time `json:"lease,omitzero"`
	Started  time.Time `json:"started,omitzero"`
	Updated  time.Time `json:"updated,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Resumed counts the takeovers after a runner stopped.
	Resumed int    `json:"resumed,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Abandoned reports whether j runs with no runner holding it at now.
func (j Job) Abandoned(now time.Time) bool {
	return j.State == JobFailed || j.State == JobRunning && now.After(j.Lease)
}

// Totals sums a preview or a job's progress up.
type Totals struct {
	Letters int `json:"letters"`
	// ByOutcome counts the letters by redrive outcome (OutcomeWouldRedrive,
	// OutcomeRedriven, OutcomeCommitted, ...).
	ByOutcome map[string]int `json:"by_outcome,omitempty"`
	// Fire counts the effects the redrive fires, or would, by effect: its
	// name and kind, "notify (slack)", or its kind alone.
	Fire map[string]int `json:"fire,omitempty"`
	// Model: the redriven triggers' model calls answered from the cache
	// (free), those that are not (each an estimate of Tokens and Cost in
	// US dollars), and those the preview could not tell (no cache here).
	CacheHits    int     `json:"cache_hits,omitempty"`
	CacheMisses  int     `json:"cache_misses,omitempty"`
	CacheUnknown int     `json:"cache_unknown,omitempty"`
	Tokens       int64   `json:"tokens,omitempty"`
	Cost         float64 `json:"cost,omitempty"`
}

func (t *Totals) add(r *RedriveResult) {
	t.Letters++
	if t.ByOutcome == nil {
		t.ByOutcome = map[string]int{}
	}
	t.ByOutcome[r.Outcome]++
	if r.Outcome == OutcomeWouldRedrive || r.Outcome == OutcomeRedriven {
		if t.Fire == nil {
			t.Fire = map[string]int{}
		}
		t.Fire[fireName(r.Effect, r.Sink)]++
	}
	switch r.Model {
	case ModelCached:
		t.CacheHits++
	case ModelPaid:
		t.CacheMisses++
		t.Tokens += r.Tokens
		t.Cost += r.Cost
	case ModelUnknown:
		t.CacheUnknown++
	}
}

// fireName names an effect for people: "notify (slack)", or its kind.
func fireName(effect, kind string) string {
	switch {
	case effect == "":
		return cmp.Or(kind, "the effect")
	case kind == "":
		return effect
	}
	return effect + " (" + kind + ")"
}

// What a redriven trigger's model step will cost (RedriveResult.Model).
const (
	ModelCached  = "cached"  // the answer is in the cache: no call, no cost
	ModelPaid    = "paid"    // a call, of about Tokens and Cost
	ModelUnknown = "unknown" // no cache to look in here
)

// PreviewRequest asks what a bulk redrive of the dead letters a selection
// chooses would do, and saves it as a job to confirm; or, with Job set,
// for another page of that job's letters.
type PreviewRequest struct {
	// Selection is the filter. Its Limit is the size of a page of the
	// letters' rows in the reply (0: DefaultLimit).
	Selection
	Again          bool    `json:"again,omitempty"`
	UnknownOutcome string  `json:"unknown_outcome,omitempty"`
	Rate           float64 `json:"rate,omitempty"`
	By             Caller  `json:"by"`
	// Job and Offset ask for the rows of a saved preview from Offset.
	Job    string `json:"job,omitempty"`
	Offset int    `json:"offset,omitempty"`
}

// PreviewReply is the job a preview saved and a page of its letters, in
// the order the redrive takes them: what each would come to now.
type PreviewReply struct {
	Job    Job             `json:"job"`
	Rows   []RedriveResult `json:"rows"`
	Offset int             `json:"offset"`
}

// JobRequest names a job.
type JobRequest struct {
	ID string `json:"id"`
	By Caller `json:"by"`
}

// JobsRequest asks for the latest jobs.
type JobsRequest struct {
	Limit int `json:"limit,omitempty"`
}

// JobsReply lists jobs, newest first.
type JobsReply struct {
	Jobs []Job `json:"jobs"`
}

func newJobID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// jobs returns the jobs bucket, created if need be.
func (a *Admin) jobs(ctx context.Context) (jetstream.KeyValue, error) {
	storage := jetstream.FileStorage
	if a.cfg.Stream.Storage == "memory" {
		storage = jetstream.MemoryStorage
	}
	var kv jetstream.KeyValue
	err := a.again(ctx, "opening the jobs bucket", func(ctx context.Context) error {
		var err error
		if kv, err = a.js.KeyValue(ctx, JobsBucket); !errors.Is(err, jetstream.ErrBucketNotFound) {
			return err
		}
		kv, err = a.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: JobsBucket, Description: "Oncegate: bulk redrives and how far they got",
			History: 1, Storage: storage, Replicas: a.cfg.Stream.Replicas, TTL: 90 * 24 * time.Hour,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = a.js.KeyValue(ctx, JobsBucket)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: the jobs bucket: %w", err)
	}
	return kv, nil
}

func readJob(ctx context.Context, kv jetstream.KeyValue, id string) (Job, uint64, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Job{}, 0, errorf(ErrNotFound, "admin: no bulk redrive %q", id)
	}
	if err != nil {
		return Job{}, 0, fmt.Errorf("admin: reading bulk redrive %s: %w", id, err)
	}
	var j Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return Job{}, 0, fmt.Errorf("admin: bulk redrive %s: %w", id, err)
	}
	return j, e.Revision(), nil
}

// writeJob writes j over revision rev (0: a new job), and returns the new
// revision; jetstream.ErrKeyExists or ErrKeyRevisionMismatch says another
// wrote it since.
func writeJob(ctx context.Context, kv jetstream.KeyValue, j *Job, rev uint64) (uint64, error) {
	j.Updated = time.Now().UTC()
	b, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return kv.Create(ctx, j.ID, b)
	}
	return kv.Update(ctx, j.ID, b, rev)
}

// validJobID reports whether id can name a job (a KV key).
func validJobID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Preview implements [API].
func (a *Admin) Preview(ctx context.Context, r PreviewRequest) (PreviewReply, error) {
	reply := PreviewReply{Rows: []RedriveResult{}, Offset: max(r.Offset, 0)}
	if r.UnknownOutcome != "" && r.UnknownOutcome != StatementNotSent {
		return reply, errorf(ErrBadRequest, "admin: the one statement about an unknown outcome is %q (the effect did not happen), not %q", StatementNotSent, r.UnknownOutcome)
	}
	if r.Rate < 0 {
		return reply, errorf(ErrBadRequest, "admin: a rate of %v letters a second", r.Rate)
	}
	kv, err := a.jobs(ctx)
	if err != nil {
		return reply, err
	}
	limit := r.Selection.limit()
	if r.Job != "" {
		if !validJobID(r.Job) {
			return reply, errorf(ErrBadRequest, "admin: %q is not a bulk redrive's id", r.Job)
		}
		j, _, err := readJob(ctx, kv, r.Job)
		if err != nil {
			return reply, err
		}
		reply.Job = j
		reply.Rows, err = a.previewRows(ctx, &j, reply.Offset, limit, nil)
		return reply, err
	}
	sel := r.Selection
	sel.After, sel.Limit = 0, 0
	if err := sel.check(); err != nil {
		return reply, err
	}
	if sel.Pipeline != "" {
		if _, err := a.pipeline(sel.Pipeline); err != nil {
			return reply, err
		}
	}
	if err := a.index.update(ctx); err != nil {
		return reply, err
	}
	a.index.applyMarks()
	streams := a.index.streamNames(sel.Stream)
	switch {
	case len(streams) == 0 && sel.Stream != "":
		return reply, errorf(ErrNotFound, "admin: no dead-letter stream %s", sel.Stream)
	case len(streams) == 0:
		return reply, errorf(ErrNotFound, "admin: no dead letters have been kept yet")
	case len(streams) > 1:
		return reply, errorf(ErrBadRequest, "admin: the dead letters are in several streams (%s): name one", strings.Join(streams, ", "))
	}
	sel.Stream = streams[0]
	if sel.UpTo == 0 {
		sel.UpTo = a.index.last(sel.Stream)
	}
	j := Job{
		ID: newJobID(), Selection: sel, Again: r.Again, UnknownOutcome: r.UnknownOutcome, Rate: r.Rate,
		By: r.By.String(), Created: time.Now().UTC(), State: JobPreviewed,
	}
	var totals Totals
	reply.Rows, err = a.previewRows(ctx, &j, reply.Offset, limit, &totals)
	if err != nil {
		return reply, err
	}
	j.Preview = totals
	if _, err := writeJob(ctx, kv, &j, 0); err != nil {
		return reply, fmt.Errorf("admin: saving the preview: %w", err)
	}
	reply.Job = j
	return reply, nil
}

// previewRows returns the rows of job j's preview from offset (at most
// limit), evaluating every letter (or taking the evaluation this process
// made of it last); with totals, it sums them all up there.
func (a *Admin) previewRows(ctx context.Context, j *Job, offset, limit int, totals *Totals) ([]RedriveResult, error) {
	all, ok := a.previews.get(j.ID)
	if !ok {
		var err error
		if all, err = a.evaluate(ctx, j); err != nil {
			return nil, err
		}
		a.previews.put(j.ID, all)
	}
	if totals != nil {
		for i := range all {
			totals.add(&all[i])
		}
	}
	rows := []RedriveResult{}
	if offset < len(all) {
		rows = append(rows, all[offset:min(offset+limit, len(all))]...)
	}
	return rows, nil
}

// evaluate says what a redrive of each letter of job j would do now, in
// the order the redrive takes them. A letter of an intent (or of a
// one-shot effect's dispatch) that an earlier letter of the job will
// redrive is skipped: the ledger finds it committed by then.
func (a *Admin) evaluate(ctx context.Context, j *Job) ([]RedriveResult, error) {
	a.index.applyMarks()
	letters, marks := a.index.chosen(j.Selection, j.Again)
	out := make([]RedriveResult, 0, len(letters))
	req := RedriveRequest{Selection: j.Selection, Again: j.Again, UnknownOutcome: j.UnknownOutcome}
	var est modelEstimator
	first := map[string]uint64{} // the letter that redrives each record
	for i := range letters {
		d := letters[i]
		res, err := a.redriveOne(ctx, req, j.ID, nil, d, nil, nil, &knownMark{mark: marks[i]})
		if err != nil {
			return nil, fmt.Errorf("admin: dead letter %s %d: %w", d.Stream, d.Seq, err)
		}
		if res.Outcome == OutcomeWouldRedrive {
			rk := d.Key
			if d.OneShot {
				rk += "/" + d.EffectKey
			}
			if seq, ok := first[rk]; ok {
				res.Outcome, res.Ledger = OutcomeCommitted, fmt.Sprintf("committed by then: dead letter %d of this redrive does the work first", seq)
				res.Detail = "the ledger will skip it"
			} else {
				first[rk] = d.Seq
				a.estimate(ctx, &est, &d, &res)
			}
		}
		out = append(out, res)
	}
	return out, nil
}

// previewCache keeps the evaluations of the last previews this process
// made, for their pages.
type previewCache struct {
	mu   sync.Mutex
	ids  []string
	rows map[string][]RedriveResult
}

// previewsKept is how many previews' evaluations a process keeps.
const previewsKept = 2

func (c *previewCache) get(id string) ([]RedriveResult, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.rows[id]
	return r, ok
}

func (c *previewCache) put(id string, rows []RedriveResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil {
		c.rows = map[string][]RedriveResult{}
	}
	if _, ok := c.rows[id]; !ok {
		c.ids = append(c.ids, id)
	}
	c.rows[id] = rows
	for len(c.ids) > previewsKept {
		delete(c.rows, c.ids[0])
		c.ids = c.ids[1:]
	}
}

// modelEstimator keeps, for a preview, the step calls of each pipeline.
type modelEstimator struct {
	endpoint string
	made     bool
}

// estimate fills in what the model step of d's redriven trigger will cost:
// nothing if its answer is kept in the intent's ledger record or the
// cache (or it has no step, or d is a
// one-shot effect's, which is sent without one), else the tokens the
// offline tokenizer counts in its prompt and the completion it allows,
// priced with llm.prices.
func (a *Admin) estimate(ctx context.Context, est *modelEstimator, d *DeadLetter, res *RedriveResult) {
	p := a.pipes[d.Pipeline]
	if p == nil || p.Step == nil || d.OneShot {
		return
	}
	k, err := dedupe.ParseKey(d.Key)
	if err != nil {
		return
	}
	req, call, err := consumer.StepCall(a.cfg, p, k, nil)
	if err != nil {
		res.Model = ModelUnknown
		return
	}
	if call.Mode == llmcache.ModeBypass && a.opts.Ledger != nil {
		// The step keeps its answers in the intent's ledger record.
		rec, err := a.opts.Ledger.Get(ctx, k)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			res.Model = ModelUnknown
			return
		}
		if err == nil && consumer.RecordedAnswer(a.cfg, p, rec.Note) {
			res.Model = ModelCached
			return
		}
	} else {
		if a.opts.Cache == nil {
			res.Model = ModelUnknown
			return
		}
		if !est.made {
			est.endpoint, est.made = modelEndpoint(a.cfg), true
		}
		key, err := llmcache.KeyOf(est.endpoint, call, req)
		if err == nil {
			if _, hit, err := llmhook.Get(a.opts.Cache, key); err == nil && hit {
				res.Model = ModelCached
				return
			}
		}
	}
	res.Model = ModelPaid
	// Not in the cache: the prompt, rendered from the letter's payload.
	if st, err := a.stream(ctx, d.Stream); err == nil {
		if m, err := st.GetMsg(ctx, d.Seq); err == nil {
			if full, _, err := consumer.StepCall(a.cfg, p, k, m.Data); err == nil {
				req = full
			}
		}
	}
	body, _ := json.Marshal(req)
	e, err := llmhook.EstimateRequest(body)
	if err != nil {
		return
	}
	completion := e.MaxCompletion
	price, priced := a.cfg.LLM.Prices[req.Model]
	if !priced {
		price = a.cfg.LLM.Prices["*"]
	}
	if completion == 0 {
		completion = int64(price.MaxOutputTokens)
	}
	res.Tokens = e.Prompt + completion
	res.Cost = (float64(e.Prompt)*price.PromptPerMTok + float64(completion)*price.CompletionPerMTok) / 1e6
}

// modelEndpoint is the name the LLM cache gives the model endpoint in its
// keys: llm.cache.endpoint, the stand-in's, or the base URL without the
// chat completions path (llmcache.Options.Endpoint).
func modelEndpoint(cfg *config.Config) string {
	if e := cfg.LLM.Cache.Endpoint; e != "" {
		return e
	}
	if cfg.LLM.Standin {
		return "oncegate-standin"
	}
	u, err := url.Parse(strings.TrimSuffix(cfg.LLM.BaseURL, "/") + "/chat/completions")
	if err != nil {
		return cfg.LLM.BaseURL
	}
	e := url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host), Path: strings.TrimSuffix(u.Path, "/chat/completions")}
	return e.String()
}

// Job implements [API].
func (a *Admin) Job(ctx context.Context, r JobRequest) (Job, error) {
	if !validJobID(r.ID) {
		return Job{}, errorf(ErrBadRequest, "admin: %q is not a bulk redrive's id", r.ID)
	}
	kv, err := a.jobs(ctx)
	if err != nil {
		return Job{}, err
	}
	j, _, err := readJob(ctx, kv, r.ID)
	return j, err
}

// Jobs implements [API].
func (a *Admin) Jobs(ctx context.Context, r JobsRequest) (JobsReply, error) {
	reply := JobsReply{Jobs: []Job{}}
	kv, err := a.jobs(ctx)
	if err != nil {
		return reply, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return reply, err
	}
	for k := range keys.Keys() {
		j, _, err := readJob(ctx, kv, k)
		if err == nil {
			reply.Jobs = append(reply.Jobs, j)
		}
	}
	slices.SortFunc(reply.Jobs, func(x, y Job) int { return y.Created.Compare(x.Created) })
	if n := cmp.Or(r.Limit, 20); len(reply.Jobs) > n {
		reply.Jobs = reply.Jobs[:n]
	}
	return reply, nil
}

// StartJob implements [API]: it confirms a previewed job, or takes over
// one whose runner stopped (its lease ran out, or it failed), and runs it
// in this process; a job running elsewhere, or done, is returned as it
// is.
func (a *Admin) StartJob(ctx context.Context, r JobRequest) (Job, error) {
	if !validJobID(r.ID) {
		return Job{}, errorf(ErrBadRequest, "admin: %q is not a bulk redrive's id", r.ID)
	}
	kv, err := a.jobs(ctx)
	if err != nil {
		return Job{}, err
	}
	if a.marks(ctx, true) == nil {
		return Job{}, fmt.Errorf("admin: the redrive marks bucket %s cannot be opened or created", MarksBucket)
	}
	for range 5 {
		j, rev, err := readJob(ctx, kv, r.ID)
		if err != nil {
			return j, err
		}
		now := time.Now().UTC()
		action := "started"
		switch {
		case j.State == JobPreviewed:
			j.State, j.Started, j.StartedBy = JobRunning, now, r.By.String()
		case j.Abandoned(now):
			j.State, j.Error = JobRunning, ""
			j.Resumed++
			action = fmt.Sprintf("resumed from dead letter %d (its runner %s stopped)", j.Cursor, j.Owner)
		default:
			return j, nil // running elsewhere, or done
		}
		j.Owner, j.Lease = a.opts.Owner, now.Add(jobLease)
		rev, err = writeJob(ctx, kv, &j, rev)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // changed since the read: look again
		}
		if err != nil {
			return j, fmt.Errorf("admin: starting bulk redrive %s: %w", j.ID, err)
		}
		_ = a.record(ctx, AuditEntry{Action: AuditJob, By: r.By.String(), Job: j.ID, Pipeline: j.Selection.Pipeline, Outcome: action,
			Detail: fmt.Sprintf("%s: %d letters previewed", j.Selection.Filter(), j.Preview.Letters)})
		a.log.Warn("bulk redrive "+action, "job", j.ID, "by", r.By.String(), "filter", j.Selection.Filter(), "letters", j.Preview.Letters)
		a.runJob(j, rev)
		return j, nil
	}
	return Job{}, errorf(ErrRefused, "admin: bulk redrive %s kept changing while it was being started; look at it again", r.ID)
}

// runJob runs j (at revision rev) in the background until it is done,
// fails, is taken over, or Close is called.
func (a *Admin) runJob(j Job, rev uint64) {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if a.closed {
		return
	}
	a.running.Add(1)
	go func() {
		defer a.running.Done()
		a.run(a.runCtx, j, rev)
	}()
}

// run is a job's runner.
func (a *Admin) run(ctx context.Context, j Job, rev uint64) {
	kv, err := a.jobs(ctx)
	if err != nil {
		a.log.Error("bulk redrive: the jobs bucket", "job", j.ID, "err", err)
		return
	}
	marks := a.marks(ctx, true)
	req := RedriveRequest{Again: j.Again, UnknownOutcome: j.UnknownOutcome, Yes: true}
	by := j.StartedBy
	req.By = Caller{Name: by}
	if u, n, ok := strings.Cut(by, " ("); ok {
		req.By = Caller{User: u, Name: strings.TrimSuffix(n, ")")}
	}
	batch := &auditBatch{a: a}
	var tick *time.Ticker
	if j.Rate > 0 {
		tick = time.NewTicker(time.Duration(float64(time.Second) / j.Rate))
		defer tick.Stop()
	}
	chunk := jobChunk
	if j.Rate > 0 {
		chunk = max(1, min(jobChunk, int(j.Rate*jobRenew.Seconds())))
	}
	save := func(final bool) bool {
		for {
			j.Lease = time.Now().UTC().Add(jobLease)
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if ctx.Err() != nil {
				j.Lease = time.Now().UTC() // stopped: anyone may take it over at once
			}
			r, err := writeJob(wctx, kv, &j, rev)
			cancel()
			if err == nil {
				rev = r
				return true
			}
			if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				a.log.Warn("bulk redrive taken over by another process; this one stops", "job", j.ID)
				return false
			}
			a.log.Warn("bulk redrive: recording its progress failed; trying again", "job", j.ID, "err", err)
			if ctx.Err() != nil || !sleepCtx(ctx, time.Second) || !final && time.Now().After(j.Lease) {
				return false
			}
		}
	}
	for {
		if ctx.Err() != nil {
			return // stopped: the lease runs out and the job is taken over
		}
		// A chunk: its letters read in order, redriven side by side (a
		// letter's redrive is fenced and marked on its own), then
		// summed up in order and recorded.
		sel := j.Selection
		sel.After, sel.Limit = j.Cursor, chunk
		sel.Unhandled = false
		type item struct {
			d    DeadLetter
			h    nats.Header
			data []byte
			res  RedriveResult
			err  error
			skip bool
		}
		var items []*item
		more, _, err := a.scan(ctx, sel, func(d DeadLetter, h nats.Header, data []byte) error {
			items = append(items, &item{d: d, h: h, data: data, skip: j.Selection.Unhandled && a.forgottenSince(d.Key, d.Time)})
			return nil
		})
		if err == nil {
			work := make(chan *item)
			var wg sync.WaitGroup
			workers := jobWorkers
			if tick != nil {
				workers = 1
			}
			for range workers {
				wg.Go(func() {
					for it := range work {
						if tick != nil {
							select {
							case <-tick.C:
							case <-ctx.Done():
								it.err = ctx.Err()
								continue
							}
						}
						if it.res, it.err = a.redriveOne(ctx, req, j.ID, marks, it.d, it.h, it.data, nil); it.err != nil {
							it.err = fmt.Errorf("dead letter %s %d: %w", it.d.Stream, it.d.Seq, it.err)
						}
					}
				})
			}
			for _, it := range items {
				if !it.skip {
					work <- it
				}
			}
			close(work)
			wg.Wait()
		}
		for i, it := range items {
			if it.err != nil {
				err = it.err // the letters from it on are taken again
				// Those after it that were redriven side by side are
				// done: their entries are written now, for a job left
				// failed may never be resumed. One that resumes it counts
				// them (their marks name it) and writes them again, which
				// the audit drops (auditID).
				for _, it := range items[i+1:] {
					if it.err == nil && !it.skip && it.res.Outcome == OutcomeRedriven {
						batch.add(ctx, auditOf(&it.d, &it.res, req, j.ID))
						if !slices.Contains(j.Ahead, it.d.Seq) {
							j.Ahead = append(j.Ahead, it.d.Seq)
						}
					}
				}
				break
			}
			j.Cursor = it.d.Seq
			res := it.res
			switch {
			case it.skip:
				continue
			case res.Outcome == OutcomeAlreadyRedriven && res.Mark != nil && res.Mark.Job == j.ID:
				// By this job: before a letter of the chunk failed (Ahead:
				// audited then), or before a takeover, its entry written
				// unless its runner died first, which this runner cannot
				// tell: it is written again, and the audit keeps one
				// (auditID; a takeover comes within the stream's duplicate
				// window).
				res.Outcome = OutcomeRedriven
				if slices.Contains(j.Ahead, it.d.Seq) {
					j.Progress.add(&res)
					continue
				}
			case res.Outcome == OutcomeAlreadyRedriven && j.Selection.Unhandled:
				continue // handled before the preview: not one of the job's
			}
			j.Progress.add(&res)
			batch.add(ctx, auditOf(&it.d, &res, req, j.ID))
		}
		j.Ahead = slices.DeleteFunc(j.Ahead, func(seq uint64) bool { return seq <= j.Cursor })
		batch.wait(context.WithoutCancel(ctx))
		switch {
		case ctx.Err() != nil:
			save(true)
			return
		case err != nil:
			j.State, j.Error = JobFailed, err.Error()
			a.log.Error("bulk redrive failed; starting it again resumes it", "job", j.ID, "err", err)
			save(true)
			return
		case !more:
			j.State, j.Finished, j.Owner = JobDone, time.Now().UTC(), ""
			if !save(true) {
				return
			}
			_ = a.record(ctx, AuditEntry{Action: AuditJob, By: by, Job: j.ID, Pipeline: j.Selection.Pipeline, Outcome: JobDone, Detail: j.Progress.String()})
			a.log.Warn("bulk redrive done", "job", j.ID, "letters", j.Progress.Letters, "outcomes", j.Progress.String())
			return
		}
		if !save(false) {
			return
		}
	}
}

// String sums t up on one line.
func (t Totals) String() string {
	var parts []string
	for _, o := range slices.Sorted(maps.Keys(t.ByOutcome)) {
		parts = append(parts, o+" "+strconv.Itoa(t.ByOutcome[o]))
	}
	s := fmt.Sprintf("%d letters", t.Letters)
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// resumer takes over jobs whose runner stopped, while a runs.
func (a *Admin) resumer(ctx context.Context) {
	t := time.NewTicker(jobLease / 3)
	defer t.Stop()
	for {
		a.resumeJobs(ctx)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// resumeJobs takes over the jobs whose runner stopped.
func (a *Admin) resumeJobs(ctx context.Context) {
	kv, err := a.js.KeyValue(ctx, JobsBucket)
	if err != nil {
		return // no job ever
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	for k := range keys.Keys() {
		j, _, err := readJob(ctx, kv, k)
		if err != nil || j.State != JobRunning || !j.Abandoned(now) {
			continue
		}
		if _, err := a.StartJob(ctx, JobRequest{ID: j.ID, By: Caller{Name: "resumed by " + a.opts.Owner, User: j.StartedBy}}); err != nil {
			a.log.Warn("bulk redrive: resuming", "job", j.ID, "err", err)
		}
	}
}

// Close stops the jobs this Admin runs (each at a letter's boundary: its
// lease runs out and another process, or this one started again, takes
// it over) and waits for them.
func (a *Admin) Close() {
	a.runMu.Lock()
	a.closed = true
	a.runMu.Unlock()
	a.stop()
	a.running.Wait()
}

// runState is what an Admin keeps of the jobs it runs.
type runState struct {
	previews previewCache
	runCtx   context.Context
	stop     context.CancelFunc
	runMu    sync.Mutex
	closed   bool
	running  sync.WaitGroup
}
