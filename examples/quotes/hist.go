package quotes

import (
	"fmt"
	"io"
	"math"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/engine"
)

// Histogram is one classic Prometheus histogram as scraped: cumulative
// counts by upper bound, ascending, the last bound +Inf.
type Histogram struct {
	Count      uint64
	Sum        float64
	Bounds     []float64
	Cumulative []uint64
}

// Mean is Sum / Count, NaN without samples.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / float64(h.Count)
}

// Quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linearly within the bucket the rank falls in, the first bucket
// starting at 0; a rank in the +Inf bucket gives the last finite bound.
// NaN without samples.
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return math.NaN()
	}
	rank := q * float64(h.Count)
	for i, c := range h.Cumulative {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(h.Bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return h.Bounds[i-1]
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = h.Bounds[i-1], h.Cumulative[i-1]
		}
		if c == below {
			return lower
		}
		return lower + (h.Bounds[i]-lower)*(rank-float64(below))/float64(c-below)
	}
	return h.Bounds[len(h.Bounds)-1]
}

// Since is the samples of h observed after earlier, a scrape of the same
// series before it.
func (h Histogram) Since(earlier Histogram) (Histogram, error) {
	if earlier.Count == 0 && len(earlier.Bounds) == 0 {
		return h, nil
	}
	if !slices.Equal(h.Bounds, earlier.Bounds) || earlier.Count > h.Count {
		return Histogram{}, fmt.Errorf("histograms do not compare: %d samples before, %d after, or other buckets", earlier.Count, h.Count)
	}
	d := Histogram{Count: h.Count - earlier.Count, Sum: h.Sum - earlier.Sum, Bounds: h.Bounds, Cumulative: make([]uint64, len(h.Cumulative))}
	for i := range h.Cumulative {
		if earlier.Cumulative[i] > h.Cumulative[i] {
			return Histogram{}, fmt.Errorf("bucket le=%g went down from %d to %d", h.Bounds[i], earlier.Cumulative[i], h.Cumulative[i])
		}
		d.Cumulative[i] = h.Cumulative[i] - earlier.Cumulative[i]
	}
	return d, nil
}

// Below is the number of samples in the buckets whose upper bound is at
// most x: samples certainly no greater than x.
func (h Histogram) Below(x float64) uint64 {
	var n uint64
	for i, b := range h.Bounds {
		if b <= x {
			n = h.Cumulative[i]
		}
	}
	return n
}

// Lag is the lag histograms of one table of a pipeline:
// sluice_end_to_end_seconds and sluice_stage_seconds by stage.
type Lag struct {
	EndToEnd Histogram
	Stages   map[string]Histogram
}

// Since is the samples of l observed after earlier.
func (l *Lag) Since(earlier *Lag) (*Lag, error) {
	if earlier == nil {
		return l, nil
	}
	e2e, err := l.EndToEnd.Since(earlier.EndToEnd)
	if err != nil {
		return nil, fmt.Errorf("end to end: %w", err)
	}
	out := &Lag{EndToEnd: e2e, Stages: map[string]Histogram{}}
	for stage, h := range l.Stages {
		if out.Stages[stage], err = h.Since(earlier.Stages[stage]); err != nil {
			return nil, fmt.Errorf("stage %s: %w", stage, err)
		}
	}
	return out, nil
}

// Metrics is what the runner reads of one scrape of sluice's /metrics.
type Metrics struct {
	// Lag is by table, as the pipeline names it ("default.quotes").
	Lag map[string]*Lag
	// Inserted is sluice_table_rows_inserted_total by table.
	Inserted map[string]int64
	// ConsumerLag is sluice_consumer_lag by "topic/partition".
	ConsumerLag map[string]int64
	// DeadLettered is sluice_records_dead_lettered_total.
	DeadLettered int64
	// Inserts is sluice_inserts_total; RowsInserted sluice_rows_inserted_total.
	Inserts, RowsInserted int64
}

// ParseMetrics reads Prometheus text from sluice's /metrics, keeping the
// lag histograms of pipeline.
func ParseMetrics(r io.Reader, pipeline string) (*Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	m := &Metrics{Lag: map[string]*Lag{}, Inserted: map[string]int64{}, ConsumerLag: map[string]int64{}}
	e2e, stages := fams["sluice_end_to_end_seconds"], fams["sluice_stage_seconds"]
	if e2e == nil || stages == nil {
		return nil, fmt.Errorf("no sluice_end_to_end_seconds and sluice_stage_seconds histograms")
	}
	lagOf := func(table string) *Lag {
		l := m.Lag[table]
		if l == nil {
			l = &Lag{Stages: map[string]Histogram{}}
			m.Lag[table] = l
		}
		return l
	}
	for _, s := range e2e.Metric {
		if label(s, "pipeline") == pipeline && s.Histogram != nil {
			lagOf(label(s, "table")).EndToEnd = histogramOf(s.Histogram)
		}
	}
	for _, s := range stages.Metric {
		if label(s, "pipeline") == pipeline && s.Histogram != nil {
			lagOf(label(s, "table")).Stages[label(s, "stage")] = histogramOf(s.Histogram)
		}
	}
	for table, l := range m.Lag {
		for _, stage := range engine.LagStages() {
			if _, ok := l.Stages[stage]; !ok {
				return nil, fmt.Errorf("table %s has no sluice_stage_seconds for stage %s", table, stage)
			}
		}
	}
	if f := fams["sluice_table_rows_inserted_total"]; f != nil {
		for _, s := range f.Metric {
			m.Inserted[label(s, "table")] = int64(s.GetCounter().GetValue())
		}
	}
	if f := fams["sluice_consumer_lag"]; f != nil {
		for _, s := range f.Metric {
			m.ConsumerLag[label(s, "topic")+"/"+label(s, "partition")] = int64(s.GetGauge().GetValue())
		}
	}
	for name, v := range map[string]*int64{"sluice_records_dead_lettered_total": &m.DeadLettered,
		"sluice_inserts_total": &m.Inserts, "sluice_rows_inserted_total": &m.RowsInserted} {
		if f := fams[name]; f != nil && len(f.Metric) > 0 {
			*v = int64(f.Metric[0].GetCounter().GetValue())
		}
	}
	return m, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histogramOf(h *dto.Histogram) Histogram {
	out := Histogram{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
	for _, b := range h.Bucket {
		out.Bounds = append(out.Bounds, b.GetUpperBound())
		out.Cumulative = append(out.Cumulative, b.GetCumulativeCount())
	}
	if n := len(out.Bounds); n == 0 || !math.IsInf(out.Bounds[n-1], 1) {
		out.Bounds = append(out.Bounds, math.Inf(1))
		out.Cumulative = append(out.Cumulative, out.Count)
	}
	return out
}
