package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The chart: landed rows over time for the drain and side-by-side arms,
// landed rows/s for the sustained arms against their targets, and the
// sustained arms' latency per second of the schedule, one panel each,
// stacked, each with its legend to its right. Drawn with gonum/plot.

type series struct {
	name   string
	c      color.RGBA
	pts    [][2]float64
	dashed bool
}

type panel struct {
	title, unit string
	series      []series
	yLabel      func(float64) string // nil: plainFormat
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 255}, {0xd6, 0x27, 0x28, 255}, {0x2c, 0xa0, 0x2c, 255},
	{0xff, 0x7f, 0x0e, 255}, {0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255},
}

// The chart's layout in pixels of the PNG (96 dpi); an SVG's size is the
// same in points × 3/4.
const (
	chartW  = 1400
	headerH = 70
	panelH  = 360
	legendW = 400
	footerH = 10
)

func chartH(panels int) int { return headerH + panels*panelH + footerH }

// px is n pixels at the PNG's 96 dpi.
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / 96 }

// drawChart writes the chart of res to path: SVG if its name ends in
// .svg, PNG otherwise.
func drawChart(path string, res *result) error {
	format := "png"
	if strings.EqualFold(filepath.Ext(path), ".svg") {
		format = "svg"
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeChart(f, format, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeChart(w io.Writer, format string, res *result) error {
	panels := chartPanels(res)
	height := chartH(len(panels))
	cw, err := draw.NewFormattedCanvas(px(chartW), px(height), format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	dc.FillPolygon(color.White, []vg.Point{dc.Min, {X: dc.Min.X, Y: dc.Max.Y}, dc.Max, {X: dc.Max.X, Y: dc.Min.Y}})

	layout := "18.16 deviation: datetime + ms columns, ingest_ts 1 s"
	if res.Knobs["table_layout"] == "modern" {
		layout = "published layout: datetime64, ingest_ts now64(6)"
	}
	dc.FillText(chartText(16, color.Black), vg.Point{X: px(20), Y: dc.Max.Y - px(12)},
		fmt.Sprintf("sluice sensor-batch, profile %s, %s, %d cores", res.Profile, res.Date[:10], res.Machine.Cores))
	dc.FillText(chartText(12, color.Gray{90}), vg.Point{X: px(20), Y: dc.Max.Y - px(40)},
		fmt.Sprintf("clickhouse %s (%s)   kafka %s   %s   wazero %s",
			res.Versions["clickhouse"], layout, res.Versions["kafka"], res.Versions["go"], res.Versions["wazero"]))

	for i, pn := range panels {
		top := dc.Max.Y - px(headerH+i*panelH)
		bottom := top - px(panelH)
		plotArea := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: dc.Min.X, Y: bottom + px(8)}, Max: vg.Point{X: dc.Max.X - px(legendW), Y: top}}}
		legendArea := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: dc.Max.X - px(legendW-10), Y: bottom}, Max: vg.Point{X: dc.Max.X - px(10), Y: top - px(30)}}}
		p, legend, err := pn.plot()
		if err != nil {
			return fmt.Errorf("panel %q: %w", pn.title, err)
		}
		p.Draw(plotArea)
		legend.Draw(legendArea)
	}
	_, err = cw.WriteTo(w)
	return err
}

// chartPanels lays out what res has: the panels of the arms that ran.
func chartPanels(res *result) []panel {
	var panels []panel
	var rate []series
	if d := res.Drain; d != nil {
		rate = append(rate, series{name: "sluice avro drain", c: palette[0], pts: landedSeries(d.samples)})
	}
	if s := res.SideBySide; s != nil {
		rate = append(rate, series{name: "sluice json (side by side)", c: palette[2], pts: landedSeries(s.Sluice.samples)})
		rate = append(rate, series{name: "clickhouse kafka engine json", c: palette[1], pts: landedSeries(s.KafkaEngine.samples)})
		for i, f := range []*drainFigures{s.KafkaEngineFlush500, s.SluiceAvro, s.KafkaEngineAvro, s.KafkaEngineAvroFlush500} {
			if f == nil {
				continue
			}
			name := "sluice avro (side by side)"
			if f.System != "sluice" {
				name = fmt.Sprintf("clickhouse kafka engine %s flush %d ms", f.Format, f.KafkaFlushIntervalMs)
			}
			rate = append(rate, series{name: name, c: palette[(i+3)%len(palette)], pts: landedSeries(f.samples), dashed: f.Format == "avro"})
		}
	}
	if len(rate) > 0 {
		panels = append(panels, panel{title: "drain and side by side: rows landed in clickhouse vs seconds since start (slope = throughput)",
			unit: "rows", series: rate, yLabel: siFormat})
	}
	var sus, lat []series
	latencyTitle := "sustained latency (s) vs schedule: count-gap; ingest_ts p99 per second (lower bound, +0..1 s)"
	p99Label := "ingest_ts p99 lo "
	if res.Knobs["table_layout"] == "modern" {
		latencyTitle = "sustained latency (s) vs schedule: count-gap; ingest_ts (now64(6)) p99 per second"
		p99Label = "ingest_ts p99 "
	}
	for i, s := range res.Sustained {
		c := palette[(3+i)%len(palette)]
		label := fmt.Sprintf("%.0f%%", s.Fraction*100)
		sus = append(sus, series{name: "sluice " + label, c: c, pts: rateSeries(s.samples)})
		t0 := s.t0.Sub(s.start).Seconds()
		sus = append(sus, series{name: "target " + label, c: c, dashed: true,
			pts: [][2]float64{{t0, s.TargetRowsPerSec}, {t0 + s.DurationS, s.TargetRowsPerSec}}})
		var p99 [][2]float64
		for _, p := range s.PerSecond {
			p99 = append(p99, [2]float64{p[0] + 0.5, max(p[2], 0)})
		}
		lat = append(lat, series{name: "count-gap " + label, c: c, pts: s.CountGap},
			series{name: p99Label + label, c: c, pts: p99, dashed: true})
	}
	if len(sus) > 0 {
		panels = append(panels,
			panel{title: "sustained (open loop): landed rows/s vs seconds since sluice started", unit: "rows/s", series: sus, yLabel: siFormat},
			panel{title: latencyTitle, unit: "s", series: lat})
	}
	return panels
}

