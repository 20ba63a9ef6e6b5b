package quotes

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Quantiles are the percentiles the report gives.
var Quantiles = []struct {
	Name string
	Q    float64
}{{"p50", 0.50}, {"p95", 0.95}, {"p99", 0.99}}

// Report is the runs side by side, the routing compared first.
type Report struct {
	Server  string        // the ClickHouse version
	CPUs    int           // of this machine
	Latency time.Duration // the link's one-way delay
	Quotes  int           // per run
	Rate    int           // quotes per second
	Warmup  int           // quotes left out of the lag figures
	// Load, if set, says how busy the machine was (its load average at
	// the start and the end).
	Load string
	Runs []*Result
}

// Ratio is the first run's lag over the second's at quantile q, for table.
func (r *Report) Ratio(table string, q float64) float64 {
	if len(r.Runs) < 2 {
		return math.NaN()
	}
	return quantile(r.Runs[0].Lag[table].EndToEnd, q) / quantile(r.Runs[1].Lag[table].EndToEnd, q)
}

// Setup is one line saying what was run where.
func (r *Report) Setup() string {
	s := fmt.Sprintf("ClickHouse %s, 2 shards; the link from shard 1 to shard 2 adds %v each way (%v round trip); %d quotes per run at %d/s; %d CPUs",
		r.Server, r.Latency, 2*r.Latency, r.Quotes, r.Rate, r.CPUs)
	if r.Load != "" {
		s += ", load average " + r.Load
	}
	return s
}

