package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/oncegate/oncegate/internal/config"
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
	o.intents, o.hostile = 3000, 0.1
	w := newWorkload(rand.New(rand.NewPCG(o.seed, 1)), o.intents, o.hostile, time.Minute, 70*time.Second)
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(renderConfig(o, dir, "nats://127.0.0.1:4222", "http://127.0.0.1:1/v1", "http://127.0.0.1:2/c", "http://127.0.0.1:3/m")),
		filepath.Join(dir, "oncegate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	keyers := map[string]*dedupe.Keyer{}
	for i := range cfg.Pipelines {
		p := &cfg.Pipelines[i]
		if keyers[p.Name], err = dedupe.NewKeyer(p.KeySpec()); err != nil {
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
	for _, k := range []string{"original", "retry", "redelivery", "reworded", "hostile"} {
		if kinds[k] == 0 {
			t.Errorf("no %s publications in %v", k, kinds)
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
		w := newWorkload(rng, o.intents, o.hostile, o.duration*8/10, o.duration)
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
	h.w = newWorkload(rand.New(rand.NewPCG(1, 2)), 100, 0.05, 16*time.Second, 20*time.Second)
	rep := &report{}
	for i, p := range h.w.pubs {
		rep.published = append(rep.published, h.t0.Add(p.at))
		rep.effectsAt = append(rep.effectsAt, timed{h.t0.Add(p.at + 50*time.Millisecond), pipelines[i%len(pipelines)]})
	}
	rep.effectsAt = append(rep.effectsAt, timed{h.t0.Add(55 * time.Second), pCharges}) // a straggler
	at := func(s float64) time.Time { return h.t0.Add(time.Duration(s * float64(time.Second))) }
	for _, ev := range []event{
		{at: at(2), kind: evKill}, {at: at(3), kind: evCrashPoint}, {at: at(5), kind: evPause, replica: 1},
		{at: at(9), kind: evResume, replica: 1}, {at: at(10), kind: evServerTerm}, {at: at(11), kind: evServerUp},
		{at: at(14), kind: evServerKill}, {at: at(15), kind: evServerUp},
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
