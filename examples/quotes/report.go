package quotes

import (
	"fmt"
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
