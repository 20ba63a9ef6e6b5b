package quotes

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/sluicehq/sluice/engine"
)

// The chart: the setup, then a panel per table with a group of bars per
// percentile, a bar per run, and the ratio of the first run to the second
// above each group; below, where the time goes: the mean of every stage,
// stacked, per run and table, with its legend to its right. Drawn with
// gonum/plot, as the benchmark rig's chart is.

var (
	runColors   = []color.RGBA{{0xc8, 0x55, 0x3d, 255}, {0x2d, 0x6a, 0x8e, 255}, {0x6a, 0x99, 0x4e, 255}, {0x8c, 0x6b, 0xb1, 255}}
	stageColors = []color.RGBA{{0x7b, 0x6d, 0x8d, 255}, {0xf2, 0xc1, 0x4e, 255}, {0x6a, 0x99, 0x4e, 255},
		{0x9b, 0xc1, 0xbc, 255}, {0xe9, 0xa0, 0x3b, 255}, {0x5c, 0x5c, 0x5c, 255}}
	axisGray = color.Gray{0x44}
)

// The chart's layout in pixels at 96 dpi.
const (
	chartW       = 1000
	headerH      = 110
	percentilesH = 360
	stageRowH    = 34
	stagesGap    = 24 // between the percentile panels and the stage panel
	stagesExtraH = 90 // the stage panel's title and axis
	stageLegendW = 170
)

// px is n pixels at 96 dpi.
func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / 96 }

// WriteSVG draws the lag percentiles of every run, a panel per table and
// a group of bars per percentile with the ratio of the first run to the
// second above it; and below, where the time goes: the mean of every
// stage, stacked, per run and table.
func (r *Report) WriteSVG(w io.Writer) error { return r.writeChart(w, "svg") }

// writeChart draws the chart in format: svg, or png (to look at it in a
// test).
func (r *Report) writeChart(w io.Writer, format string) error {
	rows := len(r.Runs) * len(Tables)
	stagesH := stagesExtraH + rows*stageRowH
	height := headerH + percentilesH + stagesGap + stagesH
	cw, err := draw.NewFormattedCanvas(px(chartW), px(float64(height)), format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	dc.FillPolygon(color.White, []vg.Point{dc.Min, {X: dc.Min.X, Y: dc.Max.Y}, dc.Max, {X: dc.Max.X, Y: dc.Min.Y}})

	top := dc.Max.Y
	dc.FillText(chartText(17, color.Black, draw.XLeft), vg.Point{X: px(20), Y: top - px(14)},
		"sluice end-to-end lag by routing (sluice_end_to_end_seconds)")
	dc.FillText(chartText(12, axisGray, draw.XLeft), vg.Point{X: px(20), Y: top - px(44)},
		fmt.Sprintf("ClickHouse %s, 2 shards; the link from shard 1 to shard 2 adds %v each way (%v round trip)", r.Server, r.Latency, 2*r.Latency))
	machine := fmt.Sprintf("%d CPUs", r.CPUs)
	if r.Load != "" {
		machine += ", load average " + r.Load
	}
	dc.FillText(chartText(12, axisGray, draw.XLeft), vg.Point{X: px(20), Y: top - px(64)},
		fmt.Sprintf("%d quotes per run at %d/s, lag of all but the first %d; %s", r.Quotes, r.Rate, r.Warmup, machine))
	if len(r.Runs) >= 2 {
		dc.FillText(chartText(12, axisGray, draw.XLeft), vg.Point{X: px(20), Y: top - px(84)},
			fmt.Sprintf("×: %s / %s, above each group", r.Runs[0].Routing, r.Runs[1].Routing))
	}

	panels, err := r.percentilePlots()
	if err != nil {
		return err
	}
	panelTop := top - px(headerH)
	panelW := px(chartW) / vg.Length(len(panels))
	for i, p := range panels {
		x0 := dc.Min.X + vg.Length(i)*panelW
		p.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x0 + px(8), Y: panelTop - px(percentilesH)},
			Max: vg.Point{X: x0 + panelW - px(24), Y: panelTop}}})
	}

	stages, legend, err := r.stagePlot()
	if err != nil {
		return err
	}
	stagesTop := panelTop - px(percentilesH+stagesGap)
	stages.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: dc.Min.X + px(8), Y: dc.Min.Y + px(8)}, Max: vg.Point{X: dc.Max.X - px(stageLegendW), Y: stagesTop}}})
	legend.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: dc.Max.X - px(stageLegendW-10), Y: dc.Min.Y}, Max: vg.Point{X: dc.Max.X - px(10), Y: stagesTop - px(40)}}})
	_, err = cw.WriteTo(w)
	return err
}

