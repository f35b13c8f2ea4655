package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
	"github.com/oncegate/oncegate/internal/consumer"
	"github.com/oncegate/oncegate/pkg/canon"
	"github.com/oncegate/oncegate/pkg/dedupe"
)

// testOptions are the defaults of the command line.
func testOptions(t *testing.T) options {
	t.Helper()
	o, _, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	o.seed = 7
	return o
}

// TestWorkloadKeys checks the workload against the real keyer of the
// configuration under test: every copy of a valid intent gets the intent's
// key, no two intents share one, and every hostile copy is refused with
// the reason the checker expects.
func TestWorkloadKeys(t *testing.T) {
	o := testOptions(t)
	o.intents, o.hostile, o.approvals = 3000, 0.1, true
	w := newWorkload(rand.New(rand.NewPCG(o.seed, 1)), o.intents, o.hostile, time.Minute, 70*time.Second, o.extras())
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(renderConfig(o, dir, "nats://127.0.0.1:4222", "http://127.0.0.1:1/v1", "http://127.0.0.1:2/c", "http://127.0.0.1:3/m", "http://127.0.0.1:4/v2/enqueue")),
		filepath.Join(dir, "oncegate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyers := map[string]*dedupe.Keyer{}
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		if keyers[p.Name], err = dedupe.NewKeyer(consumer.KeySpec(p)); err != nil {
			t.Fatal(err)
		}
	}
	owner := map[dedupe.Key]int{}
	kinds := map[string]int{}
	for _, in := range w.intents {
		for _, p := range in.copies {
			kinds[p.kind]++
			got, err := keyers[in.pipeline].Intent(p.data)
			if in.hostile != "" {
				if reason := reasonOf(err); reason != in.reason {
					t.Errorf("hostile %s on %s: %q → %v (%s); want reason %s", in.hostile, in.pipeline, p.data[:min(len(p.data), 80)], err, reason, in.reason)
				}
				if i, c := hostileOf(p.data); i != in.id || c != p.copy {
					t.Errorf("hostile copy %d of intent %d is marked %d/%d", p.copy, in.id, i, c)
				}
				continue
			}
			if err != nil {
				t.Fatalf("intent %d copy %d (%s): %v", in.id, p.copy, p.kind, err)
			}
			if in.alert != nil {
				// A resolve is keyed by the alert's identity and its
				// status, as the consumer does with key.status.
				got.Key = consumer.StatusKey(got.Key, in.alert.status)
			}
			if prev, ok := owner[got.Key]; ok && prev != in.id {
				t.Fatalf("intents %d and %d share key %v", prev, in.id, got.Key)
			}
			owner[got.Key] = in.id
			if intentOf(p.data) != in.id {
				t.Errorf("intent %d copy %d is marked %d", in.id, p.copy, intentOf(p.data))
			}
		}
	}
	valid := 0
	for _, in := range w.intents {
		if in.hostile == "" {
			valid++
		}
	}
	if len(owner) != valid {
		t.Errorf("%d keys for %d valid intents", len(owner), valid)
	}
	for _, k := range []string{"original", "retry", "redelivery", "reworded", "hostile", "poison"} {
		if kinds[k] == 0 {
			t.Errorf("no %s publications in %v", k, kinds)
		}
	}

	// The poison: one trigger each, carrying its fault; the fates of the
	// notify intents, all four drawn when the approvals time out.
	faults, fates := map[string]int{}, map[string]int{}
	for _, in := range w.intents {
		if in.pipeline == pPoison {
			if len(in.copies) != 1 || in.copies[0].header.Get(headerFault) != in.fault {
				t.Errorf("poison intent %d: %d copies, header %v; want one carrying %s", in.id, len(in.copies), in.copies[0].header, in.fault)
			}
			faults[in.fault]++
		}
		if in.fate != "" {
			fates[in.fate]++
		}
		if (in.fate != "") != (in.pipeline == pNotify && in.hostile == "") {
			t.Errorf("intent %d of %s has fate %q", in.id, in.pipeline, in.fate)
		}
	}
	if faults[poisonPanic] != o.poison/2 || faults[poisonKill] != o.poison-o.poison/2 {
		t.Errorf("poison faults %v; want %d intents, half of each", faults, o.poison)
	}
	o.approvalWait = 20 * time.Second
	w = newWorkload(rand.New(rand.NewPCG(o.seed, 1)), o.intents, o.hostile, time.Minute, 70*time.Second, o.extras())
	fates = map[string]int{}
	for _, in := range w.intents {
		fates[in.fate]++
	}
	for _, f := range []string{fateApprove, fateCancel, fateApproveCancel, fateNever} {
		if fates[f] == 0 {
			t.Errorf("no notify intent is to be %s: %v", f, fates)
		}
	}
}

