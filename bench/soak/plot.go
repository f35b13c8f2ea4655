package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/oncegate/oncegate/bench/internal/plotkit"
)

// plot draws the run as a column of panels on one time axis (seconds since
// the start of the fault window), the verdict in the title:
//
//   - the triggers published and the effects performed, in all;
//   - one panel per pipeline: its effects, beside a line at its intents;
//   - the faults, one lane per kind: kills, restarts and clock jumps as
//     ticks, pauses and downtimes as bars;
//
// and under them the intents lost and duplicated per pipeline (0 in a run
// that passes). Each panel's legend sits to its right, off the data.
func (h *harness) plot(rep *report, path string) error {
	if rep.hostile == nil { // a report made by hand, in a test
		rep.hostile = newRow("hostile", "must be dead-lettered")
	}
	sec := func(t time.Time) float64 { return t.Sub(h.t0).Seconds() }
	xmax := 1.0
	for _, t := range append(slices.Clone(rep.published), timesOf(rep.effectsAt, "")...) {
		xmax = max(xmax, sec(t))
	}
	// A long settling tail (a stuck retry) would squeeze the fault window
	// into a corner: clip it past three windows, and say so. (Settling
	// after an outage commonly takes two windows, and clipping that would
	// hide where most effects land.)
	xLabel := "seconds since the start of the fault window"
	if window := h.o.duration.Seconds(); xmax > 3*window {
		xLabel += fmt.Sprintf(" (clipped: the last effect came at %.0fs)", xmax)
		xmax = 3 * window
	}
	xmax *= 1.02

	var panels []panel
	timePanel := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = vg.Points(11)
		p.Y.Label.Text = ylabel
		p.X.Min, p.X.Max = 0, xmax
		p.X.Tick.Marker = plotkit.Ticks{}
		p.Y.Tick.Marker = plotkit.Ticks{}
		p.Add(plotter.NewGrid())
		return p
	}

	// All triggers and effects.
	all := timePanel("Triggers published and effects performed, all pipelines", "cumulative count")
	leg := plot.NewLegend()
	if err := addLine(all, &leg, cumulative(rep.published, sec), "triggers published", color.Gray{Y: 110}, vg.Points(1.5), dashed); err != nil {
		return err
	}
	if err := addLine(all, &leg, cumulative(timesOf(rep.effectsAt, ""), sec), "effects, all sinks", color.Black, vg.Points(2), nil); err != nil {
		return err
	}
	all.Y.Min = 0
	panels = append(panels, panel{all, leg, 2})

	// One panel per pipeline.
	for _, name := range pipelines {
		p := timePanel("Pipeline "+name+" ("+sinkOf(rep, name)+")", "effects")
		p.Y.Tick.Marker = plotkit.Ticks{N: 4}
		leg := plot.NewLegend()
		ts := timesOf(rep.effectsAt, name)
		if err := addLine(p, &leg, cumulative(ts, sec), fmt.Sprintf("effects (%s)", plotkit.Thousands(len(ts))), pipelineColors[name], vg.Points(2), nil); err != nil {
			return err
		}
		if n := intentsOf(rep, name); n > 0 {
			if err := addLine(p, &leg, plotter.XYs{{X: 0, Y: float64(n)}, {X: xmax, Y: float64(n)}}, fmt.Sprintf("intents (%s)", plotkit.Thousands(n)), color.Gray{Y: 110}, vg.Points(1), dashed); err != nil {
				return err
			}
		}
		p.Y.Min = 0
		panels = append(panels, panel{p, leg, 1})
	}

	// The faults, one lane per kind that happened.
	faults, leg, err := h.faultLanes(timePanel("Faults injected", ""), sec, xmax)
	if err != nil {
		return err
	}
	faults.X.Label.Text = xLabel
	panels = append(panels, panel{faults, leg, 2})

	// Lost and duplicated intents, per pipeline.
	ld, leg, err := lostDuplicated(rep)
	if err != nil {
		return err
	}
	panels = append(panels, panel{ld, leg, 1.6})

	// Adding a line past xmax (the clipped tail) widens its axis: put every
	// time axis back on the one range.
	for _, pn := range panels[:len(panels)-1] {
		pn.p.X.Min, pn.p.X.Max = 0, xmax
	}

	verdict := "PASS"
	if !rep.pass() {
		verdict = "FAIL"
	}
	t := rep.totals()
	title := fmt.Sprintf("Oncegate soak: %s — %s lost, %s duplicated of %s intents (seed %d, %d replicas)",
		verdict, plotkit.Thousands(t[cLost]), plotkit.Thousands(t[cDuplicated]), plotkit.Thousands(len(h.w.intents)), h.o.seed, h.o.replicas)
	if h.o.broken {
		title += ", BROKEN BUILD: ack-early"
	}
	if h.o.brokenLedger {
		title += ", BROKEN BUILD: commit-skips-token"
	}
	return savePanels(path, title, verdict == "PASS", panels)
}

