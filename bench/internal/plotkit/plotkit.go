// Package plotkit holds what the benchmarks' plots share: round, labelled
// ticks and a legend drawn beside a plot rather than over its data.
package plotkit

import (
	"image/color"
	"math"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Ticks labels 4 to 8 ticks at round values (1, 2 or 5 times a power
// of ten), with thousands separated: 0, 5,000, 10,000, ...
// N is about how many (5 if 0).
type Ticks struct {
	N     int
	Whole bool // no step under 1: for counts
}

// Ticks returns the ticks from lo to hi.
func (t Ticks) Ticks(lo, hi float64) []plot.Tick {
	if hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatTick(lo, 1)}}
	}
	n := t.N
	if n == 0 {
		n = 5
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	if t.Whole {
		step = max(step, 1)
	}
	minor := !t.Whole || step >= 5 // whole counts get no minor ticks between
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: formatTick(v, step)})
		for k := 1; minor && k < 5; k++ { // unlabelled minor ticks
			if m := v + float64(k)*step/5; m < hi {
				ticks = append(ticks, plot.Tick{Value: m})
			}
		}
	}
	return ticks
}

func formatTick(v, step float64) string {
	if step >= 1 {
		return Thousands(int(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', int(math.Ceil(-math.Log10(step))), 64)
}

// Thousands formats n with commas between groups of three digits.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// SaveBeside writes p as a PNG of the given size to path, with p's legend
// in a column of legendW to the right of the plot, off its data (none if
// legendW is 0).
func SaveBeside(p *plot.Plot, width, height, legendW vg.Length, path string) error {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.New(width, height)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	pc := dc
	if legendW > 0 {
		pc.Max.X -= legendW
		lc := dc
		lc.Min.X = pc.Max.X + 0.1*vg.Inch
		lc.Max.Y -= 0.35 * vg.Inch
		leg.Top, leg.Left = true, true
		leg.Draw(lc)
	}
	p.Draw(pc)
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