// reasonOf mirrors the consumer's classification of a payload that cannot
// be keyed.
func reasonOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, canon.ErrTooLarge), errors.Is(err, canon.ErrTooDeep),
		errors.Is(err, canon.ErrStringTooLong), errors.Is(err, canon.ErrTooManyMembers):
		return "too_large"
	case errors.Is(err, canon.ErrNotFound):
		return "missing_field"
	}
	return "invalid_json"
}

// TestReplay: a seed gives the same workload and the same schedule.
func TestReplay(t *testing.T) {
	o := testOptions(t)
	o.intents = 500
	draw := func() ([]*publication, []fault) {
		rng := rand.New(rand.NewPCG(o.seed, 0x736f616b))
		w := newWorkload(rng, o.intents, o.hostile, o.duration*8/10, o.duration, o.extras())
		return w.pubs, newSchedule(rng, o)
	}
	p1, s1 := draw()
	p2, s2 := draw()
	if len(p1) != len(p2) || !reflect.DeepEqual(s1, s2) {
		t.Fatalf("two draws of seed %d differ: %d and %d publications, schedules %v and %v", o.seed, len(p1), len(p2), s1, s2)
	}
	for i := range p1 {
		if p1[i].at != p2[i].at || !bytes.Equal(p1[i].data, p2[i].data) || p1[i].msgID != p2[i].msgID {
			t.Fatalf("publication %d differs between two draws", i)
		}
	}
	n := map[string]int{}
	for _, f := range s1 {
		n[f.kind]++
		if f.at < 0 || f.at > o.duration {
			t.Errorf("fault %v outside the window %v", f, o.duration)
		}
	}
	if n[fKill] != o.kills || n[fZombie] != o.zombies || n[fServerTerm]+n[fServerKill] != o.serverRestarts || n[fServerTerm] == 0 || n[fServerKill] == 0 {
		t.Errorf("schedule %v; want %d kills, %d pauses, %d restarts of both kinds", n, o.kills, o.zombies, o.serverRestarts)
	}
}

// TestPaymentSink checks the provider semantics the checker relies on.
func TestPaymentSink(t *testing.T) {
	log, err := newCallLog(filepath.Join(t.TempDir(), "calls.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s := newPaymentSink(1, 0, log)
	// The sink reads its settings under its lock.
	set := func(latency time.Duration, dropRate float64) {
		s.mu.Lock()
		s.latency, s.dropRate = latency, dropRate
		s.mu.Unlock()
	}
	set(0, 0)
	srv := httptest.NewServer(s)
	defer srv.Close()
	// No connection reuse: net/http's Transport re-sends a request with an
	// Idempotency-Key header by itself when a reused connection is closed
	// before the answer, which would hide the dropped response.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(key, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewBufferString(body))
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}
	code, replayed, first := post("k1", `{"charge":"soak000001"}`)
	if code != 200 || replayed != "" {
		t.Fatalf("first request: %d replayed=%q %s", code, replayed, first)
	}
	if code, replayed, body := post("k1", `{"charge":"soak000001"}`); code != 200 || replayed != "true" || body != first {
		t.Errorf("same key, same body: %d replayed=%q %s; want 200, replayed, %s", code, replayed, body, first)
	}
	if code, _, _ := post("k1", `{"charge":"soak000001","amount":2}`); code != http.StatusUnprocessableEntity {
		t.Errorf("same key, other body: %d; want 422", code)
	}
	if code, _, _ := post("", `{}`); code != http.StatusBadRequest {
		t.Errorf("no key: %d; want 400", code)
	}

	// In flight: the second request with the key gets 409.
	set(300*time.Millisecond, 0) // in flight for 150ms at least
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			code, _, _ := post("k2", `{"charge":"soak000002"}`)
			codes <- code
		})
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[200] != 1 || got[409] != 1 {
		t.Errorf("concurrent requests with one key: %v; want one 200 and one 409", got)
	}

	// Response lost: the charge is made, the connection closed; a retry
	// gets the stored response.
	set(0, 1)
	if code, _, errText := post("k3", `{"charge":"soak000003"}`); code != 0 {
		t.Errorf("dropped response: got status %d (%s); want no answer", code, errText)
	}
	set(0, 0)
	if code, replayed, _ := post("k3", `{"charge":"soak000003"}`); code != 200 || replayed != "true" {
		t.Errorf("retry after a dropped response: %d replayed=%q; want 200, replayed", code, replayed)
	}
	effects := s.snapshot()
	byKey := map[string]int{}
	for _, e := range effects {
		byKey[e.key]++
	}
	if len(effects) != 3 || byKey["k1"] != 1 || byKey["k2"] != 1 || byKey["k3"] != 1 {
		t.Errorf("effects by key %v; want one each for k1, k2, k3", byKey)
	}
}