// percentilePlots are the panels of the lag percentiles, one per table,
// on one scale, the runs' legend in the first.
func (r *Report) percentilePlots() ([]*plot.Plot, error) {
	var peak float64 // ms
	for _, run := range r.Runs {
		for _, t := range Tables {
			for _, q := range Quantiles {
				if v := quantile(run.Lag[t].EndToEnd, q.Q) * 1e3; !math.IsNaN(v) {
					peak = max(peak, v)
				}
			}
		}
	}
	var names []string
	for _, q := range Quantiles {
		names = append(names, q.Name)
	}
	const barW, barGap = 46, 6 // px
	var plots []*plot.Plot
	for pi, table := range Tables {
		p := newPlot("table "+table, "", "milliseconds")
		p.NominalX(names...)
		p.Legend.Top, p.Legend.Left = true, true
		highest := make([]float64, len(Quantiles)) // of each group, ms
		for ri, run := range r.Runs {
			ms := make(plotter.Values, len(Quantiles))
			var labels plotter.XYLabels
			for qi, q := range Quantiles {
				v := quantile(run.Lag[table].EndToEnd, q.Q) * 1e3
				if math.IsNaN(v) {
					continue // no bar, no label
				}
				ms[qi] = v
				highest[qi] = max(highest[qi], v)
				labels.XYs = append(labels.XYs, plotter.XY{X: float64(qi), Y: v})
				labels.Labels = append(labels.Labels, fmt.Sprintf("%.0f", v))
			}
			bars, err := plotter.NewBarChart(ms, px(barW))
			if err != nil {
				return nil, fmt.Errorf("table %s, routing %s: %w", table, run.Routing, err)
			}
			bars.Color = runColors[ri%len(runColors)]
			bars.LineStyle.Width = 0
			offset := (float64(ri) - float64(len(r.Runs)-1)/2) * (barW + barGap)
			bars.Offset = px(offset)
			p.Add(bars)
			if pi == 0 {
				p.Legend.Add("routing: "+run.Routing, bars)
			}
			if err := addLabels(p, labels, 11, color.Black, vg.Point{X: px(offset), Y: px(4)}, draw.XCenter, draw.YBottom); err != nil {
				return nil, err
			}
		}
		if len(r.Runs) >= 2 {
			var ratios plotter.XYLabels
			for qi, q := range Quantiles {
				ratios.XYs = append(ratios.XYs, plotter.XY{X: float64(qi), Y: highest[qi]})
				ratios.Labels = append(ratios.Labels, fmt.Sprintf("×%.2f", r.Ratio(table, q.Q)))
			}
			if err := addLabels(p, ratios, 13, color.Black, vg.Point{Y: px(22)}, draw.XCenter, draw.YBottom); err != nil {
				return nil, err
			}
		}
		p.X.Min, p.X.Max = -0.5, float64(len(Quantiles))-0.5 // a unit per group, for its bars
		p.Y.Min, p.Y.Max = 0, roundUp(peak*1.2)
		plots = append(plots, p)
	}
	return plots, nil
}

