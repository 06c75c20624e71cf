package main

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart size in pixels, and the resolution used to turn it into plot units.
const (
	chartW   = 1400
	chartH   = 560
	chartDPI = 96
)

// systemColors keeps a system's colour the same in both panels and across runs.
var systemColors = map[string]color.RGBA{
	"quorumbus":          {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"quorumbus-sdk":      {R: 0x6b, G: 0xae, B: 0xd6, A: 0xff},
	"quorumbus-follower": {R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	"rabbit-091":         {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"rabbit-amqp10":      {R: 0xd6, G: 0x9e, B: 0x2f, A: 0xff},
	"nats":               {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

func colorOf(sys string, i int) color.Color {
	if c, ok := systemColors[sys]; ok {
		return c
	}
	gray := uint8(40 + 40*(i%4))
	return color.RGBA{R: gray, G: gray, B: gray, A: 0xff}
}

var errNoData = errors.New("chart: no results to draw")

// writeChart draws a chartW x chartH PNG: on the left the median throughput of each
// system for each throughput test (grouped bars), on the right each system's latency
// CDF (for each fraction, the median over the repetitions), latency on a log axis.
func writeChart(w io.Writer, raw Raw) error {
	sums := summarize(raw)
	if len(sums) == 0 {
		return errNoData
	}
	bars, err := throughputPlot(sums)
	if err != nil {
		return err
	}
	cdf, err := cdfPlot(sums, raw)
	if err != nil {
		return err
	}
	pt := func(px int) vg.Length { return vg.Length(px) * vg.Inch / chartDPI }
	img := vgimg.NewWith(vgimg.UseWH(pt(chartW), pt(chartH)), vgimg.UseDPI(chartDPI),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(24), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	cs := plot.Align([][]*plot.Plot{{bars, cdf}}, tiles, dc)
	bars.Draw(cs[0][0])
	cdf.Draw(cs[0][1])
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// throughputTests are the bar groups: each send window, then each receive prefetch.
type throughputTest struct {
	name  string
	value func(Summary) Stat
}

func throughputTests(sums []Summary) []throughputTest {
	var windows, prefetches []int
	for _, s := range sums {
		for _, w := range sortedKeys(s.Send) {
			windows = appendNew(windows, w)
		}
		for _, p := range sortedKeys(s.Recv) {
			prefetches = appendNew(prefetches, p)
		}
	}
	slices.Sort(windows)
	slices.Sort(prefetches)
	var out []throughputTest
	for _, w := range windows {
		out = append(out, throughputTest{fmt.Sprintf("send W=%d", w), func(s Summary) Stat { return s.Send[w] }})
	}
	for _, p := range prefetches {
		out = append(out, throughputTest{fmt.Sprintf("receive+ack P=%d", p), func(s Summary) Stat { return s.Recv[p] }})
	}
	return out
}

func throughputPlot(sums []Summary) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Throughput (median msg/s, 1 KiB messages)"
	p.Y.Label.Text = "msg/s"
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	tests := throughputTests(sums)
	if len(tests) == 0 {
		p.Title.Text += ": no throughput results"
		return p, nil
	}
	names := make([]string, len(tests))
	for i, t := range tests {
		names[i] = t.name
	}
	p.NominalX(names...)
	width := vg.Points(math.Min(28, 240/float64(len(sums))))
	top := 0.0
	for i, s := range sums {
		vals := make(plotter.Values, len(tests))
		for j, t := range tests {
			vals[j] = t.value(s).Median // 0 when not measured: no bar
			top = math.Max(top, vals[j])
		}
		bc, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("chart: %s: %w", s.System, err)
		}
		bc.Color = colorOf(s.System, i)
		bc.LineStyle.Width = 0
		bc.Offset = width * vg.Length(float64(i)-float64(len(sums)-1)/2)
		p.Add(bc)
		p.Legend.Add(shortLabel(s.System), bc)
	}
	p.Y.Max = top * 1.25 // room for the legend above the bars
	p.Add(plotter.NewGrid())
	return p, nil
}

func cdfPlot(sums []Summary, raw Raw) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "End-to-end latency CDF"
	if r := summarize(raw); len(r) > 0 && r[0].LatRate.N > 0 {
		p.Title.Text = fmt.Sprintf("End-to-end latency CDF at %.0f msg/s (from scheduled send)", r[0].LatRate.Median)
	}
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of messages"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	drawn := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range sums {
		if len(s.CDF) == 0 {
			continue
		}
		xys := make(plotter.XYs, 0, len(s.CDF)+1)
		for _, pt := range s.CDF {
			// A log axis has no zero: clamp to a microsecond.
			x := math.Max(pt.Ms, 0.001)
			lo, hi = math.Min(lo, x), math.Max(hi, x)
			xys = append(xys, plotter.XY{X: x, Y: pt.Q})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("chart: %s CDF: %w", s.System, err)
		}
		l.Color = colorOf(s.System, i)
		l.Width = vg.Points(2)
		p.Add(l)
		p.Legend.Add(shortLabel(s.System), l)
		drawn++
	}
	if drawn > 0 {
		// Set the range by hand: the automatic one pads a single value to below zero,
		// which a log axis cannot show.
		p.X.Min, p.X.Max = lo, math.Max(hi, lo*10)
	} else {
		// An empty log axis cannot be drawn; show the message on a linear one.
		p.X.Scale = plot.LinearScale{}
		p.X.Tick.Marker = plot.DefaultTicks{}
		p.X.Min, p.X.Max = 0, 1
		p.Title.Text += ": no latency results"
	}
	p.Add(plotter.NewGrid())
	return p, nil
}
