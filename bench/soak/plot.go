package main

import (
	"fmt"
	"image/color"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plot draws, over the run's seconds, the triggers published and the
// effects performed (cumulative, in all and per pipeline), with the kills
// as vertical lines and the pauses and server downtimes as bands.
func (h *harness) plot(rep *report, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Oncegate soak, seed %d: %d intents, %d replicas", h.o.seed, len(h.w.intents), h.o.replicas)
	if h.o.broken {
		p.Title.Text += " (BROKEN BUILD: ack-early)"
	}
	p.X.Label.Text = "seconds since the start of the fault window"
	p.Y.Label.Text = "cumulative count"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	sec := func(t time.Time) float64 { return t.Sub(h.t0).Seconds() }
	cumulative := func(ts []time.Time) plotter.XYs {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		xys := make(plotter.XYs, 0, len(ts)+1)
		xys = append(xys, plotter.XY{X: 0, Y: 0})
		for i, t := range ts {
			xys = append(xys, plotter.XY{X: sec(t), Y: float64(i + 1)})
		}
		return xys
	}
	ymax := float64(max(len(rep.published), len(rep.effectsAt))) * 1.05
	xmax := 1.0
	for _, t := range append(slices.Clone(rep.published), timesOf(rep.effectsAt, "")...) {
		xmax = max(xmax, sec(t))
	}

	// Bands first, so that the lines draw over them.
	evs := h.events.snapshot()
	band := func(from, to float64, c color.Color) error {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: ymax}, {X: from, Y: ymax}})
		if err != nil {
			return err
		}
		poly.Color = c
		poly.LineStyle.Width = 0
		p.Add(poly)
		return nil
	}
	pauseColor := color.NRGBA{R: 255, G: 165, A: 70}
	downColor := color.NRGBA{R: 70, G: 130, B: 255, A: 60}
	var pauseThumb, downThumb *plotter.Polygon
	for i, ev := range evs {
		var endKind string
		var c color.Color
		switch ev.kind {
		case evPause:
			endKind, c = evResume, pauseColor
		case evServerTerm, evServerKill:
			endKind, c = evServerUp, downColor
		default:
			continue
		}
		end := time.Now()
		for _, e := range evs[i+1:] {
			if e.kind == endKind && (endKind == evServerUp || e.replica == ev.replica) {
				end = e.at
				break
			}
		}
		if err := band(sec(ev.at), sec(end), c); err != nil {
			return err
		}
		thumb := &plotter.Polygon{Color: c}
		if ev.kind == evPause && pauseThumb == nil {
			pauseThumb = thumb
			p.Legend.Add("consumer paused (SIGSTOP…SIGCONT)", thumb)
		}
		if ev.kind != evPause && downThumb == nil {
			downThumb = thumb
			p.Legend.Add("nats-server down", thumb)
		}
	}

	line := func(xys plotter.XYs, name string, c color.Color, width vg.Length, dashes []vg.Length) error {
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.LineStyle.Color, l.LineStyle.Width, l.LineStyle.Dashes = c, width, dashes
		p.Add(l)
		if name != "" {
			p.Legend.Add(name, l)
		}
		return nil
	}
	if err := line(cumulative(rep.published), "triggers published", color.Gray{Y: 120}, vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(3)}); err != nil {
		return err
	}
	if err := line(cumulative(timesOf(rep.effectsAt, "")), "effects, all sinks", color.Black, vg.Points(2), nil); err != nil {
		return err
	}
	colors := map[string]color.Color{
		pTriage: color.RGBA{R: 31, G: 119, B: 180, A: 255}, pCharges: color.RGBA{R: 44, G: 160, B: 44, A: 255},
		pNotify: color.RGBA{R: 148, G: 103, B: 189, A: 255}, pHooks: color.RGBA{R: 140, G: 86, B: 75, A: 255},
	}
	for _, name := range pipelines {
		if err := line(cumulative(timesOf(rep.effectsAt, name)), "effects, "+name, colors[name], vg.Points(1), nil); err != nil {
			return err
		}
	}

	// Kills and restarts as vertical lines.
	marks := []struct {
		kind   string
		label  string
		c      color.Color
		dashes []vg.Length
	}{
		{evKill, "SIGKILL consumer", color.RGBA{R: 220, A: 255}, nil},
		{evCrashPoint, "SIGKILL at a crash point", color.RGBA{R: 220, G: 80, B: 80, A: 255}, []vg.Length{vg.Points(2), vg.Points(2)}},
		{evServerTerm, "SIGTERM nats-server", color.RGBA{B: 200, A: 255}, nil},
		{evServerKill, "SIGKILL nats-server", color.RGBA{R: 120, B: 160, A: 255}, nil},
		{evClock, "ledger clock jump", color.RGBA{G: 150, A: 255}, []vg.Length{vg.Points(4), vg.Points(2)}},
	}
	for _, m := range marks {
		first := true
		for _, ev := range evs {
			if ev.kind != m.kind {
				continue
			}
			x := sec(ev.at)
			name := ""
			if first {
				name, first = m.label, false
			}
			if err := line(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}}, name, m.c, vg.Points(1), m.dashes); err != nil {
				return err
			}
		}
	}
	// A long settling tail (a stuck retry) would squeeze the fault window
	// into a corner: clip it, and say so.
	window := h.o.duration.Seconds()
	if xmax > 1.5*window {
		p.X.Label.Text += fmt.Sprintf(" (clipped: the last effect came at %.0fs)", xmax)
		xmax = 1.1 * window
	}
	p.X.Min, p.X.Max = 0, xmax*1.02
	p.Y.Min, p.Y.Max = 0, ymax
	return p.Save(14*vg.Inch, 7*vg.Inch, path)
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