// plot is the panel's plot, both axes from 0, and its legend.
func (pn panel) plot() (*plot.Plot, plot.Legend, error) {
	p := plot.New()
	legend := plot.NewLegend()
	legend.Left, legend.Top = true, true
	legend.Padding = px(4)
	legend.ThumbnailWidth = px(30)
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font,
		&p.X.Tick.Label.Font, &p.Y.Tick.Label.Font, &legend.TextStyle.Font} {
		f.Variant = "Sans"
	}
	p.Title.Text = pn.title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = pn.unit
	yLabel := pn.yLabel
	if yLabel == nil {
		yLabel = plainFormat
	}
	p.X.Tick.Marker = niceTicks{n: 10, format: plainFormat}
	p.Y.Tick.Marker = niceTicks{n: 6, format: yLabel}
	p.Add(plotter.NewGrid())
	for _, s := range pn.series {
		xys := make(plotter.XYs, 0, len(s.pts))
		for _, pt := range s.pts {
			if !math.IsNaN(pt[0]+pt[1]) && !math.IsInf(pt[0]+pt[1], 0) {
				xys = append(xys, plotter.XY{X: pt[0], Y: pt[1]})
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, legend, fmt.Errorf("series %q: %w", s.name, err)
		}
		l.Color = s.c
		l.Width = px(2)
		if s.dashed {
			l.Dashes = []vg.Length{px(6), px(4)}
		}
		p.Add(l)
		legend.Add(s.name, l)
	}
	// Both axes start at 0 and end on a tick, the y axis with headroom
	// above the highest point.
	p.X.Min, p.Y.Min = 0, 0
	p.X.Max = roundUp(p.X.Max, 10)
	p.Y.Max = roundUp(p.Y.Max*1.05, 6)
	return p, legend, nil
}

// roundUp is hi rounded up to the step of about n ticks from 0, or 1
// when there is no data above 0.
func roundUp(hi float64, n int) float64 {
	if !(hi > 0) {
		return 1
	}
	step := niceStep(hi, n)
	return math.Ceil(hi/step) * step
}

func chartText(points vg.Length, c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, points),
		XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
}

// niceTicks marks about n ticks a 1, 2 or 5 × 10^k step apart, labelled
// by format.
type niceTicks struct {
	n      int
	format func(float64) string
}

func (t niceTicks) Ticks(lo, hi float64) []plot.Tick {
	step := niceStep(hi-lo, t.n)
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi+step/1e6; i++ {
		v := math.Round(i*step*1e6) / 1e6 // 0.3, not 0.30000000000000004
		ticks = append(ticks, plot.Tick{Value: v, Label: t.format(v)})
	}
	return ticks
}

// niceStep is a 1, 2 or 5 × 10^k step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if !(span > 0) {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// landedSeries is the rows landed over time.
func landedSeries(s []sample) [][2]float64 {
	pts := make([][2]float64, len(s))
	for i := range s {
		pts[i] = [2]float64{s[i].T, float64(s[i].Landed)}
	}
	return pts
}

// rateSeries is landed rows/s over a trailing one-second window.
func rateSeries(s []sample) [][2]float64 {
	var pts [][2]float64
	j := 0
	for i := range s {
		for j < i && s[i].T-s[j].T > 1.0 {
			j++
		}
		if j > 0 {
			k := j - 1
			pts = append(pts, [2]float64{s[i].T, float64(s[i].Landed-s[k].Landed) / (s[i].T - s[k].T)})
		}
	}
	return pts
}

func siFormat(v float64) string {
	switch {
	case math.Abs(v) >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case math.Abs(v) >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "K"
	}
	return plainFormat(v)
}

func plainFormat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