// WriteText writes the runs' landed counts and lag percentiles, their
// ratios, and the mean of every stage.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintln(&b, r.Setup())
	fmt.Fprintf(&b, "lag: sluice_end_to_end_seconds{pipeline=\"quotes\"} from sluice's /metrics, less the samples of each run's first %d quotes\n\n", r.Warmup)
	row := func(label string, cells ...string) {
		fmt.Fprintf(&b, "%-24s", label)
		for _, c := range cells {
			fmt.Fprintf(&b, "%9s", c)
		}
		b.WriteString("\n")
	}
	head := []string{"produced", "landed", "inserted", "samples"}
	for _, q := range Quantiles {
		head = append(head, q.Name)
	}
	row("routing, table", append(head, "mean")...)
	for _, run := range r.Runs {
		for _, t := range Tables {
			l := run.Lag[t].EndToEnd
			cells := []string{fmt.Sprint(run.Produced), fmt.Sprint(run.Landed[t]), fmt.Sprint(run.Inserted[t]), fmt.Sprint(l.Count)}
			for _, q := range Quantiles {
				cells = append(cells, ms(quantile(l, q.Q)))
			}
			row(run.Routing+" "+t, append(cells, ms(l.Mean()))...)
		}
	}
	if len(r.Runs) >= 2 {
		b.WriteString("\n")
		var head []string
		for _, q := range Quantiles {
			head = append(head, q.Name)
		}
		row(r.Runs[0].Routing+" / "+r.Runs[1].Routing, append(head, "mean")...)
		for _, t := range Tables {
			var cells []string
			for _, q := range Quantiles {
				cells = append(cells, fmt.Sprintf("%.2f×", r.Ratio(t, q.Q)))
			}
			row(t, append(cells, fmt.Sprintf("%.2f×", r.Runs[0].Lag[t].EndToEnd.Mean()/r.Runs[1].Lag[t].EndToEnd.Mean()))...)
		}
	}
	b.WriteString("\n")
	row("mean per stage", engine.LagStages()...)
	for _, run := range r.Runs {
		for _, t := range Tables {
			var cells []string
			for _, s := range engine.LagStages() {
				cells = append(cells, ms(run.Lag[t].Stages[s].Mean()))
			}
			row(run.Routing+" "+t, cells...)
		}
	}
	b.WriteString("\n")
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "%s, whole run: %d inserts, %.0f rows each on average", run.Routing, run.Inserts, float64(run.RowsInserted)/float64(max(run.Inserts, 1)))
		if si := run.Server; si != nil {
			fmt.Fprintf(&b, "; on the servers (system.query_log): %d to shard 1, median %v, %d to shard 2", si.Sent[0], si.SentMedian[0], si.Sent[1])
			if si.Sent[1] > 0 {
				fmt.Fprintf(&b, ", median %v", si.SentMedian[1])
			}
			if si.Forwarded > 0 {
				fmt.Fprintf(&b, "; %d of them sent rows on to shard 2 over the link and took %v to %v, median %v",
					si.Forwarded, si.ForwardedMin, si.ForwardedMax, si.ForwardedMedian)
			} else {
				b.WriteString("; none crossed the link")
			}
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ms formats seconds as milliseconds, or seconds above 10 s.
func ms(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s >= 10:
		return fmt.Sprintf("%.1fs", s)
	case s >= 0.1:
		return fmt.Sprintf("%.0fms", s*1e3)
	default:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
}

// WriteSVG draws the lag percentiles of every run, a panel per table and
// a group of bars per percentile with the ratio of the first run to the
// second above it; and below, where the time goes: the mean of every
// stage, stacked, per run and table.
func (r *Report) WriteSVG(w io.Writer) error {
	const (
		width, height    = 960, 700
		left, right      = 70, 20
		top, plotH       = 118, 300 // the percentile panels
		gap              = 50       // between panels
		barGap, groupGap = 4, 28
		stagesTop        = 530 // the stage bars
		stageBarH        = 22
		axisColor        = "#444"
		gridColor        = "#bbb"
	)
	runColors := []string{"#c8553d", "#2d6a8e", "#6a994e", "#8c6bb1"}
	stageColors := []string{"#7b6d8d", "#f2c14e", "#6a994e", "#9bc1bc", "#e9a03b", "#5c5c5c"}
	var b strings.Builder
	text := func(x, y float64, attrs, s string) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" %s>%s</text>`+"\n", x, y, attrs, html.EscapeString(s))
	}
	rect := func(x, y, w, h float64, fill string) {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, y, w, h, fill)
	}
	line := func(x1, y1, x2, y2 float64, stroke string, width float64) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%.1f"/>`+"\n", x1, y1, x2, y2, stroke, width)
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		width, height, width, height)
	rect(0, 0, width, height, "white")
	text(left, 26, `font-size="17" font-weight="bold"`, "sluice end-to-end lag by routing (sluice_end_to_end_seconds)")
	text(left, 48, `fill="`+axisColor+`"`, fmt.Sprintf("ClickHouse %s, 2 shards; the link from shard 1 to shard 2 adds %v each way (%v round trip)", r.Server, r.Latency, 2*r.Latency))
	machine := fmt.Sprintf("%d CPUs", r.CPUs)
	if r.Load != "" {
		machine += ", load average " + r.Load
	}
	text(left, 66, `fill="`+axisColor+`"`, fmt.Sprintf("%d quotes per run at %d/s, lag of all but the first %d; %s", r.Quotes, r.Rate, r.Warmup, machine))
	x := float64(left)
	for i, run := range r.Runs {
		rect(x, 80, 14, 14, runColors[i%len(runColors)])
		text(x+20, 92, "", "routing: "+run.Routing)
		x += 190
	}
	if len(r.Runs) >= 2 {
		text(x, 92, `fill="`+axisColor+`"`, fmt.Sprintf("×: %s / %s", r.Runs[0].Routing, r.Runs[1].Routing))
	}

	var peak float64
	for _, run := range r.Runs {
		for _, t := range Tables {
			for _, q := range Quantiles {
				if v := quantile(run.Lag[t].EndToEnd, q.Q); !math.IsNaN(v) {
					peak = max(peak, v*1e3)
				}
			}
		}
	}
	step := niceStep(peak / 5)
	yMax := math.Ceil(peak/step) * step
	if yMax <= 0 {
		yMax, step = 1, 0.2
	}
	y := func(v float64) float64 { return float64(top) + plotH - v/yMax*plotH }
	panelW := float64(width-left-right-gap*(len(Tables)-1)) / float64(len(Tables))
	for pi, table := range Tables {
		x0 := float64(left) + float64(pi)*(panelW+gap)
		for v := 0.0; v <= yMax+step/2; v += step {
			line(x0, y(v), x0+panelW, y(v), gridColor, 0.6)
			if pi == 0 {
				text(x0-6, y(v)+4, `text-anchor="end" fill="`+axisColor+`"`, fmt.Sprint(v))
			}
		}
		groupW := (panelW - groupGap*float64(len(Quantiles)+1)) / float64(len(Quantiles))
		barW := (groupW - barGap*float64(len(r.Runs)-1)) / float64(max(len(r.Runs), 1))
		for qi, q := range Quantiles {
			gx := x0 + groupGap + float64(qi)*(groupW+groupGap)
			highest := 0.0
			for ri, run := range r.Runs {
				v := quantile(run.Lag[table].EndToEnd, q.Q) * 1e3
				if math.IsNaN(v) {
					continue
				}
				highest = max(highest, v)
				bx := gx + float64(ri)*(barW+barGap)
				rect(bx, y(v), barW, y(0)-y(v), runColors[ri%len(runColors)])
				text(bx+barW/2, y(v)-4, `text-anchor="middle" font-size="11"`, fmt.Sprintf("%.0f", v))
			}
			if len(r.Runs) >= 2 {
				text(gx+groupW/2, y(highest)-20, `text-anchor="middle" font-weight="bold"`, fmt.Sprintf("×%.2f", r.Ratio(table, q.Q)))
			}
			text(gx+groupW/2, y(0)+18, `text-anchor="middle"`, q.Name)
		}
		line(x0, y(0), x0+panelW, y(0), axisColor, 1)
		text(x0+panelW/2, y(0)+40, `text-anchor="middle" font-weight="bold"`, "table "+table)
	}
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle" fill="%s">milliseconds</text>`+"\n", float64(top)+plotH/2, axisColor)

	// Where the time goes: stage means, which add up to the mean.
	stages := engine.LagStages()
	text(left, stagesTop-40, `font-weight="bold"`, "where the time goes: mean per stage (sluice_stage_seconds), milliseconds; they add up to the mean")
	sx := float64(left)
	for i, s := range stages {
		rect(sx, stagesTop-26, 12, 12, stageColors[i%len(stageColors)])
		text(sx+16, stagesTop-16, `font-size="12"`, s)
		sx += 90
	}
	var longest float64
	for _, run := range r.Runs {
		for _, t := range Tables {
			longest = max(longest, run.Lag[t].EndToEnd.Mean()*1e3)
		}
	}
	labelW := 170.0
	scale := (float64(width-left-right) - labelW - 60) / math.Max(longest, 1e-9)
	row := 0
	for _, run := range r.Runs {
		for _, t := range Tables {
			ry := float64(stagesTop + row*(stageBarH+12))
			text(float64(left), ry+16, "", run.Routing+" "+t)
			bx := float64(left) + labelW
			for i, s := range stages {
				v := run.Lag[t].Stages[s].Mean() * 1e3
				if math.IsNaN(v) || v <= 0 {
					continue
				}
				rect(bx, ry, v*scale, stageBarH, stageColors[i%len(stageColors)])
				if v*scale > 34 {
					text(bx+v*scale/2, ry+15, `text-anchor="middle" font-size="11"`, fmt.Sprintf("%.0f", v))
				}
				bx += v * scale
			}
			text(bx+6, ry+16, `fill="`+axisColor+`"`, fmt.Sprintf("%.0f", run.Lag[t].EndToEnd.Mean()*1e3))
			row++
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
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