// TestPlot draws a synthetic run with every kind of event and a long
// settling tail.
func TestPlot(t *testing.T) {
	o := testOptions(t)
	o.duration = 20 * time.Second
	h := &harness{o: o, events: &events{}, t0: time.Now().Add(-time.Minute)}
	h.w = newWorkload(rand.New(rand.NewPCG(1, 2)), 100, 0.05, 16*time.Second, 20*time.Second, o.extras())
	rep := &report{}
	for i, p := range h.w.pubs {
		rep.published = append(rep.published, h.t0.Add(p.at))
		rep.effectsAt = append(rep.effectsAt, timed{h.t0.Add(p.at + 50*time.Millisecond), pipelines[i%len(pipelines)]})
	}
	rep.effectsAt = append(rep.effectsAt, timed{h.t0.Add(55 * time.Second), pCharges}) // a straggler
	at := secondsFrom(h.t0)
	for _, ev := range []event{
		{at: at(2), kind: evKill}, {at: at(3), kind: evCrashPoint}, {at: at(5), kind: evPause, replica: 1},
		{at: at(9), kind: evResume, replica: 1}, {at: at(10), kind: evServerTerm}, {at: at(11), kind: evServerUp},
		{at: at(14), kind: evServerKill}, {at: at(15), kind: evServerUp},
		{at: at(16), kind: evOutage, replica: -1}, {at: at(18), kind: evOutageOver, replica: -1},
		{at: at(17), kind: evBlip, replica: -1}, {at: at(19), kind: evPoisonKill, replica: 2},
	} {
		h.events.add(ev)
	}
	path := filepath.Join(t.TempDir(), "soak.png")
	if err := h.plot(rep, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("plot %s: %d bytes, %v; want a PNG", path, len(b), err)
	}
}

// TestClassifyExit runs real processes that end the ways a replica's can,
// and checks which count against the crash-loop bound.
func TestClassifyExit(t *testing.T) {
	h := &harness{events: &events{}, procs: newProcs()}
	defer h.procs.killAll()
	r := &replica{h: h}
	for _, tt := range []struct {
		name, script string
		counter      *atomic.Int64
	}{
		{"a poison trigger's SIGKILL", `echo "level=INFO msg=consuming"; echo "oncegate_faults: SIGKILL by poison trigger ONCEGATE:7, key ab12"; kill -9 $$`, &r.poisonKills},
		{"a crash point", `echo "level=INFO msg=consuming"; echo "oncegate_faults: SIGKILL at after-effect (hit 1), key ab12"; kill -9 $$`, &r.crashKills},
		{"a panic", `echo "level=INFO msg=consuming"; echo "panic: boom" >&2; exit 2`, &r.panics},
		{"an error exit while consuming", `echo "level=INFO msg=consuming"; exit 1`, &r.crashes},
		{"a SIGKILL from elsewhere", `echo "level=INFO msg=consuming"; kill -9 $$`, &r.crashes},
		{"no start", `echo "nats: no servers available for connection"; exit 1`, &r.failedStarts},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := []int64{r.poisonKills.Load(), r.crashKills.Load(), r.panics.Load(), r.crashes.Load(), r.failedStarts.Load()}
			c, err := h.procs.start("test", "/bin/sh", []string{"-c", tt.script}, nil, filepath.Join(t.TempDir(), "log"))
			if err != nil {
				t.Fatal(err)
			}
			<-c.done
			r.classifyExit(c)
			after := []int64{r.poisonKills.Load(), r.crashKills.Load(), r.panics.Load(), r.crashes.Load(), r.failedStarts.Load()}
			changed := 0
			for i := range before {
				if after[i] != before[i] {
					changed++
				}
			}
			if changed != 1 || tt.counter.Load() == 0 {
				t.Errorf("counters (poison kills, crash points, panics, crashes, failed starts) went from %v to %v; want the %s one up by one", before, after, tt.name)
			}
		})
	}
	// A kill of the soak's own counts nowhere.
	c, err := h.procs.start("test", "/bin/sh", []string{"-c", `echo "level=INFO msg=consuming"; sleep 60`}, nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	c.killed.Store(true)
	c.signal(syscall.SIGKILL)
	<-c.done
	n := r.poisonKills.Load() + r.crashKills.Load() + r.panics.Load() + r.crashes.Load() + r.failedStarts.Load()
	r.classifyExit(c)
	if m := r.poisonKills.Load() + r.crashKills.Load() + r.panics.Load() + r.crashes.Load() + r.failedStarts.Load(); m != n {
		t.Errorf("the soak's own SIGKILL was counted as a death (%d → %d)", n, m)
	}
}

