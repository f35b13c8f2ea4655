package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestPlotPanels draws a made-up run, with every kind of fault, and checks that
// the PNG decodes at the size savePanels gives it. Set SOAK_PLOT_OUT to a
// path to keep the picture.
func TestPlotPanels(t *testing.T) {
	t0 := time.Now().Add(-time.Minute)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &harness{o: options{seed: 42, replicas: 3, duration: 40 * time.Second}, t0: t0, w: &workload{}, events: &events{t0: t0}}
	for i := range 1000 {
		h.w.intents = append(h.w.intents, &intent{})
		_ = i
	}
	rep := &report{hostile: newRow("hostile", "must be dead-lettered")}
	for i, p := range pipelines {
		r := newRow(p, "sink "+p)
		r.intents = 200 + 50*i
		rep.rows = append(rep.rows, r)
		for j := range r.intents {
			s := 45 * float64(j) / float64(r.intents)
			rep.published = append(rep.published, at(s*0.9))
			rep.effectsAt = append(rep.effectsAt, timed{at: at(s), pipeline: p})
		}
	}
	rep.rows[1].n[cDuplicated] = 2
	for i, k := range []string{evKill, evKill, evCrashPoint, evPoisonKill, evPanic, evClock, evBlip, evServerKill, evServerUp, evPause, evResume, evOutage, evOutageOver} {
		h.events.add(event{at: at(3 + 3*float64(i)), kind: k})
	}
	path := os.Getenv("SOAK_PLOT_OUT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "soak.png")
	}
	if err := h.plot(rep, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the plot is not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 1000 {
		t.Errorf("the plot is %dx%d pixels; want at least 1000x1000", b.Dx(), b.Dy())
	}
}
