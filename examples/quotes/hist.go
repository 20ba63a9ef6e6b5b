package quotes

import (
	"fmt"
	"io"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/lagmetrics"
)

// Histogram and Lag are sluice's lag histograms as internal/lagmetrics
// reads them.
type (
	Histogram = lagmetrics.Histogram
	Lag       = lagmetrics.Lag
)

// quantile is h's q-quantile estimate (see lagmetrics.Histogram.Quantile).
func quantile(h Histogram, q float64) float64 {
	v, _ := h.Quantile(q)
	return v
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
	fams, err := lagmetrics.Parse(r)
	if err != nil {
		return nil, err
	}
	return metricsOf(fams, pipeline)
}

// metricsOf is what the runner reads of parsed metric families.
func metricsOf(fams map[string]*dto.MetricFamily, pipeline string) (*Metrics, error) {
	m := &Metrics{Lag: map[string]*Lag{}, Inserted: map[string]int64{}, ConsumerLag: map[string]int64{}}
	lag, err := lagmetrics.FromFamilies(fams)
	if err != nil {
		return nil, err
	}
	for k, l := range lag {
		if k.Pipeline == pipeline {
			m.Lag[k.Table] = l
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
			m.Inserted[lagmetrics.Label(s, "table")] = int64(s.GetCounter().GetValue())
		}
	}
	if f := fams["sluice_consumer_lag"]; f != nil {
		for _, s := range f.Metric {
			m.ConsumerLag[lagmetrics.Label(s, "topic")+"/"+lagmetrics.Label(s, "partition")] = int64(s.GetGauge().GetValue())
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
