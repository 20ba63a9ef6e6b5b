// Package lagmetrics reads sluice's lag histograms out of a scrape of its
// /metrics: sluice_end_to_end_seconds and sluice_stage_seconds by pipeline
// and table, as classic Prometheus histograms, with the quantile estimate
// Prometheus' histogram_quantile makes. `sluice status` and the quotes
// example read the lag through it.
package lagmetrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Histogram is one classic Prometheus histogram as scraped: cumulative
// counts by upper bound, ascending, the last bound +Inf.
type Histogram struct {
	Count      uint64
	Sum        float64
	Bounds     []float64
	Cumulative []uint64
}

// FromProto is h as a Histogram, with a +Inf bucket added when the scrape
// left it out.
func FromProto(h *dto.Histogram) Histogram {
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

// Mean is Sum / Count, NaN without samples.
func (h Histogram) Mean() float64 {
	if h.Count == 0 {
		return math.NaN()
	}
	return h.Sum / float64(h.Count)
}

// Quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linearly within the bucket the rank falls in, the first bucket
// starting at 0. above is set when the rank falls in the +Inf bucket; the
// estimate is then the last finite bound. NaN without samples.
func (h Histogram) Quantile(q float64) (v float64, above bool) {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return math.NaN(), false
	}
	rank := q * float64(h.Count)
	for i, c := range h.Cumulative {
		if float64(c) < rank {
			continue
		}
		if math.IsInf(h.Bounds[i], 1) {
			if i == 0 {
				return math.NaN(), true
			}
			return h.Bounds[i-1], true
		}
		lower, below := 0.0, uint64(0)
		if i > 0 {
			lower, below = h.Bounds[i-1], h.Cumulative[i-1]
		}
		if c == below {
			return h.Bounds[i], false
		}
		return lower + (h.Bounds[i]-lower)*(rank-float64(below))/float64(c-below), false
	}
	return h.Bounds[len(h.Bounds)-1], false
}

// Since is the samples of h observed after earlier, a scrape of the same
// series before it; an error when the two do not compare (fewer samples
// now, other buckets, a bucket that went down: the process restarted). An
// empty earlier gives h.
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

// Key names the lag series of one table of one pipeline.
type Key struct{ Pipeline, Table string }

// Lag is the lag histograms of one table of a pipeline: end to end, and
// by stage.
type Lag struct {
	EndToEnd Histogram
	Stages   map[string]Histogram
}

// Since is the samples of l observed after earlier (nil: all of l).
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

// FromFamilies reads the lag histograms out of parsed metric families; an
// error when the scrape has neither (not sluice, or a sluice without the
// lag metrics).
func FromFamilies(fams map[string]*dto.MetricFamily) (map[Key]*Lag, error) {
	e2e, stages := fams["sluice_end_to_end_seconds"], fams["sluice_stage_seconds"]
	if e2e == nil || stages == nil {
		return nil, fmt.Errorf("no sluice_end_to_end_seconds and sluice_stage_seconds histograms (a sluice without the lag metrics, or not sluice)")
	}
	out := map[Key]*Lag{}
	lagOf := func(m *dto.Metric) *Lag {
		k := Key{Label(m, "pipeline"), Label(m, "table")}
		l := out[k]
		if l == nil {
			l = &Lag{Stages: map[string]Histogram{}}
			out[k] = l
		}
		return l
	}
	for _, m := range e2e.Metric {
		if m.Histogram != nil {
			lagOf(m).EndToEnd = FromProto(m.Histogram)
		}
	}
	for _, m := range stages.Metric {
		if m.Histogram != nil {
			lagOf(m).Stages[Label(m, "stage")] = FromProto(m.Histogram)
		}
	}
	return out, nil
}

// Parse reads Prometheus text into its metric families.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(r)
}

// Scrape reads url (a sluice's /metrics) and parses it.
func Scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return fams, nil
}

// Label is the value of m's label name, "" without it.
func Label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