// alertsKeyer returns the keyer of the alerts pipeline of the soak's
// configuration for o.
func alertsKeyer(t *testing.T, o options) *dedupe.Keyer {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(renderConfig(o, dir, "nats://127.0.0.1:4222", "http://127.0.0.1:1/v1", "http://127.0.0.1:2/c", "http://127.0.0.1:3/m", "http://127.0.0.1:4/v2/enqueue")),
		filepath.Join(dir, "oncegate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Pipelines {
		if p := &cfg.Pipelines[i]; p.Name == pAlerts {
			keyer, err := dedupe.NewKeyer(consumer.KeySpec(p))
			if err != nil {
				t.Fatal(err)
			}
			return keyer
		}
	}
	t.Fatal("no alerts pipeline in the configuration under test")
	return nil
}

// TestAlertsWorkload checks the alerts intents against the real keyer: a
// resolve shares its firing's identity (the PagerDuty dedup_key the
// checker matches it by) and not its key, it goes out after every copy of
// its firing, and the workload has firings, resolves and alerts first
// seen resolved, of both severities.
func TestAlertsWorkload(t *testing.T) {
	o := testOptions(t)
	o.intents = 1000
	w := newWorkload(rand.New(rand.NewPCG(o.seed, 1)), o.intents, o.hostile, 24*time.Second, 30*time.Second, o.extras())
	keyer := alertsKeyer(t, o)
	identity := func(in *intent) dedupe.Key {
		k, err := keyer.Intent(in.copies[0].data)
		if err != nil {
			t.Fatalf("intent %d: %v", in.id, err)
		}
		return k.Key
	}
	kinds := map[string]int{}
	for _, in := range w.intents {
		a := in.alert
		if a == nil {
			continue
		}
		kinds[a.status+" "+a.severity]++
		switch {
		case a.status == statusFiring && a.resolve != nil:
			res := a.resolve
			if identity(res) != identity(in) {
				t.Errorf("resolve %d has identity %v, its firing %d %v", res.id, identity(res), in.id, identity(in))
			}
			if consumer.StatusKey(identity(res), statusResolved) == identity(in) {
				t.Errorf("resolve %d has its firing's key", res.id)
			}
			for _, f := range in.copies {
				if res.copies[0].at < f.at {
					t.Errorf("resolve %d goes out at %v, before copy %d of its firing at %v", res.id, res.copies[0].at, f.copy, f.at)
				}
			}
			kinds["resolved after firing"]++
		case a.status == statusResolved && a.firing == nil:
			kinds["first seen resolved"]++
		}
		if !needsModel(in) != (a.status == statusResolved) {
			t.Errorf("intent %d (%s): needsModel %v", in.id, a.status, needsModel(in))
		}
	}
	for _, k := range []string{"firing critical", "firing warning", "resolved critical", "resolved warning", "resolved after firing", "first seen resolved"} {
		if kinds[k] == 0 {
			t.Errorf("no %s alerts in %v", k, kinds)
		}
	}
}