// stagePlot is the mean of every stage, stacked, a bar per run and table
// (the first at the top), with its mean at its end, and its legend.
func (r *Report) stagePlot() (*plot.Plot, plot.Legend, error) {
	p := newPlot("where the time goes: mean per stage (sluice_stage_seconds); they add up to the mean", "milliseconds", "")
	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Variant = "Sans"
	type row struct {
		name   string
		stages map[string]float64 // ms
		mean   float64
	}
	var rows []row
	for _, run := range r.Runs {
		for _, t := range Tables {
			rw := row{name: run.Routing + " " + t, stages: map[string]float64{}, mean: run.Lag[t].EndToEnd.Mean() * 1e3}
			for _, s := range engine.LagStages() {
				if v := run.Lag[t].Stages[s].Mean() * 1e3; !math.IsNaN(v) && v > 0 {
					rw.stages[s] = v
				}
			}
			rows = append(rows, rw)
		}
	}
	slices.Reverse(rows) // NominalY counts from the bottom
	var names []string
	var longest float64
	for _, rw := range rows {
		names = append(names, rw.name)
		total := 0.0
		for _, v := range rw.stages {
			total += v
		}
		longest = max(longest, total, rw.mean)
	}
	p.NominalY(names...)
	var below *plotter.BarChart
	var inside plotter.XYLabels // a stage's mean, where its bar is wide enough
	left := make([]float64, len(rows))
	for si, s := range engine.LagStages() {
		ms := make(plotter.Values, len(rows))
		for i, rw := range rows {
			ms[i] = rw.stages[s]
			if ms[i] >= longest/16 {
				inside.XYs = append(inside.XYs, plotter.XY{X: left[i] + ms[i]/2, Y: float64(i)})
				inside.Labels = append(inside.Labels, fmt.Sprintf("%.0f", ms[i]))
			}
			left[i] += ms[i]
		}
		bars, err := plotter.NewBarChart(ms, px(22))
		if err != nil {
			return nil, legend, fmt.Errorf("stage %s: %w", s, err)
		}
		bars.Horizontal = true
		bars.Color = stageColors[si%len(stageColors)]
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		below = bars
		p.Add(bars)
		legend.Add(s, bars)
	}
	if err := addLabels(p, inside, 11, color.Black, vg.Point{}, draw.XCenter, draw.YCenter); err != nil {
		return nil, legend, err
	}
	var means plotter.XYLabels
	for i, rw := range rows {
		if !math.IsNaN(rw.mean) {
			means.XYs = append(means.XYs, plotter.XY{X: left[i], Y: float64(i)})
			means.Labels = append(means.Labels, fmt.Sprintf("%.0f", rw.mean))
		}
	}
	if err := addLabels(p, means, 12, axisGray, vg.Point{X: px(8)}, draw.XLeft, draw.YCenter); err != nil {
		return nil, legend, err
	}
	p.X.Min, p.X.Max = 0, roundUp(longest*1.1)
	return p, legend, nil
}

// newPlot is a plot with the chart's font, its title and axis labels.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &p.Legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, xLabel, yLabel
	p.Title.TextStyle.Font.Size = vg.Points(12)
	return p
}

// addLabels adds the labels at their points moved by offset, aligned by x
// and y, in points of the given size and color.
func addLabels(p *plot.Plot, labels plotter.XYLabels, points vg.Length, c color.Color, offset vg.Point, x draw.XAlignment, y draw.YAlignment) error {
	if len(labels.Labels) == 0 {
		return nil
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i] = chartText(points, c, x)
		l.TextStyle[i].YAlign = y
	}
	l.Offset = offset
	p.Add(l)
	return nil
}

func chartText(points vg.Length, c color.Color, x draw.XAlignment) text.Style {
	return text.Style{Color: c, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, points),
		XAlign: x, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
}

// roundUp is hi rounded up to a 1, 2 or 5 × 10^k step of about five
// ticks from 0, or 1 when there is nothing above 0.
func roundUp(hi float64) float64 {
	if !(hi > 0) {
		return 1
	}
	step := niceStep(hi / 5)
	return math.Ceil(hi/step) * step
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}
