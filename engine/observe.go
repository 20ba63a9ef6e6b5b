package engine

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/wasmhost"
)

// metrics are the pipeline's Prometheus metrics. Counters that the hot path
// already keeps as atomics are read at scrape time by a collector, so
// exporting them costs nothing per record.
type metrics struct {
	registry      *prometheus.Registry
	moduleSeconds prometheus.Histogram
	slotWait      *prometheus.HistogramVec
	insertSeconds *prometheus.HistogramVec
	// endToEnd and stageSeconds are the lag histograms (lag.go).
	endToEnd     *prometheus.HistogramVec
	stageSeconds *prometheus.HistogramVec
}

func newMetrics(p *Pipeline) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		moduleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_module_batch_seconds",
			Help:    "Time the module took for one call (one batch of records).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		slotWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_module_slot_wait_seconds",
			Help:    "Time a module call waited for a call slot (module.call_slots) while other tenants' calls held them.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"tenant"}),
		insertSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_insert_seconds",
			Help:    "Time of one INSERT attempt, from picking the replica to the server's acknowledgement (outcome ok or error).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"table", "outcome"}),
	}
	m.endToEnd, m.stageSeconds = newLagHistograms()
	m.registry.MustRegister(m.moduleSeconds, m.slotWait, m.insertSeconds, m.endToEnd, m.stageSeconds, &collector{p: p}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Handler serves /metrics (Prometheus text), /healthz and /readyz.
func (p *Pipeline) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-p.failed:
			http.Error(w, "failed: "+p.failErr.Error(), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := p.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

var (
	descRecordsIn    = prometheus.NewDesc("sluice_records_in_total", "Records taken from Kafka into modules.", nil, nil)
	descErrored      = prometheus.NewDesc("sluice_records_errored_total", "Records the module refused or whose rows did not fit the table (dead-lettered, or stopping the pipeline without a dead-letter topic).", nil, nil)
	descRowsOut      = prometheus.NewDesc("sluice_rows_out_total", "Rows the modules produced.", nil, nil)
	descDeadLettered = prometheus.NewDesc("sluice_records_dead_lettered_total", "Records written to the dead-letter topic.", nil, nil)
	descTraps        = prometheus.NewDesc("sluice_module_traps_total", "Module instance failures: traps, proc_exit, limit breaches, malformed output.", nil, nil)
	descInstances    = prometheus.NewDesc("sluice_module_instances_started_total", "Module instances started (first ones and replacements).", nil, nil)
	descModMemory    = prometheus.NewDesc("sluice_module_memory_bytes", "Linear memory of the open module instances mapped outside the Go heap; the Go runtime's memory limit is memory_limit less this.", nil, nil)
	descInflight     = prometheus.NewDesc("sluice_inflight_bytes", "Estimated memory held by records between poll and commit.", nil, nil)
	descBudget       = prometheus.NewDesc("sluice_inflight_budget_bytes", "The in-flight budget; fetching pauses at it.", nil, nil)
	descPauses       = prometheus.NewDesc("sluice_fetch_pauses_total", "Times fetching was paused for backpressure.", nil, nil)
	descResumes      = prometheus.NewDesc("sluice_fetch_resumes_total", "Times fetching was resumed.", nil, nil)
	descPaused       = prometheus.NewDesc("sluice_partitions_module_paused", "Partitions paused because their module keeps failing.", nil, nil)
	descModPauses    = prometheus.NewDesc("sluice_module_pauses_total", "Cool-downs of partitions whose module kept failing (more poison records or failed starts than max_traps_per_minute).", nil, nil)
	descLag          = prometheus.NewDesc("sluice_consumer_lag", "High watermark minus the next offset to commit.", []string{"topic", "partition"}, nil)
	descQueueDepth   = prometheus.NewDesc("sluice_sink_queue_depth", "Sealed chunks waiting for a shard worker, over all shards.", nil, nil)
	descShardQueue   = prometheus.NewDesc("sluice_sink_shard_queue_depth", "Chunk parts waiting in one shard's queue.", []string{"shard"}, nil)
	descShardFailing = prometheus.NewDesc("sluice_sink_shard_failing", "1 while a shard's last insert attempt failed.", []string{"shard"}, nil)
	descVersionIn    = prometheus.NewDesc("sluice_module_records_in_total", "Records a module version transformed.", []string{"module", "tenant", "pipeline", "sha256"}, nil)
	descVersionRows  = prometheus.NewDesc("sluice_module_rows_out_total", "Rows a module version produced.", []string{"module", "tenant", "pipeline", "sha256"}, nil)
	descVersionLive  = prometheus.NewDesc("sluice_module_active", "1 for the module version a pipeline runs now, 0 for versions it ran before.", []string{"module", "tenant", "pipeline", "sha256"}, nil)
	descFailures     = prometheus.NewDesc("sluice_module_failures_total", "Module instance failures by cause: a limit (deadline, memory, output_rows, output_bytes) or trap (a trap, proc_exit or malformed output).", []string{"module", "tenant", "pipeline", "cause"}, nil)
	descRouteInfl    = prometheus.NewDesc("sluice_pipeline_inflight_bytes", "Estimated memory held by a pipeline's records between poll and commit.", []string{"module", "tenant", "pipeline"}, nil)
	descSchemaChange = prometheus.NewDesc("sluice_pipeline_schema_changes_total", "Changes of a pipeline's tables (ADD, DROP, MODIFY COLUMN; a shard added behind routing shards) that sluice took up while running.", []string{"module", "tenant", "pipeline"}, nil)
	descSchemaRefuse = prometheus.NewDesc("sluice_pipeline_schema_refused", "1 while a pipeline waits because its module refused its tables' current schema.", []string{"module", "tenant", "pipeline"}, nil)
	descRoutePaused  = prometheus.NewDesc("sluice_pipeline_fetch_paused", "1 while a pipeline's topics are paused for its in-flight budget or a full sink queue.", []string{"module", "tenant", "pipeline"}, nil)
	descTableRows    = prometheus.NewDesc("sluice_table_rows_inserted_total", "Rows inserted into ClickHouse, per table.", []string{"table"}, nil)
	descRowsInserted = prometheus.NewDesc("sluice_rows_inserted_total", "Rows inserted into ClickHouse.", nil, nil)
	descInserts      = prometheus.NewDesc("sluice_inserts_total", "INSERT statements that succeeded.", nil, nil)
	descTableDedup   = prometheus.NewDesc("sluice_inserts_deduplicated_total", "Blocks of successful inserts that ClickHouse dropped as repeats of blocks it had (the same insert_deduplication_token within the table's window: a retry or an exactly-once replay whose first insert had landed), per table; native protocol only.", []string{"table"}, nil)
	descSegRecorded  = prometheus.NewDesc("sluice_segments_recorded_total", "Exactly-once segments recorded in the group's offset commit before their inserts.", nil, nil)
	descSegReplayed  = prometheus.NewDesc("sluice_segments_replayed_total", "Exactly-once segments recorded by an earlier owner of their partition and rebuilt as the same inserts.", nil, nil)
	descFenced       = prometheus.NewDesc("sluice_commits_fenced_total", "Offset commits the group coordinator refused because this member no longer owned the generation it named.", nil, nil)
	descInsertErrors = prometheus.NewDesc("sluice_insert_errors_total", "Insert attempts that failed (and were retried or stopped the pipeline).", nil, nil)
	descSorted       = prometheus.NewDesc("sluice_inserts_sorted_total", "Inserts whose rows sluice put in the table's sorting key order (clickhouse.sort_rows), so that the server did not sort them.", nil, nil)
)

// collector reads the pipeline's counters at scrape time.
type collector struct{ p *Pipeline }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVersionIn, descVersionRows, descVersionLive, descFailures, descRouteInfl, descRoutePaused, descSchemaChange, descSchemaRefuse, descRecordsIn, descErrored, descShardQueue, descShardFailing, descTableRows, descRowsOut, descDeadLettered, descTraps, descInstances,
		descModMemory, descInflight, descBudget, descPauses, descResumes, descPaused, descModPauses, descLag, descQueueDepth,
		descRowsInserted, descInserts, descInsertErrors, descSorted, descTableDedup, descSegRecorded, descSegReplayed, descFenced} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	st := p.Stats()
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	counter(descRecordsIn, st.RecordsIn)
	counter(descRowsOut, st.RowsOut)
	counter(descErrored, st.RecordsErrored)
	counter(descDeadLettered, st.DeadLettered)
	counter(descTraps, st.Traps)
	counter(descInstances, st.Instances)
	counter(descModPauses, st.ModulePauses)
	gauge(descModMemory, wasmhost.MappedMemoryBytes())
	gauge(descInflight, st.InflightBytes)
	gauge(descBudget, p.sumFlow(func(f *flowControl) int64 { return f.high }))
	counter(descPauses, st.Pauses)
	counter(descResumes, st.Resumes)
	p.pausedMu.Lock()
	gauge(descPaused, int64(len(p.paused)))
	p.pausedMu.Unlock()
	gauge(descQueueDepth, int64(st.Sink.QueueDepth))
	counter(descRowsInserted, st.Sink.InsertedRows)
	counter(descInserts, st.Sink.Inserts)
	counter(descInsertErrors, st.Sink.InsertErrors)
	counter(descSorted, st.Sink.SortedInserts)
	for _, sh := range st.Sink.Shards {
		name := sh.Name
		if name == "" {
			name = "default"
		}
		gauge(descShardQueue, int64(sh.QueueDepth), name)
		failing := int64(0)
		if sh.Failing {
			failing = 1
		}
		gauge(descShardFailing, failing, name)
	}
	for _, r := range p.routes {
		cur := r.cur.Load()
		for _, mv := range r.allVersions() {
			labels := []string{r.name, r.tenant, r.pipeline, mv.module.SHA256}
			ch <- prometheus.MustNewConstMetric(descVersionIn, prometheus.CounterValue, float64(mv.recordsIn.Load()), labels...)
			ch <- prometheus.MustNewConstMetric(descVersionRows, prometheus.CounterValue, float64(mv.rowsOut.Load()), labels...)
			live := 0.0
			if mv == cur {
				live = 1
			}
			ch <- prometheus.MustNewConstMetric(descVersionLive, prometheus.GaugeValue, live, labels...)
		}
		r.mu.Lock()
		for cause, n := range r.failures {
			ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, float64(n), r.name, r.tenant, r.pipeline, cause)
		}
		r.mu.Unlock()
		gauge(descRouteInfl, r.flow.inflight.Load(), r.name, r.tenant, r.pipeline)
		paused := int64(0)
		if r.flow.isPaused() {
			paused = 1
		}
		gauge(descRoutePaused, paused, r.name, r.tenant, r.pipeline)
		ch <- prometheus.MustNewConstMetric(descSchemaChange, prometheus.CounterValue, float64(r.schemaChanges.Load()), r.name, r.tenant, r.pipeline)
		refused := int64(0)
		if r.schema.Load().refused != "" {
			refused = 1
		}
		gauge(descSchemaRefuse, refused, r.name, r.tenant, r.pipeline)
	}
	for _, t := range st.Sink.Tables {
		ch <- prometheus.MustNewConstMetric(descTableRows, prometheus.CounterValue, float64(t.InsertedRows), t.Name)
		ch <- prometheus.MustNewConstMetric(descTableDedup, prometheus.CounterValue, float64(t.DeduplicatedBlocks), t.Name)
	}
	if p.eo != nil {
		counter(descSegRecorded, p.eo.recorded.Load())
		counter(descSegReplayed, p.eo.replayed.Load())
		counter(descFenced, p.eo.fenced.Load())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for tp, a := range p.acks {
		hwm := a.hwm.Load()
		next, ok := a.watermark()
		if !ok || hwm == 0 {
			continue
		}
		gauge(descLag, hwm-next.Offset, tp.topic, strconv.Itoa(int(tp.partition)))
	}
}
