package lagmetrics

import (
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const scrape = `# TYPE sluice_end_to_end_seconds histogram
sluice_end_to_end_seconds_bucket{pipeline="p",table="t",le="0.1"} 0
sluice_end_to_end_seconds_bucket{pipeline="p",table="t",le="1"} 10
sluice_end_to_end_seconds_bucket{pipeline="p",table="t",le="10"} 20
sluice_end_to_end_seconds_bucket{pipeline="p",table="t",le="+Inf"} 21
sluice_end_to_end_seconds_sum{pipeline="p",table="t"} 50
sluice_end_to_end_seconds_count{pipeline="p",table="t"} 21
# TYPE sluice_stage_seconds histogram
sluice_stage_seconds_bucket{pipeline="p",table="t",stage="insert",le="1"} 21
sluice_stage_seconds_bucket{pipeline="p",table="t",stage="insert",le="+Inf"} 21
sluice_stage_seconds_sum{pipeline="p",table="t",stage="insert"} 5
sluice_stage_seconds_count{pipeline="p",table="t",stage="insert"} 21
`

func TestFromFamiliesAndQuantiles(t *testing.T) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	lag, err := FromFamilies(fams)
	if err != nil {
		t.Fatal(err)
	}
	l := lag[Key{Pipeline: "p", Table: "t"}]
	if l == nil || l.EndToEnd.Count != 21 || l.Stages["insert"].Sum != 5 {
		t.Fatalf("lag %+v", l)
	}
	e := l.EndToEnd
	// Rank 10.5 of 21 falls in (1, 10], half a sample past its start.
	if v, above := e.Quantile(0.5); above || math.Abs(v-(1+9*0.5/10)) > 1e-12 {
		t.Errorf("p50 %g (above %v), want 1.45", v, above)
	}
	if v, above := e.Quantile(0.99); !above || v != 10 {
		t.Errorf("p99 %g (above %v), want the last finite bound, above", v, above)
	}
	if e.Below(1) != 10 || math.Abs(e.Mean()-50.0/21) > 1e-12 {
		t.Errorf("below 1: %d, mean %g", e.Below(1), e.Mean())
	}
	earlier := Histogram{Count: 10, Sum: 5, Bounds: e.Bounds, Cumulative: []uint64{0, 10, 10, 10}}
	d, err := e.Since(earlier)
	if err != nil || d.Count != 11 || d.Cumulative[1] != 0 || d.Cumulative[3] != 11 || d.Sum != 45 {
		t.Errorf("since: %+v, %v", d, err)
	}
	if _, err := earlier.Since(e); err == nil {
		t.Error("a histogram with fewer samples than the earlier one compared")
	}
	if _, err := FromFamilies(nil); err == nil {
		t.Error("a scrape without the lag histograms was read")
	}
	if v, _ := (Histogram{}).Quantile(0.5); !math.IsNaN(v) {
		t.Errorf("the quantile of no samples is %g, want NaN", v)
	}
}
