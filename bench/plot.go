package bench

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// PlotLatency draws the steady-load latency distribution of every relay as
// a cumulative distribution on a logarithmic time axis and writes it as a
// PNG to path. It reports false when there is nothing to plot.
func PlotLatency(path string, res *Results) (bool, error) {
	s := res.Steady
	if s == nil {
		return false, nil
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Steady load, %d events/s: commit return to consumer receipt", s.TargetRate)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of events delivered within"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(10)
	p.Legend.YOffs = -vg.Points(10)

	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	drawn := 0
	for i, r := range s.Runs {
		if len(r.latencies) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdf(r.latencies, 300))
		if err != nil {
			return false, err
		}
		line.Color = colors[i%len(colors)]
		line.Width = vg.Points(2)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (p50 %.1f ms, p99 %.1f ms)", r.Relay, r.Latency.P50Ms, r.Latency.P99Ms), line)
		drawn++
	}
	if drawn == 0 {
		return false, nil
	}
	// Mark the targets teams wrote down for their relays: p95 < 1 s, p99 < 5 s.
	for _, t := range []struct {
		ms    float64
		label string
	}{{1000, "1 s"}, {5000, "5 s"}} {
		l, err := plotter.NewLine(plotter.XYs{{X: t.ms, Y: 0}, {X: t.ms, Y: 1}})
		if err != nil {
			return false, err
		}
		l.Color = color.Gray{Y: 0x99}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(l)
		if t.ms == 1000 {
			p.Legend.Add("targets teams set: p95 < 1 s, p99 < 5 s", l)
		}
	}
	p.X.Min = math.Max(p.X.Min, 0.1)
	if err := p.Save(10*vg.Inch, 6*vg.Inch, path); err != nil {
		return false, err
	}
	return true, nil
}

// cdf returns about points (latency ms, fraction) pairs of the sorted
// latencies: evenly spaced in rank, plus as many again in the tail beyond
// p99, where the percentiles of interest lie.
func cdf(sorted []time.Duration, points int) plotter.XYs {
	n := len(sorted)
	var qs []float64
	for i := 0; i <= points; i++ {
		qs = append(qs, float64(i)/float64(points))
	}
	for i := 0; i <= points; i++ {
		qs = append(qs, 1-math.Pow(10, -2-3*float64(i)/float64(points))) // p99 to p99.999
	}
	slices.Sort(qs)
	xy := make(plotter.XYs, 0, len(qs))
	last := -1
	for _, q := range qs {
		idx := min(int(q*float64(n)), n-1)
		if idx == last {
			continue
		}
		last = idx
		ms := math.Max(float64(sorted[idx])/float64(time.Millisecond), 0.1)
		xy = append(xy, plotter.XY{X: ms, Y: float64(idx+1) / float64(n)})
	}
	return xy
}
