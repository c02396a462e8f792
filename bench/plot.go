package bench

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"time"
)

// xy is one point of a plotted line.
type xy struct{ X, Y float64 }

// Plot geometry, in SVG user units (pixels).
const (
	plotW, plotH                       = 1000, 600
	marginL, marginR, marginT, marginB = 80, 30, 50, 60
)

var plotColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"}

// PlotLatency draws the steady-load latency distribution of every relay as
// a cumulative distribution on a logarithmic time axis and writes it as an
// SVG to path. It reports false when there is nothing to plot. It needs
// nothing beyond the standard library, so the product module does not
// depend on a plotting library.
func PlotLatency(path string, res *Results) (bool, error) {
	s := res.Steady
	if s == nil {
		return false, nil
	}
	type line struct {
		label string
		pts   []xy
	}
	var lines []line
	for _, r := range s.Runs {
		if len(r.latencies) == 0 {
			continue
		}
		lines = append(lines, line{fmt.Sprintf("%s (p50 %.1f ms, p99 %.1f ms)", r.Relay, r.Latency.P50Ms, r.Latency.P99Ms), cdf(r.latencies, 300)})
	}
	if len(lines) == 0 {
		return false, nil
	}
	// The x axis spans whole decades around the data and the targets
	// teams wrote down for their relays (p95 < 1 s, p99 < 5 s).
	lo, hi := math.Inf(1), 5000.0
	for _, l := range lines {
		for _, p := range l.pts {
			lo, hi = math.Min(lo, p.X), math.Max(hi, p.X)
		}
	}
	dLo, dHi := math.Floor(math.Log10(math.Max(lo, 0.1))), math.Ceil(math.Log10(hi))
	px := func(ms float64) float64 {
		f := (math.Log10(math.Max(ms, 0.1)) - dLo) / (dHi - dLo)
		return marginL + f*(plotW-marginL-marginR)
	}
	py := func(frac float64) float64 { return plotH - marginB - frac*(plotH-marginT-marginB) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="28" text-anchor="middle" font-size="16">%s</text>`+"\n", plotW/2,
		html.EscapeString(fmt.Sprintf("Steady load, %d events/s: commit return to consumer receipt", s.TargetRate)))
	// Grid and ticks.
	for d := dLo; d <= dHi; d++ {
		x := px(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, marginT, x, plotH-marginB)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, plotH-marginB+18, tickLabel(math.Pow(10, d)))
	}
	for i := 0; i <= 10; i++ {
		y := py(float64(i) / 10)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", marginL, y, plotW-marginR, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", marginL-6, y+4, float64(i)/10)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="black"/>`+"\n", marginL, marginT, plotW-marginL-marginR, plotH-marginT-marginB)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">latency (ms, log scale)</text>`+"\n", (plotW+marginL-marginR)/2, plotH-15)
	fmt.Fprintf(&b, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">fraction of events delivered within</text>`+"\n", (plotH+marginT-marginB)/2)
	// Targets.
	for _, ms := range []float64{1000, 5000} {
		x := px(ms)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" stroke-dasharray="6 6"/>`+"\n", x, marginT, x, plotH-marginB)
	}
	// Lines and legend.
	legend := func(i int, color, dash, label string) {
		y := marginT + 20 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", marginL+10, y, marginL+40, y, color, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", marginL+48, y+4, html.EscapeString(label))
	}
	for i, l := range lines {
		color := plotColors[i%len(plotColors)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, color)
		for _, p := range l.pts {
			fmt.Fprintf(&b, "%.1f,%.1f ", px(p.X), py(p.Y))
		}
		b.WriteString("\"/>\n")
		legend(i, color, "", l.label)
	}
	legend(len(lines), "#999", ` stroke-dasharray="6 6"`, "targets teams set: p95 < 1 s, p99 < 5 s")
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// tickLabel formats a decade of milliseconds: 0.1, 1, 10, 100, 1000.
func tickLabel(ms float64) string {
	if ms < 1 {
		return fmt.Sprintf("%g", ms)
	}
	return fmt.Sprintf("%.0f", ms)
}

// cdf returns about points (latency ms, fraction) pairs of the sorted
// latencies: evenly spaced in rank, plus as many again in the tail beyond
// p99, where the percentiles of interest lie.
func cdf(sorted []time.Duration, points int) []xy {
	n := len(sorted)
	var qs []float64
	for i := 0; i <= points; i++ {
		qs = append(qs, float64(i)/float64(points))
	}
	for i := 0; i <= points; i++ {
		qs = append(qs, 1-math.Pow(10, -2-3*float64(i)/float64(points))) // p99 to p99.999
	}
	slices.Sort(qs)
	out := make([]xy, 0, len(qs))
	last := -1
	for _, q := range qs {
		idx := min(int(q*float64(n)), n-1)
		if idx == last {
			continue
		}
		last = idx
		ms := math.Max(float64(sorted[idx])/float64(time.Millisecond), 0.1)
		out = append(out, xy{X: ms, Y: float64(idx+1) / float64(n)})
	}
	return out
}
