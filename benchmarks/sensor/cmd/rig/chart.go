package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strings"
)

// The chart: landed rows/s over time for the drain and side-by-side arms,
// landed rows/s for the sustained arms against their targets, and the
// sustained arms' latency per second of the schedule. Drawn with
// image/png and a built-in bitmap font.

type series struct {
	name   string
	c      color.RGBA
	pts    [][2]float64
	dashed bool
}

var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 255}, {0xd6, 0x27, 0x28, 255}, {0x2c, 0xa0, 0x2c, 255},
	{0xff, 0x7f, 0x0e, 255}, {0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255},
}

const (
	chartW = 1400
	panelH = 360
	scale  = 2
)

func drawChart(path string, res *result) error {
	var panels []func(img *image.RGBA, top int)
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
		panels = append(panels, func(img *image.RGBA, top int) {
			plot(img, top, "drain and side by side: rows landed in clickhouse vs seconds since start (slope = throughput)", "rows", rate, siFormat)
		})
	}
	var sus, lat []series
	latencyTitle := "sustained latency (s) vs schedule: count-gap; ingest_ts p99 per second (lower bound, +0..1 s)"
	p99Label := "ingest_ts p99 lo "
	layout := "18.16 deviation: datetime + ms columns, ingest_ts 1 s"
	if res.Knobs["table_layout"] == "modern" {
		latencyTitle = "sustained latency (s) vs schedule: count-gap; ingest_ts (now64(6)) p99 per second"
		p99Label = "ingest_ts p99 "
		layout = "published layout: datetime64, ingest_ts now64(6)"
	}
	for i, s := range res.Sustained {
		c := palette[(3+i)%len(palette)]
		label := fmt.Sprintf("%.0f%%", s.Fraction*100)
		sus = append(sus, series{name: "sluice " + label, c: c, pts: rateSeries(s.samples)})
		sus = append(sus, series{name: "target " + label, c: c, dashed: true,
			pts: [][2]float64{{s.t0.Sub(s.start).Seconds(), s.TargetRowsPerSec}, {s.t0.Sub(s.start).Seconds() + s.DurationS, s.TargetRowsPerSec}}})
		var p99 [][2]float64
		for _, p := range s.PerSecond {
			p99 = append(p99, [2]float64{p[0] + 0.5, max(p[2], 0)})
		}
		lat = append(lat, series{name: "count-gap " + label, c: c, pts: s.CountGap},
			series{name: p99Label + label, c: c, pts: p99, dashed: true})
	}
	if len(sus) > 0 {
		panels = append(panels, func(img *image.RGBA, top int) {
			plot(img, top, "sustained (open loop): landed rows/s vs seconds since sluice started", "rows/s", sus, siFormat)
		})
		panels = append(panels, func(img *image.RGBA, top int) {
			plot(img, top, latencyTitle, "s", lat,
				func(v float64) string {
					return strings.TrimSuffix(strings.TrimSuffix(fmt.Sprintf("%.2f", v), "0"), ".0")
				})
		})
	}
	header := 70
	img := image.NewRGBA(image.Rect(0, 0, chartW, header+len(panels)*panelH+10))
	draw.Draw(img, img.Bounds(), image.NewUniform(color.White), image.Point{}, draw.Src)
	title := fmt.Sprintf("sluice sensor-batch, profile %s, %s, %d cores", res.Profile, res.Date[:10], res.Machine.Cores)
	drawText(img, 20, 12, title, scale, color.Black)
	sub := fmt.Sprintf("clickhouse %s (%s)  kafka %s  %s  wazero %s",
		res.Versions["clickhouse"], layout, res.Versions["kafka"], res.Versions["go"], res.Versions["wazero"])
	drawText(img, 20, 38, sub, scale, color.Gray{90})
	for i, p := range panels {
		p(img, header+i*panelH)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v/1e6), ".0") + "M"
	case v >= 1e3:
		return fmt.Sprintf("%.0fK", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// niceStep is a 1, 2 or 5 × 10^k step giving about n ticks over span.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func plot(img *image.RGBA, top int, title, unit string, ss []series, yfmt func(float64) string) {
	left, right := 110, chartW-30
	pTop, pBottom := top+40, top+panelH-70
	drawText(img, left, top+12, title, scale, color.Black)
	var xmax, ymax float64
	for _, s := range ss {
		for _, p := range s.pts {
			xmax = max(xmax, p[0])
			ymax = max(ymax, p[1])
		}
	}
	if xmax <= 0 {
		xmax = 1
	}
	if ymax <= 0 {
		ymax = 1
	}
	ystep := niceStep(ymax, 5)
	ymax = math.Ceil(ymax*1.05/ystep) * ystep
	xstep := niceStep(xmax, 10)
	xmax = math.Ceil(xmax/xstep) * xstep
	px := func(x float64) int { return left + int(x/xmax*float64(right-left)) }
	py := func(y float64) int { return pBottom - int(y/ymax*float64(pBottom-pTop)) }
	grid := color.Gray{225}
	for y := 0.0; y <= ymax+ystep/2; y += ystep {
		hline(img, left, right, py(y), grid)
		l := yfmt(y)
		drawText(img, left-10-textWidth(l, scale), py(y)-7, l, scale, color.Black)
	}
	for x := 0.0; x <= xmax+xstep/2; x += xstep {
		vline(img, px(x), pTop, pBottom, grid)
		l := fmt.Sprintf("%g", x)
		drawText(img, px(x)-textWidth(l, scale)/2, pBottom+8, l, scale, color.Black)
	}
	hline(img, left, right, pBottom, color.Black)
	vline(img, left, pTop, pBottom, color.Black)
	drawText(img, right-textWidth("seconds", scale), pBottom+28, "seconds", scale, color.Gray{90})
	drawText(img, 10, pTop-24, unit, scale, color.Gray{90})
	// Legend, below the axis.
	lx := left
	for _, s := range ss {
		if len(s.pts) == 0 {
			continue
		}
		for dx := 0; dx < 24; dx++ {
			if !s.dashed || dx%8 < 5 {
				for t := 0; t < 3; t++ {
					img.Set(lx+dx, pBottom+54+t, s.c)
				}
			}
		}
		drawText(img, lx+30, pBottom+49, s.name, scale, color.Black)
		lx += 30 + textWidth(s.name, scale) + 30
	}
	for _, s := range ss {
		for i := 1; i < len(s.pts); i++ {
			line(img, px(s.pts[i-1][0]), py(s.pts[i-1][1]), px(s.pts[i][0]), py(s.pts[i][1]), s.c, s.dashed)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// line draws a two-pixel-thick segment (Bresenham); dashed skips every
// other run of six pixels.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		if !dashed || (x0/6)%2 == 0 {
			img.Set(x0, y0, c)
			img.Set(x0+1, y0, c)
			img.Set(x0, y0+1, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