// A panel is one plot of the column, its legend, and its height in units.
type panel struct {
	p      *plot.Plot
	legend plot.Legend
	height float64
}

var dashed = []vg.Length{vg.Points(5), vg.Points(3)}

var pipelineColors = map[string]color.Color{
	pTriage: color.RGBA{R: 31, G: 119, B: 180, A: 255}, pCharges: color.RGBA{R: 44, G: 160, B: 44, A: 255},
	pNotify: color.RGBA{R: 148, G: 103, B: 189, A: 255}, pHooks: color.RGBA{R: 140, G: 86, B: 75, A: 255},
	pPoison: color.RGBA{R: 227, G: 119, B: 194, A: 255},
}

// savePanels draws the panels in a column, the plots aligned on their data
// areas and each legend to the right of its plot, under a title in green
// (pass) or red (fail), and writes a PNG (or whatever path's extension
// names) to path.
func savePanels(path, title string, pass bool, panels []panel) error {
	const width = 13 * vg.Inch
	const unit = 1.45 * vg.Inch
	const titleH = 0.5 * vg.Inch
	const legendW = 2.9 * vg.Inch
	total := 0.0
	for _, p := range panels {
		total += p.height
	}
	height := titleH + vg.Length(total)*unit
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	ts := draw.TextStyle{Color: color.RGBA{R: 20, G: 110, B: 40, A: 255}, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YCenter}
	if !pass {
		ts.Color = color.RGBA{R: 190, G: 20, B: 20, A: 255}
	}
	ts.Font.Size = vg.Points(15)
	dc.FillText(ts, vg.Point{X: width / 2, Y: height - titleH/2}, title)

	// Each plot gets a band of the column as high as its units; the bands
	// are then narrowed so that every plot's data area spans the same x.
	canvases := make([]draw.Canvas, len(panels))
	var padL, padR vg.Length
	top := height - titleH
	for i, pn := range panels {
		h := vg.Length(pn.height) * unit
		canvases[i] = draw.Crop(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: 0, Y: top - h}, Max: vg.Point{X: width - legendW, Y: top},
		}}, 0.15*vg.Inch, 0, 0.05*vg.Inch, -0.05*vg.Inch)
		da := pn.p.DataCanvas(canvases[i])
		padL = max(padL, da.Min.X-canvases[i].Min.X)
		padR = max(padR, canvases[i].Max.X-da.Max.X)
		top -= h
	}
	top = height - titleH
	for i, pn := range panels {
		h := vg.Length(pn.height) * unit
		c := canvases[i]
		da := pn.p.DataCanvas(c)
		pn.p.Draw(draw.Crop(c, padL-(da.Min.X-c.Min.X), -(padR - (c.Max.X - da.Max.X)), 0, 0))
		lc := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: width - legendW + 0.15*vg.Inch, Y: top - h}, Max: vg.Point{X: width - 0.1*vg.Inch, Y: top - 0.3*vg.Inch},
		}}
		pn.legend.Top, pn.legend.Left = true, true
		pn.legend.Draw(lc)
		top -= h
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// addLine adds a line to p and, named, to leg.
func addLine(p *plot.Plot, leg *plot.Legend, xys plotter.XYs, name string, c color.Color, width vg.Length, dashes []vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.LineStyle.Color, l.LineStyle.Width, l.LineStyle.Dashes = c, width, dashes
	p.Add(l)
	if name != "" {
		leg.Add(name, l)
	}
	return nil
}

// cumulative returns the count of ts up to each of them.
func cumulative(ts []time.Time, sec func(time.Time) float64) plotter.XYs {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	xys := make(plotter.XYs, 0, len(ts)+1)
	xys = append(xys, plotter.XY{X: 0, Y: 0})
	for i, t := range ts {
		xys = append(xys, plotter.XY{X: sec(t), Y: float64(i + 1)})
	}
	return xys
}