// TestStoppedWith: an answer paid again counts as lost in flight when the
// process that made the one before was stopped as it came (its socket took
// it), resumed just before it (resumeGrace), or was stopped within
// lossWindow after, and before the next; not when its pause ended well
// before the answer, began long after it, or after the next answer.
func TestStoppedWith(t *testing.T) {
	t0 := time.Now()
	at := secondsFrom(t0)
	for _, tc := range []struct {
		name            string
		pause, resume   float64 // seconds; resume 0: still stopped
		answer, nextAns float64
		want            bool
	}{
		{"stopped as the answer came", 51.99, 57, 52.014, 64, true},
		{"resumed 6ms before the answer came", 52.9, 56.43, 56.436, 56.77, true},
		{"resumed 0.5s before the answer came", 52.9, 56.43, 56.93, 57.2, false},
		{"stopped just after", 52.3, 57, 52.0, 64, true},
		{"still stopped", 52.3, 0, 52.0, 64, true},
		{"paused and resumed before the answer", 40, 45, 52, 64, false},
		{"stopped long after the answer", 60, 65, 52, 70, false},
		{"stopped after the next answer", 52.5, 57, 52, 52.4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness{events: &events{t0: t0}, t0: t0}
			h.events.add(event{at: at(tc.pause), kind: evPause, replica: 1})
			if tc.resume > 0 {
				h.events.add(event{at: at(tc.resume), kind: evResume, replica: 1})
			}
			h.events.add(event{at: at(tc.pause), kind: evPause, replica: 2}) // another replica's pause counts for nothing
			got := h.stoppedWith(answerAt{replica: 1, at: at(tc.answer)}, answerAt{replica: 0, at: at(tc.nextAns)})
			if got != tc.want {
				t.Errorf("stoppedWith = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestDeathCountsFromTheKill: a process the soak SIGKILLed half a second
// after its answer, but reaped half a minute later (a thread held in the
// kernel), died with the answer in hand: the answer paid again after it
// is one lost in flight, not one paid again by a process that still ran.
func TestDeathCountsFromTheKill(t *testing.T) {
	rep, h := classifyAnswers([][3]float64{{0, 0, 13.5}, {13.8, 17.01, 49.9}, {49.95, 0, 60}}, [][2]float64{{2, 16.515}, {0, 49.66}})
	if rep.lostInFlight != 1 || rep.repaidWhy["its process still ran"] != 0 {
		t.Errorf("lost in flight %d, reasons %v; want the answer lost in flight, its process killed 0.5s after it", rep.lostInFlight, rep.repaidWhy)
	}
	if killed, slow, lag := h.reapLags(); killed != 1 || slow != 1 || lag < 32*time.Second {
		t.Errorf("reapLags = %d, %d, %v; want 1 killed, 1 slow, 32.89s", killed, slow, lag)
	}
}

// TestRedriveNotExercised: the sink refused three charges during a ledger
// blip, so their failures could not be recorded; they were tried again
// after the sink was fixed and made, and none was dead-lettered (seed
// 524014236). The phase had nothing to redrive: not exercised, not
// failed. Dead letters that were never republished still fail it.
func TestRedriveNotExercised(t *testing.T) {
	base := func() *redriveReport {
		return &redriveReport{refusedCalls: 3, lastPassAfter: true, final: map[string]int{}}
	}
	if r := base(); !r.ok() || !strings.Contains(r.String(), "not exercised") {
		t.Errorf("refused, none dead-lettered: ok %v, %q; want ok and not exercised", r.ok(), r.String())
	}
	r := base()
	r.deadLetters, r.intents = 2, 2
	if r.ok() {
		t.Errorf("2 dead letters, none republished: ok; want a failure")
	}
}

// TestSickNodeIsRestarted: a node that stays unhealthy after a fault (a
// stream replica that does not catch up; a cluster short form here saw
// one, seed 87987154, 2 minutes after a partition) is restarted once on
// its store, the restart is counted, and the cluster is whole again. The
// node is this test binary (TestFakeNode): its first life answers /healthz
// 503, the next ones 200.
func TestSickNodeIsRestarted(t *testing.T) {
	dir := t.TempDir()
	client, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	mon, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOAK_FAKE_NODE", fmt.Sprintf("%d %d %s", client, mon, filepath.Join(dir, "started")))
	h := &harness{events: &events{}, procs: newProcs(), healWait: 2 * time.Second}
	nd := &clusterNode{natsServer: &natsServer{h: h, bin: os.Args[0], args: []string{"-test.run=^TestFakeNode$"}, port: client, log: filepath.Join(dir, "node.log"), name: "n0"}, name: "n0", monPort: mon}
	h.nodes = []*clusterNode{nd}
	ctx := context.Background()
	if err := nd.start(ctx); err != nil {
		t.Fatal(err)
	}
	defer h.procs.killAll()
	if err := h.healCluster(ctx); err != nil {
		t.Fatalf("healCluster: %v", err)
	}
	if n := h.events.count(evSickNode); n != 1 {
		t.Errorf("restarts of a sick node: %d; want 1", n)
	}
	if ok, why := nd.healthy(); !ok {
		t.Errorf("the node after its restart: %s", why)
	}
}

// TestFakeNode is the node of TestSickNodeIsRestarted.
func TestFakeNode(t *testing.T) {
	spec := os.Getenv("SOAK_FAKE_NODE")
	if spec == "" {
		t.Skip("run by TestSickNodeIsRestarted")
	}
	var client, mon int
	var marker string
	if _, err := fmt.Sscan(spec, &client, &mon, &marker); err != nil {
		t.Fatal(err)
	}
	_, err := os.Stat(marker)
	sick := err != nil
	if sick {
		os.WriteFile(marker, nil, 0o644)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", client))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	http.ListenAndServe(fmt.Sprintf("127.0.0.1:%d", mon), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sick {
			http.Error(w, `{"status":"unavailable","error":"JetStream stream 'ONCEGATE > ONCEGATE' is not current"}`, http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{"status":"ok"}`)
	}))
}

// TestAnswerAfterItsCallerDied: the model answered a call 3ms after the
// soak killed the process that made it, and before the replica's next
// process started (seed 491296106, six answers at +47.969s). Nobody
// received the answer: paying for it again is a loss in flight, which the
// checker called "its process still ran" when it looked only for a death
// after the answer.
func TestAnswerAfterItsCallerDied(t *testing.T) {
	lives := [][3]float64{{5.6, 47.6, 47.61}, {47.8, 47.966, 47.967}, {48.3, 0, 100}}
	rep, _ := classifyAnswers(lives, [][2]float64{{2, 47.969}, {1, 82.44}})
	if rep.lostInFlight != 1 || rep.repaidWhy["its process still ran"] != 0 || rep.repaidWhy["died before the answer came (killed by the soak)"] != 1 {
		t.Errorf("lost in flight %d, reasons %v; want the answer lost in flight, its caller killed before it came", rep.lostInFlight, rep.repaidWhy)
	}

	// An answer while the replica's process runs, paid again while it
	// still runs, is no loss.
	rep, _ = classifyAnswers(lives, [][2]float64{{2, 50}, {0, 60}})
	if rep.lostInFlight != 0 || rep.repaidWhy["its process still ran"] != 1 {
		t.Errorf("lost in flight %d, reasons %v; want its process still ran", rep.lostInFlight, rep.repaidWhy)
	}
}

// classifyAnswers classifies the answers of one call, each made by a
// replica at a time (seconds from the start), when replica 2's processes
// had the lives given (start, killed by the soak or 0, reaped); it returns
// the report and the harness it made.
func classifyAnswers(lives [][3]float64, answers [][2]float64) (*report, *harness) {
	return classifyAnswersIn("", time.Now(), lives, answers)
}

// classifyAnswersIn is classifyAnswers with the run's directory (its
// ledger histories) and start.
func classifyAnswersIn(dir string, t0 time.Time, lives [][3]float64, answers [][2]float64) (*report, *harness) {
	r := &replica{idx: 2}
	for _, l := range lives {
		r.lives = append(r.lives, endedChild(t0, l[0], l[1], l[2]))
	}
	h := &harness{dir: dir, events: &events{t0: t0}, t0: t0, replicas: []*replica{{}, {}, r}}
	var as []answerAt
	for _, a := range answers {
		as = append(as, answerAt{int(a[0]), secondsFrom(t0)(a[1]), 10})
	}
	h.proxy = &modelProxy{times: map[int][]answerAt{1: as}}
	rep := &report{}
	h.classifyRepaid(rep, 1)
	return rep, h
}

// TestAnswerLostToAnUnreachableLedger: replica 2's process got its answer
// and died 8.4s later (seed 798408478, in CI), and replica 0 paid for it
// again. Every ledger write the process asked after the answer timed out
// (its node cut off, no majority): the answer was on its disk, out of
// anyone else's reach, and paying for it again is a loss in flight. Had
// the ledger answered one of its writes meanwhile, the answer could have
// been kept, and paying again is not excused.
func TestAnswerLostToAnUnreachableLedger(t *testing.T) {
	t0 := time.Now()
	at := secondsFrom(t0)
	lives := [][3]float64{{1, 28.4, 28.41}, {29, 0, 100}}
	answers := [][2]float64{{2, 20}, {0, 37.6}}
	history := func(ops ...string) string {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "logs"), 0o755); err != nil {
			t.Fatal(err)
		}
		b := `{"ev":"open","process":"host:7"}` + "\n" + strings.Join(ops, "\n") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "logs", "ledger-history-replica-2.jsonl"), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	op := func(id int, op string, call, ret float64, err string) string {
		e := ""
		if err != "" {
			e = fmt.Sprintf(`,"err":%q`, err)
		}
		return fmt.Sprintf(`{"ev":"call","id":"host:7/%d","t":%d,"op":%q,"key":"aa"}`+"\n"+`{"ev":"return","id":"host:7/%d","t":%d%s}`,
			id, at(call).UnixNano(), op, id, at(ret).UnixNano(), e)
	}
	unreachable := history(op(1, "begin", 19, 19.01, ""), op(2, "note", 20.01, 22, "other"), op(3, "extend", 21, 23, "other"), op(4, "note", 24, 26, "other"), op(5, "get", 27, 27.01, ""))
	rep, _ := classifyAnswersIn(unreachable, t0, lives, answers)
	if rep.lostInFlight != 1 || rep.repaidWhy["died ≤ 10s after, the ledger out of its reach until then (killed by the soak)"] != 1 {
		t.Errorf("lost in flight %d, reasons %v; want the answer lost in flight, the ledger out of its process's reach", rep.lostInFlight, rep.repaidWhy)
	}
	reachable := history(op(1, "begin", 19, 19.01, ""), op(2, "note", 20.01, 22, "other"), op(3, "extend", 24, 24.01, "stale"))
	rep, _ = classifyAnswersIn(reachable, t0, lives, answers)
	if rep.lostInFlight != 0 || rep.repaidWhy["died ≤ 10s after (killed by the soak)"] != 1 {
		t.Errorf("lost in flight %d, reasons %v; want the answer paid again, not excused: the ledger answered a write of its process", rep.lostInFlight, rep.repaidWhy)
	}
}

// secondsFrom returns the time s seconds after t0.
func secondsFrom(t0 time.Time) func(s float64) time.Time {
	return func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
}

// endedChild is a replica's process that started at start and was reaped
// at reaped (seconds after t0), SIGKILLed by the soak at killed if killed
// is not 0.
func endedChild(t0 time.Time, start, killed, reaped float64) *child {
	at := secondsFrom(t0)
	c := &child{started: at(start), ended: at(reaped), done: make(chan struct{})}
	close(c.done)
	if killed > 0 {
		c.killed.Store(true)
		c.killedAt.Store(at(killed).UnixNano())
	}
	return c
}

// TestThrottledFate: an event PagerDuty answered 429 and never accepted
// after is dropped by the 429 — unless it is a firing the consumer
// dropped because its resolve went out first (the forced race, whose page
// PagerDuty refuses until its resolve, can be refused with a 429 past the
// quota as well as a 500); one accepted after a 429 is not dropped; a key
// of no alerts intent is dropped. The keys are the consumer's
// (pdEffectKey of the configuration's keyer), and a resolve is never the
// lifecycle's drop.
func TestThrottledFate(t *testing.T) {
	o := testOptions(t)
	keyer := alertsKeyer(t, o)
	key := func(in *intent) string {
		ik, err := keyer.Intent(alertPayload(in, 0))
		if err != nil {
			t.Fatal(err)
		}
		return pdEffectKey(ik.Key, in.alert.status)
	}
	alert := func(id int, fp, status string, raced bool) *intent {
		return &intent{id: id, pipeline: pAlerts, alert: &alertInfo{fingerprint: fp, severity: severityCritical, status: status, raced: raced}}
	}
	raced, racedResolve := alert(1, "am-000001", statusFiring, true), alert(2, "am-000001", statusResolved, true)
	paged, lost, delayed := alert(3, "am-000002", statusFiring, false), alert(4, "am-000003", statusFiring, false), alert(5, "am-000004", statusFiring, false)
	ins := []*intent{raced, racedResolve, paged, lost, delayed}
	intentOfKey := map[string]int{}
	for _, in := range ins {
		intentOfKey[key(in)] = in.id
	}
	if len(intentOfKey) != len(ins) {
		t.Fatalf("the intents share effect keys: %v", intentOfKey)
	}
	throttled := map[string]int{
		key(raced): 2, key(racedResolve): 1, key(paged): 1, key(lost): 3, key(delayed): 1, "Rnot-an-alert": 1,
	}
	accepted := []received{{key: key(racedResolve)}, {key: key(paged)}}
	dropped := map[int]bool{raced.id: true, delayed.id: true}

	gotLost, gotLifecycle, n := throttledFate(throttled, accepted, intentOfKey, dropped)
	if n != 9 {
		t.Errorf("429s answered: %d, want 9", n)
	}
	if want := []int{raced.id, delayed.id}; !reflect.DeepEqual(gotLifecycle, want) {
		t.Errorf("dropped by the lifecycle after a 429: %v, want %v", gotLifecycle, want)
	}
	if len(gotLost) != 2 || !strings.HasPrefix(gotLost[0], "intent 4 ") || !strings.HasPrefix(gotLost[1], "no alerts intent ") {
		t.Errorf("dropped by a 429: %q, want intent 4 and the key of no alerts intent", gotLost)
	}

	// Without the ledger's word that the firings were dropped, they are
	// lost to the 429 like any other.
	gotLost, gotLifecycle, _ = throttledFate(throttled, accepted, intentOfKey, nil)
	if len(gotLost) != 4 || len(gotLifecycle) != 0 {
		t.Errorf("with no firing dropped: lost %q, dropped by the lifecycle %v; want 4 lost, none dropped", gotLost, gotLifecycle)
	}
}

// TestReceiverLogThrottles: a request PagerDuty answers 429 past its quota
// is counted by its Idempotency-Key and kept, with its action and
// dedup_key; it is not among those accepted. A trigger PagerDuty holds
// until its resolve (the forced race) is answered 429, not 500, when it
// comes past the quota: a raced firing, which the consumer drops after
// its resolve, can carry a 429 that is never followed by an accepted
// event.
func TestReceiverLogThrottles(t *testing.T) {
	r := newAlertReceivers()
	r.pd.Limit(1, time.Hour)
	srv := httptest.NewServer(r.pdLog)
	defer srv.Close()
	send := func(key, dedup string) int {
		body := fmt.Sprintf(`{"routing_key":%q,"event_action":"trigger","dedup_key":%q,"payload":{"summary":"s","source":"x","severity":"critical"}}`, routingKey, dedup)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v2/enqueue", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := send("k1", "d1"); s != http.StatusAccepted {
		t.Fatalf("first event: %d", s)
	}
	if s := send("k2", "d2"); s != http.StatusTooManyRequests {
		t.Fatalf("second event past the quota: %d", s)
	}
	r.pd.HoldTriggers("d3")
	if s := send("k3", "d3"); s != http.StatusTooManyRequests {
		t.Fatalf("a held trigger past the quota: %d, want 429", s)
	}
	r.pdLog.mu.Lock()
	defer r.pdLog.mu.Unlock()
	if len(r.pdLog.accepted) != 1 || r.pdLog.accepted[0].key != "k1" {
		t.Errorf("accepted %+v", r.pdLog.accepted)
	}
	if r.pdLog.throttled["k2"] != 1 || r.pdLog.throttled["k3"] != 1 || len(r.pdLog.throttles) != 2 || r.pdLog.throttles[0].dedup != "d2" || r.pdLog.throttles[0].action != "trigger" {
		t.Errorf("throttled %v, kept %+v", r.pdLog.throttled, r.pdLog.throttles)
	}
}
