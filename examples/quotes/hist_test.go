package quotes

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/sluicehq/sluice/engine"
)

// lagText is Prometheus text with the lag histograms of pipeline quotes,
// table default.quotes, one sample per value (in seconds), every stage
// holding the same samples; made by client_golang, as sluice's are.
func lagText(t *testing.T, values ...float64) string {
	t.Helper()
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 26)
	e2e := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_end_to_end_seconds", Buckets: buckets}, []string{"pipeline", "table"})
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_stage_seconds", Buckets: buckets}, []string{"pipeline", "table", "stage"})
	inserted := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_table_rows_inserted_total"}, []string{"table"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(e2e, stages, inserted)
	for _, v := range values {
		e2e.WithLabelValues("quotes", "default.quotes").Observe(v)
		e2e.WithLabelValues("other", "default.quotes").Observe(100)
		for _, s := range engine.LagStages() {
			stages.WithLabelValues("quotes", "default.quotes", s).Observe(v)
		}
	}
	inserted.WithLabelValues("default.quotes").Add(42)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func TestParseMetricsAndQuantiles(t *testing.T) {
	// 100 samples: 0.15 s (bucket 0.1024..0.2048) ×50, 0.3 s (0.2048..0.4096) ×45, 2 s (1.6384..3.2768) ×5.
	var values []float64
	for i := range 100 {
		switch {
		case i < 50:
			values = append(values, 0.15)
		case i < 95:
			values = append(values, 0.3)
		default:
			values = append(values, 2)
		}
	}
	m, err := ParseMetrics(strings.NewReader(lagText(t, values...)), "quotes")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Lag) != 1 || m.Inserted["default.quotes"] != 42 {
		t.Fatalf("lag of %d tables, inserted %v", len(m.Lag), m.Inserted)
	}
	h := m.Lag["default.quotes"].EndToEnd
	if h.Count != 100 || len(h.Bounds) != 27 || !math.IsInf(h.Bounds[26], 1) || math.Abs(h.Mean()-(50*0.15+45*0.3+5*2)/100) > 1e-12 {
		t.Fatalf("histogram %+v", h)
	}
	// As histogram_quantile: p50 is rank 50, the top of the first
	// occupied bucket; p95 the top of the second; p99 4/5 into the third.
	for q, want := range map[float64]float64{0.5: 0.2048, 0.95: 0.4096, 0.99: 1.6384 + 0.8*1.6384, 0.25: 0.1024 + 0.5*0.1024} {
		if got := quantile(h, q); math.Abs(got-want) > 1e-9 {
			t.Errorf("quantile %g = %g, want %g", q, got, want)
		}
	}
	if h.Below(0.2048) != 50 || h.Below(0.2) != 0 {
		t.Errorf("Below(0.2048) = %d, Below(0.2) = %d", h.Below(0.2048), h.Below(0.2))
	}
	if !math.IsNaN(quantile(Histogram{}, 0.5)) {
		t.Error("a histogram without samples has a quantile")
	}

	// Since: the samples after an earlier scrape.
	earlier, err := ParseMetrics(strings.NewReader(lagText(t, values[:50]...)), "quotes")
	if err != nil {
		t.Fatal(err)
	}
	d, err := m.Lag["default.quotes"].Since(earlier.Lag["default.quotes"])
	if err != nil {
		t.Fatal(err)
	}
	if d.EndToEnd.Count != 50 || quantile(d.EndToEnd, 0.5) >= 0.4096 || quantile(d.EndToEnd, 0.5) <= 0.2048 || d.Stages["insert"].Count != 50 {
		t.Errorf("since: %d samples, p50 %g", d.EndToEnd.Count, quantile(d.EndToEnd, 0.5))
	}
	if _, err := earlier.Lag["default.quotes"].Since(m.Lag["default.quotes"]); err == nil {
		t.Error("Since a later scrape succeeded")
	}
	if _, err := ParseMetrics(strings.NewReader("# TYPE x counter\nx 1\n"), "quotes"); err == nil {
		t.Error("metrics without the lag histograms parsed")
	}
}

func TestReport(t *testing.T) {
	lagOf := func(values ...float64) *Lag {
		m, err := ParseMetrics(strings.NewReader(lagText(t, values...)), "quotes")
		if err != nil {
			t.Fatal(err)
		}
		return m.Lag["default.quotes"]
	}
	slow, fast := lagOf(0.3, 0.3, 0.6), lagOf(0.15, 0.15, 0.3)
	run := func(routing string, l *Lag) *Result {
		return &Result{Routing: routing, Produced: 3, Landed: map[string]int64{"quotes": 3, "quotes_eod": 3},
			Inserted: map[string]int64{"quotes": 3, "quotes_eod": 3}, Lag: map[string]*Lag{"quotes": l, "quotes_eod": l}, Inserts: 4, RowsInserted: 6}
	}
	r := &Report{Server: "26.9.2.1", CPUs: 2, Latency: 25e6, Quotes: 3, Rate: 1, Runs: []*Result{run("distributed", slow), run("shards", fast)}}
	if got := r.Ratio("quotes", 0.5); math.Abs(got-2) > 1e-9 {
		t.Errorf("p50 ratio %g, want 2 (each sample twice as long)", got)
	}
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"distributed / shards", "2.00×", "distributed quotes_eod", "25ms each way (50ms round trip)", "whole run: 4 inserts, 2 rows each"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, txt.String())
		}
	}
	var svg bytes.Buffer
	if err := r.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	for d := xml.NewDecoder(bytes.NewReader(svg.Bytes())); ; {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{">×2.00<", ">table quotes_eod<", ">routing: shards<", ">where the time goes", ">insert<", ">p99<"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
}

// TestPipelineYAML: the example's config parses as sluice parses it, and
// its defaults are the runs' shape.
func TestPipelineYAML(t *testing.T) {
	cfg, err := engine.ParseConfig([]byte(pipelineTemplate), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ch := cfg.ClickHouse
	if ch.Transport != "http" || ch.Routing != "shards" || !ch.DistributedSync || ch.ChunkLinger != 50e6 || ch.InsertLinger != 50e6 ||
		ch.Cluster.HTTPAddrs["127.0.0.1:9001"] != "127.0.0.1:8124" || cfg.Module.Name != "quotes" || len(cfg.Module.Tables) != 2 {
		t.Errorf("pipeline.yaml: %+v", cfg)
	}
}