// faultLanes draws the faults on p, one lane per kind that happened: the
// instant ones as ticks, the ones that last as bars.
func (h *harness) faultLanes(p *plot.Plot, sec func(time.Time) float64, xmax float64) (*plot.Plot, plot.Legend, error) {
	evs := h.events.snapshot()
	type lane struct {
		kinds  []string
		label  string
		c      color.Color
		endsAt string // the kind that ends a bar; "" for ticks
	}
	lanes := []lane{
		{[]string{evKill}, "SIGKILL consumer", color.RGBA{R: 220, A: 255}, ""},
		{[]string{evCrashPoint}, "SIGKILL at a crash point", color.RGBA{R: 220, G: 80, B: 80, A: 255}, ""},
		{[]string{evPoisonKill}, "SIGKILL by a poison trigger", pipelineColors[pPoison], ""},
		{[]string{evPanic}, "consumer died of a panic", color.RGBA{R: 255, A: 255}, ""},
		{[]string{evPause}, "consumer paused (SIGSTOP)", color.RGBA{R: 255, G: 150, A: 255}, evResume},
		{[]string{evOutage}, "every consumer replica down", color.RGBA{R: 200, G: 40, B: 40, A: 255}, evOutageOver},
		{[]string{evServerTerm, evServerKill}, "nats-server down", color.RGBA{R: 70, G: 130, B: 255, A: 255}, evServerUp},
		{[]string{evClock}, "ledger clock jump", color.RGBA{G: 150, A: 255}, ""},
		{[]string{evBlip}, "ledger blip", color.RGBA{R: 230, G: 150, A: 255}, ""},
	}
	leg := plot.NewLegend() // empty: the lanes are named on the axis
	var ticks []plot.Tick
	y := 0.0
	for _, ln := range slices.Backward(lanes) {
		n := 0
		for i, ev := range evs {
			if !slices.Contains(ln.kinds, ev.kind) {
				continue
			}
			n++
			x := sec(ev.at)
			if ln.endsAt == "" {
				if err := addLine(p, nil, plotter.XYs{{X: x, Y: y - 0.35}, {X: x, Y: y + 0.35}}, "", ln.c, vg.Points(1.5), nil); err != nil {
					return nil, leg, err
				}
				continue
			}
			end := time.Now()
			for _, e := range evs[i+1:] {
				if e.kind == ln.endsAt && (ln.endsAt != evResume || e.replica == ev.replica) {
					end = e.at
					break
				}
			}
			to := max(sec(end), x+xmax/400) // a bar stays visible however short
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x, Y: y - 0.3}, {X: to, Y: y - 0.3}, {X: to, Y: y + 0.3}, {X: x, Y: y + 0.3}})
			if err != nil {
				return nil, leg, err
			}
			r, g, b, _ := ln.c.RGBA()
			poly.Color = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 150}
			poly.LineStyle.Width = 0
			p.Add(poly)
		}
		if n == 0 {
			continue
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: fmt.Sprintf("%s ×%d", ln.label, n)})
		y++
	}
	if len(ticks) == 0 {
		ticks = append(ticks, plot.Tick{Value: 0, Label: "none"})
		y = 1
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.6, y-0.4
	return p, leg, nil
}

// lostDuplicated returns a bar chart of the intents lost and duplicated per
// pipeline (and among the hostile triggers), each bar labelled with its
// count, so that a run that passes shows its zeros.
func lostDuplicated(rep *report) (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	p.Title.Text = "Intents lost and duplicated, per pipeline"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.Text = "intents"
	p.Y.Tick.Marker = plotkit.Ticks{Whole: true}
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	rows := append(slices.Clone(rep.rows), rep.hostile)
	var names []string
	var lost, dup plotter.Values
	for _, r := range rows {
		if r == nil {
			continue
		}
		names = append(names, r.name)
		lost = append(lost, float64(r.n[cLost]))
		dup = append(dup, float64(r.n[cDuplicated]))
	}
	if len(names) == 0 {
		p.Title.Text += ": no intents checked"
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
		return p, leg, nil
	}
	w := vg.Points(22)
	top := 1.0
	for _, s := range []struct {
		vs    plotter.Values
		name  string
		c     color.Color
		shift vg.Length
	}{
		{lost, "lost", color.RGBA{R: 200, G: 30, B: 30, A: 255}, -w / 2},
		{dup, "duplicated", color.RGBA{R: 240, G: 140, A: 255}, w / 2},
	} {
		b, err := plotter.NewBarChart(s.vs, w)
		if err != nil {
			return nil, leg, err
		}
		b.Color, b.LineStyle.Width, b.Offset = s.c, 0, s.shift
		p.Add(b)
		leg.Add(s.name, b)
		xys := make(plotter.XYs, len(s.vs))
		labels := make([]string, len(s.vs))
		for j, v := range s.vs {
			xys[j] = plotter.XY{X: float64(j), Y: v}
			labels[j] = plotkit.Thousands(int(v))
			top = max(top, v)
		}
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return nil, leg, err
		}
		for j := range l.TextStyle {
			l.TextStyle[j].XAlign = draw.XCenter
			l.TextStyle[j].YAlign = draw.YBottom
			l.TextStyle[j].Font.Size = vg.Points(10)
		}
		l.Offset = vg.Point{X: s.shift, Y: vg.Points(2)}
		p.Add(l)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = 0, math.Ceil(top*1.35)
	return p, leg, nil
}

// intentsOf returns the number of intents of a pipeline, and sinkOf what
// its effect goes to.
func intentsOf(rep *report, name string) int {
	for _, r := range rep.rows {
		if r.name == name {
			return r.intents
		}
	}
	return 0
}

func sinkOf(rep *report, name string) string {
	for _, r := range rep.rows {
		if r.name == name {
			return r.sink
		}
	}
	return ""
}

// timesOf returns the times of the effects of a pipeline, or of all for "".
func timesOf(ts []timed, pipeline string) []time.Time {
	var out []time.Time
	for _, t := range ts {
		if pipeline == "" || t.pipeline == pipeline {
			out = append(out, t.at)
		}
	}
	return out
}
