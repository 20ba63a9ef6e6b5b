package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// drainFigures are the figures of one arm that drains a prefilled topic.
type drainFigures struct {
	System string `json:"system"`
	// Delivery is sluice's delivery mode when the arm sets it (the
	// delivery arm); its tables then keep a deduplication window.
	Delivery string `json:"delivery,omitempty"`
	Format   string `json:"format"`
	Topic    string `json:"topic"`
	Table    string `json:"table"`
	Batches  uint64 `json:"batches"`
	Rows     int64  `json:"rows"`
	// ModuleParams are sluice's module parameters beside the table, e.g.
	// format=json for the C module on the JSON corpus.
	ModuleParams map[string]string `json:"module_params,omitempty"`

	// From the start of the system under test (process start, or the
	// view's creation) until every row had landed.
	ElapsedS   float64 `json:"elapsed_s"`
	RowsPerSec float64 `json:"rows_per_s"`
	// From the first landed row to the last: without start-up (process
	// start, module compilation, group join, the first fetch).
	AfterFirstRowsPerSec float64 `json:"after_first_rows_per_s"`
	// Between 10% and 90% of the rows landed. Inserts land in steps of up
	// to a million rows, so short runs make this noisy.
	SteadyRowsPerSec float64 `json:"steady_rows_per_s"`
	// CPU of the system under test's own process over the whole run:
	// sluice, or, for the Kafka engine, clickhouse-server (which also does
	// the inserts), and rows per second of it.
	CPUSeconds     float64 `json:"cpu_s"`
	RowsPerCoreSec float64 `json:"rows_per_core_s"`
	// The other processes over the same whole span, for context.
	ClickHouseCPUSeconds float64 `json:"clickhouse_cpu_s"`
	KafkaCPUSeconds      float64 `json:"kafka_cpu_s"`
	// Rows per CPU-second of sluice and clickhouse-server together (the
	// pipeline plus the server's insert work), comparable with the Kafka
	// engine's rows_per_core_s, where both are one process.
	RowsPerPipelineCoreSec float64 `json:"rows_per_pipeline_core_s"`
	PeakRSSMiB             float64 `json:"peak_rss_mib,omitempty"`

	Duplicates   uint64        `json:"duplicates"`
	DeadLettered int64         `json:"dead_lettered"`
	Gates        []sensor.Gate `json:"gates"`
	GatesPass    bool          `json:"gates_pass"`
	LoadAvg      [2]float64    `json:"loadavg_1m_start_end"`
	Error        string        `json:"error,omitempty"`
	// Timeline is [seconds, rows landed] at every sample where the count
	// changed (rows land an insert at a time).
	Timeline [][2]float64 `json:"timeline"`
	// KafkaFlushIntervalMs is the Kafka engine's kafka_flush_interval_ms
	// (the server's default when not set on the table, as it reports it).
	KafkaFlushIntervalMs int `json:"kafka_flush_interval_ms,omitempty"`
	// ClickHouseThreadsCPU is clickhouse_cpu_s by the server's thread
	// names (TCPHandler: the native protocol's queries, sluice's inserts;
	// BackgrProcPool on 18.16 and MergeMutate on 26.9: merges;
	// BackgrSchedPool on 18.16: the Kafka engine's consumption, parsing
	// and inserts), and threads that exited meanwhile. 18.16's part_log
	// has no CPU for merges; this has.
	ClickHouseThreadsCPU map[string]float64 `json:"clickhouse_threads_cpu_s,omitempty"`
	// Server is the server's own account of the arm's table.
	Server *serverCounters `json:"server,omitempty"`

	samples []sample
}

func (f *drainFigures) fromSamples(w watchResult, rows int64) {
	f.samples = w.samples
	for i, s := range w.samples {
		if i == 0 || s.Landed != w.samples[i-1].Landed {
			if i > 0 && len(f.Timeline) > 0 && f.Timeline[len(f.Timeline)-1][0] < w.samples[i-1].T {
				f.Timeline = append(f.Timeline, [2]float64{round3(w.samples[i-1].T), float64(w.samples[i-1].Landed)})
			}
			f.Timeline = append(f.Timeline, [2]float64{round3(s.T), float64(s.Landed)})
		}
	}
	if !w.complete || len(w.samples) == 0 {
		return
	}
	done, _ := at(w.samples, rows)
	f.ElapsedS = done.T
	f.RowsPerSec = float64(rows) / done.T
	f.CPUSeconds = done.CPU
	f.RowsPerCoreSec = float64(rows) / done.CPU
	f.ClickHouseCPUSeconds, f.KafkaCPUSeconds = done.CHCPU, done.KCPU
	f.ClickHouseThreadsCPU = w.chThreads
	pipeline := done.CPU
	if f.System != "clickhouse-kafka-engine" {
		pipeline += done.CHCPU
	}
	f.RowsPerPipelineCoreSec = float64(rows) / pipeline
	if first, ok := at(w.samples, 1); ok && done.T > first.T {
		f.AfterFirstRowsPerSec = float64(rows-first.Landed) / (done.T - first.T)
	}
	lo, _ := at(w.samples, rows/10)
	hi, _ := at(w.samples, rows*9/10)
	if hi.T > lo.T {
		f.SteadyRowsPerSec = float64(hi.Landed-lo.Landed) / (hi.T - lo.T)
	}
}

// gate checks what landed in table against want, after quiescence.
func (e *env) gate(ctx context.Context, table string, want sensor.Expectation, maxDup uint64) ([]sensor.Gate, sensor.Landed, error) {
	var l sensor.Landed
	// In parts of at most about 16M expected rows (sensor.CountPartSQL).
	parts := int(want.Rows/(16<<20)) + 1
	for part := range parts {
		out, err := e.query(ctx, sensor.CountPartSQL(table, parts, part))
		if err != nil {
			return nil, l, err
		}
		count, distinct, err := sensor.ParseCount(out)
		if err != nil {
			return nil, l, err
		}
		l.Count += count
		l.Distinct += distinct
	}
	out, err := e.query(ctx, e.layout.GateSQL(table, l.Count != l.Distinct))
	if err != nil {
		return nil, l, err
	}
	if err := sensor.ParseGate(out, &l); err != nil {
		return nil, l, err
	}
	return sensor.Check(want, l, maxDup), l, nil
}

func (e *env) finishGates(ctx context.Context, f *drainFigures, table string, want sensor.Expectation, maxDup uint64) {
	gates, l, err := e.gate(ctx, table, want, maxDup)
	if err != nil {
		f.Error = join(f.Error, "gates: "+err.Error())
		return
	}
	f.Gates, f.GatesPass = gates, sensor.AllPass(gates) && f.DeadLettered == 0
	f.Duplicates = l.Count - l.Distinct
}

// runSluice runs sluice on topic into a new table until rows have landed,
// every offset is committed and the count is still, then stops it and
// gates against want() (called once producing is over). produce, when
// set, is started once sluice has joined its group (sustained mode) and
// returns when done producing. It returns sluice's start time.
func (r *rig) runSluice(ctx context.Context, f *drainFigures, wasm string, rows int64, want func() sensor.Expectation,
	produce func(ctx context.Context) error) (start time.Time) {
	e := r.env
	// An earlier arm's merges must not count as this one's server CPU.
	if err := e.waitMergesIdle(ctx, 2*time.Minute); err != nil {
		f.Error = err.Error()
		return start
	}
	f.LoadAvg[0] = loadAvg()
	defer func() { f.LoadAvg[1] = loadAvg() }()
	f.Rows = rows
	dlq := f.Table + "_dlq"
	if err := e.createTopic(ctx, dlq, 1); err != nil {
		f.Error = err.Error()
		return start
	}
	ddl, extra := e.layout.DDL(f.Table), r.sluiceYAML
	if f.Delivery != "" {
		if !strings.Contains(ddl, "non_replicated_deduplication_window") {
			ddl = strings.TrimSpace(ddl) + fmt.Sprintf(" SETTINGS non_replicated_deduplication_window = %d", clickhouse.MinDedupWindow)
		}
		extra = strings.TrimRight(extra, "\n") + "\ndelivery: " + f.Delivery + "\n"
	}
	if err := e.ch.Exec(ctx, ddl); err != nil {
		f.Error = err.Error()
		return start
	}
	p := pipeline{name: f.Table, brokers: e.kafka.Addr, topic: f.Topic, dlq: dlq, module: wasm, table: f.Table,
		params: f.ModuleParams, chAddr: e.ch.Addr, cacheDir: e.cacheDir, extraYAML: extra}
	sp, err := startSluice(e.sluiceBin, e.dir, p)
	if err != nil {
		f.Error = err.Error()
		return start
	}
	defer func() {
		if exited, _ := sp.exited(); !exited {
			if err := sp.stop(); err != nil {
				f.Error = join(f.Error, "stop: "+err.Error())
			}
		}
		if f.Error != "" {
			r.logf("%s: sluice log tail:\n%s", f.Table, sp.logTail(20))
		}
	}()
	start = sp.started
	produced := make(chan error, 1)
	if produce != nil {
		if err := e.waitJoined(ctx, p.name); err != nil {
			f.Error = err.Error()
			return start
		}
		go func() { produced <- produce(ctx) }()
	} else {
		produced <- nil
	}
	w, werr := e.watch(ctx, watchSpec{
		table: f.Table, expected: f.Rows, pid: sp.pid(), ownRSS: true, start: start,
		quietFor: 2 * time.Second, stallFor: 90 * time.Second,
		done: func(ctx context.Context) bool {
			lag, err := e.committedLag(ctx, p.name, f.Topic)
			return err == nil && lag == 0
		},
		alive: func() error {
			if exited, err := sp.exited(); exited {
				return fmt.Errorf("sluice exited: %v", err)
			}
			return nil
		},
		progress: r.progress(f.Table),
	})
	if err := <-produced; err != nil {
		f.Error = join(f.Error, "produce: "+err.Error())
	}
	if hwm, err := statusKB(sp.pid(), "VmHWM"); err == nil {
		f.PeakRSSMiB = float64(hwm) / 1024
	}
	f.fromSamples(w, f.Rows)
	if werr != nil {
		f.Error = join(f.Error, werr.Error())
	}
	if err := sp.stop(); err != nil {
		f.Error = join(f.Error, "stop: "+err.Error())
	}
	if f.DeadLettered, err = e.topicRecords(ctx, dlq); err != nil {
		f.Error = join(f.Error, err.Error())
	}
	e.finishGates(ctx, f, f.Table, want(), 0)
	f.Server = e.serverCounters(ctx, f.Table)
	return start
}

// waitJoined waits until group has a member with partitions assigned.
func (e *env) waitJoined(ctx context.Context, group string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		gs, err := e.adm.DescribeGroups(ctx, group)
		if err == nil {
			if g, ok := gs[group]; ok && g.State == "Stable" && len(g.Members) > 0 {
				assigned := false
				for _, m := range g.Members {
					if a, ok := m.Assigned.AsConsumer(); ok && len(a.Topics) > 0 {
						assigned = true
					}
				}
				if assigned {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("consumer group %s did not join within 60s", group)
}

// drain is the drain arm: the Avro corpus prefilled into an 8-partition
// topic, drained by sluice with the Avro module.
func (r *rig) drain(ctx context.Context) *drainFigures {
	f := &drainFigures{System: "sluice", Format: "avro", Topic: "sensor_avro", Table: "se_drain", Batches: r.prof.drainBatches}
	e := r.env
	if err := e.createTopic(ctx, f.Topic, e.partitions); err != nil {
		f.Error = err.Error()
		return f
	}
	r.logf("drain: producing %d Avro batches", f.Batches)
	secs, bytes, err := e.prefill(ctx, f.Topic, f.Batches, sensor.AppendAvro, sensor.DrainSendTsUs)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	r.logf("drain: produced %.0f MiB in %.1fs; starting sluice", float64(bytes)/(1<<20), secs)
	want := sensor.Expect(f.Batches, sensor.DrainSendTsUs)
	r.runSluice(ctx, f, e.avroWasm, int64(want.Rows), func() sensor.Expectation { return want }, nil)
	r.logf("drain: %s", f.summary())
	return f
}

// deliveryCost is the delivery arm: the drain's Avro corpus drained with
// at-least-once and exactly-once delivery in turn, A B A B, into tables
// that keep the same deduplication window, so that only the mode differs.
type deliveryCost struct {
	Runs []*drainFigures `json:"runs"`
	// Ratio is the median exactly-once rate over the median at-least-once
	// rate (rows/s after the first row).
	Ratio float64 `json:"ratio"`
}

func (r *rig) delivery(ctx context.Context, prefilled bool) *deliveryCost {
	e := r.env
	out := &deliveryCost{}
	batches := r.prof.drainBatches
	topic := "sensor_avro"
	if !prefilled {
		if err := e.createTopic(ctx, topic, e.partitions); err != nil {
			out.Runs = append(out.Runs, &drainFigures{System: "sluice", Error: err.Error()})
			return out
		}
		r.logf("delivery: producing %d Avro batches", batches)
		if _, _, err := e.prefill(ctx, topic, batches, sensor.AppendAvro, sensor.DrainSendTsUs); err != nil {
			out.Runs = append(out.Runs, &drainFigures{System: "sluice", Error: err.Error()})
			return out
		}
	}
	want := sensor.Expect(batches, sensor.DrainSendTsUs)
	var alo, eo []float64
	for i := 1; i <= 2; i++ {
		for _, mode := range []string{"at_least_once", "exactly_once"} {
			short := "alo"
			if mode == "exactly_once" {
				short = "eo"
			}
			f := &drainFigures{System: "sluice", Delivery: mode, Format: "avro", Topic: topic,
				Table: fmt.Sprintf("se_delivery_%s_%d", short, i), Batches: batches}
			r.runSluice(ctx, f, e.avroWasm, int64(want.Rows), func() sensor.Expectation { return want }, nil)
			r.logf("delivery %s run %d: %s", mode, i, f.summary())
			out.Runs = append(out.Runs, f)
			if f.Error == "" && f.GatesPass {
				if short == "eo" {
					eo = append(eo, f.AfterFirstRowsPerSec)
				} else {
					alo = append(alo, f.AfterFirstRowsPerSec)
				}
			}
		}
	}
	if len(alo) > 0 && len(eo) > 0 {
		out.Ratio = median(eo) / median(alo)
	}
	return out
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (f *drainFigures) summary() string {
	s := fmt.Sprintf("%s/%s %d rows in %.1fs: %.0f rows/s overall, %.0f after the first row, %.0f between 10%% and 90%%; %.0f rows per core-second (%.1f CPU-s; clickhouse %.1f, kafka %.1f); peak RSS %.0f MiB; gates pass %v; dups %d",
		f.System, f.Format, f.Rows, f.ElapsedS, f.RowsPerSec, f.AfterFirstRowsPerSec, f.SteadyRowsPerSec, f.RowsPerCoreSec,
		f.CPUSeconds, f.ClickHouseCPUSeconds, f.KafkaCPUSeconds, f.PeakRSSMiB, f.GatesPass, f.Duplicates)
	if len(f.ClickHouseThreadsCPU) > 0 {
		s += "; clickhouse by thread: " + topThreads(f.ClickHouseThreadsCPU, 4)
	}
	if f.Server != nil {
		s += "; " + f.Server.String()
	}
	if f.Error != "" {
		s += "; ERROR: " + f.Error
	}
	return s
}

// sideBySide is the same corpus drained by ClickHouse's Kafka engine and
// by sluice, one after the other, on the same broker. On 18.16 it is the
// JSON corpus only (18.16 has no Avro input format), the engine at its
// default flush interval. On 26.9 it is the JSON corpus and the Avro corpus
// (the engine reading AvroConfluent, the schema from the rig's registry
// endpoint), the engine at its default kafka_flush_interval_ms and at
// 500 ms, each drained by a new consumer group.
type sideBySide struct {
	Batches uint64 `json:"batches"`
	// JSON, the engine at the server's default flush interval.
	KafkaEngine *drainFigures `json:"kafka_engine"`
	Sluice      *drainFigures `json:"sluice_json"`
	// sluice / Kafka engine on the JSON corpus at the default flush
	// interval: landed rows/s from start to the last row (the target's
	// ratio), the same after the first row (not meaningful when the
	// engine lands nearly everything in one insert), and rows per
	// CPU-second of the pipeline (sluice + clickhouse, against clickhouse
	// alone).
	RatioOverall       float64 `json:"ratio_rows_per_s"`
	Ratio              float64 `json:"ratio_after_first_rows_per_s"`
	RatioPerCore       float64 `json:"ratio_rows_per_pipeline_core_s"`
	KafkaEngineConsume int     `json:"kafka_engine_consumers"`
	KafkaEngineBlock   int     `json:"kafka_engine_max_block_size"`
	// 26.9 only: the engine at kafka_flush_interval_ms = 500 on the JSON
	// corpus, and the Avro corpus at both intervals against sluice's Avro
	// module.
	KafkaEngineFlush500     *drainFigures `json:"kafka_engine_flush_500ms,omitempty"`
	KafkaEngineAvro         *drainFigures `json:"kafka_engine_avro,omitempty"`
	KafkaEngineAvroFlush500 *drainFigures `json:"kafka_engine_avro_flush_500ms,omitempty"`
	SluiceAvro              *drainFigures `json:"sluice_avro,omitempty"`
	// Pairs is every sluice / engine comparison of the run.
	Pairs []sbsPair `json:"pairs"`
}

// sbsPair compares sluice with one Kafka-engine arm on the same corpus.
type sbsPair struct {
	Format          string  `json:"format"`
	FlushIntervalMs int     `json:"kafka_flush_interval_ms"`
	SluiceRowsPerS  float64 `json:"sluice_rows_per_s"`
	EngineRowsPerS  float64 `json:"engine_rows_per_s"`
	Ratio           float64 `json:"ratio_rows_per_s"`
	RatioPerCore    float64 `json:"ratio_rows_per_pipeline_core_s"`
	// RatioWholePipeline counts the broker too: rows per CPU-second of
	// sluice, the server and the broker over rows per CPU-second of the
	// server and the broker (the engine).
	RatioWholePipeline float64 `json:"ratio_rows_per_whole_pipeline_core_s"`
	BothGatesPass      bool    `json:"both_gates_pass"`
}

func pair(sl, ke *drainFigures) sbsPair {
	p := sbsPair{Format: ke.Format, FlushIntervalMs: ke.KafkaFlushIntervalMs, SluiceRowsPerS: sl.RowsPerSec, EngineRowsPerS: ke.RowsPerSec,
		BothGatesPass: sl.GatesPass && ke.GatesPass && sl.Error == "" && ke.Error == ""}
	if ke.RowsPerSec > 0 {
		p.Ratio = sl.RowsPerSec / ke.RowsPerSec
	}
	if ke.RowsPerPipelineCoreSec > 0 {
		p.RatioPerCore = sl.RowsPerPipelineCoreSec / ke.RowsPerPipelineCoreSec
	}
	slCPU := sl.CPUSeconds + sl.ClickHouseCPUSeconds + sl.KafkaCPUSeconds
	keCPU := ke.CPUSeconds + ke.KafkaCPUSeconds // the engine's CPU is the server's
	if slCPU > 0 && keCPU > 0 && ke.Rows > 0 {
		p.RatioWholePipeline = (float64(sl.Rows) / slCPU) / (float64(ke.Rows) / keCPU)
	}
	return p
}

// engineArms are the Kafka-engine arms of every side by side.
func (s *sideBySide) engineArms() []*drainFigures {
	var arms []*drainFigures
	for _, f := range []*drainFigures{s.KafkaEngine, s.KafkaEngineFlush500, s.KafkaEngineAvro, s.KafkaEngineAvroFlush500} {
		if f != nil {
			arms = append(arms, f)
		}
	}
	return arms
}

func (s *sideBySide) sluiceArms() []*drainFigures {
	var arms []*drainFigures
	for _, f := range []*drainFigures{s.Sluice, s.SluiceAvro} {
		if f != nil {
			arms = append(arms, f)
		}
	}
	return arms
}

func (r *rig) sideBySide(ctx context.Context) *sideBySide {
	e := r.env
	s := &sideBySide{Batches: r.prof.sbsBatches, KafkaEngineConsume: 1, KafkaEngineBlock: r.prof.keBlock}
	modern := e.layout == sensor.LayoutModern
	ke := func(format, table string) *drainFigures {
		return &drainFigures{System: "clickhouse-kafka-engine", Format: format, Table: table, Batches: s.Batches}
	}
	s.KafkaEngine = ke("json", "se_ke")
	s.Sluice = &drainFigures{System: "sluice", Format: "json", Table: "se_json", Batches: s.Batches, ModuleParams: e.sbsJSONParams}
	type corpus struct {
		format, topic string
		enc           encoder
		wasm          string
		engines       []*drainFigures
		flushMs       []int
		sluice        *drainFigures
	}
	corpora := []corpus{{format: "json", topic: "sensor_json", enc: sensor.AppendJSON, wasm: e.sbsJSONWasm,
		engines: []*drainFigures{s.KafkaEngine}, flushMs: []int{0}, sluice: s.Sluice}}
	if modern {
		s.KafkaEngineFlush500 = ke("json", "se_ke_f500")
		s.KafkaEngineAvro, s.KafkaEngineAvroFlush500 = ke("avro", "se_ke_avro"), ke("avro", "se_ke_avro_f500")
		s.SluiceAvro = &drainFigures{System: "sluice", Format: "avro", Table: "se_sbs_avro", Batches: s.Batches}
		corpora[0].engines = append(corpora[0].engines, s.KafkaEngineFlush500)
		corpora[0].flushMs = append(corpora[0].flushMs, 500)
		corpora = append(corpora, corpus{format: "avro", topic: "sensor_sbs_avro", enc: sensor.AppendAvro, wasm: e.avroWasm,
			engines: []*drainFigures{s.KafkaEngineAvro, s.KafkaEngineAvroFlush500}, flushMs: []int{0, 500}, sluice: s.SluiceAvro})
	}
	want := sensor.Expect(s.Batches, sensor.DrainSendTsUs)
	for _, c := range corpora {
		all := append([]*drainFigures{c.sluice}, c.engines...)
		fail := func(err error) {
			for _, f := range all {
				f.Error = err.Error()
			}
		}
		for _, f := range all {
			f.Topic = c.topic
		}
		if err := e.createTopic(ctx, c.topic, e.partitions); err != nil {
			fail(err)
			continue
		}
		r.logf("side by side: producing %d %s batches", s.Batches, c.format)
		secs, bytes, err := e.prefill(ctx, c.topic, s.Batches, c.enc, sensor.DrainSendTsUs)
		if err != nil {
			fail(err)
			continue
		}
		r.logf("side by side: produced %.0f MiB in %.1fs", float64(bytes)/(1<<20), secs)
		for i, f := range c.engines {
			r.kafkaEngine(ctx, f, want, c.flushMs[i])
			r.logf("side by side: %s", f.summary())
		}
		r.runSluice(ctx, c.sluice, c.wasm, int64(want.Rows), func() sensor.Expectation { return want }, nil)
		r.logf("side by side: %s", c.sluice.summary())
		for _, f := range c.engines {
			s.Pairs = append(s.Pairs, pair(c.sluice, f))
		}
	}
	sl, k := s.Sluice, s.KafkaEngine
	if k.AfterFirstRowsPerSec > 0 {
		s.Ratio = sl.AfterFirstRowsPerSec / k.AfterFirstRowsPerSec
	}
	if k.RowsPerSec > 0 {
		s.RatioOverall = sl.RowsPerSec / k.RowsPerSec
	}
	if k.RowsPerPipelineCoreSec > 0 {
		s.RatioPerCore = sl.RowsPerPipelineCoreSec / k.RowsPerPipelineCoreSec
	}
	return s
}

// kafkaEngine runs one Kafka-engine arm on f.Topic: the engine's tables
// and view are created with a new consumer group, and dropped once every
// row has landed and the count is still. flushMs is
// kafka_flush_interval_ms (26.9 only); 0 keeps the server's default.
func (r *rig) kafkaEngine(ctx context.Context, f *drainFigures, want sensor.Expectation, flushMs int) {
	e := r.env
	if err := e.waitMergesIdle(ctx, 2*time.Minute); err != nil {
		f.Error = err.Error()
		return
	}
	f.LoadAvg[0] = loadAvg()
	defer func() { f.LoadAvg[1] = loadAvg() }()
	f.Rows = int64(want.Rows)
	group := "ke_" + strconv.FormatInt(time.Now().UnixNano(), 36) // a failed push can commit: always a new group
	var stmts, stop []string
	var store, gate string
	if e.layout == sensor.LayoutModern {
		k := sensor.NewModernKafkaEngine(f.Table)
		ks := sensor.KafkaEngineSettings{Broker: e.kafka.Addr, Topic: f.Topic, Group: group, Format: "JSONEachRow",
			Consumers: 1, BlockSize: r.prof.keBlock, FlushIntervalMs: flushMs}
		if f.Format == "avro" {
			ks.Format, ks.RegistryURL = "AvroConfluent", e.registry.URL
		}
		stmts, stop, store, gate = k.DDL(ks), k.Stop(), k.Table, k.Table
		f.KafkaFlushIntervalMs = flushMs
		if flushMs == 0 {
			// kafka_flush_interval_ms defaults to stream_flush_interval_ms.
			if out, err := e.query(ctx, "SELECT value FROM system.settings WHERE name = 'stream_flush_interval_ms'"); err == nil {
				f.KafkaFlushIntervalMs, _ = strconv.Atoi(strings.TrimSpace(out))
			}
		}
	} else {
		k := sensor.NewKafkaEngine(f.Table)
		stmts, stop, store, gate = k.DDL(e.kafka.Addr, f.Topic, group, 1, r.prof.keBlock), k.Stop(), k.Store, k.Gate
	}
	var start time.Time
	for i, q := range stmts {
		if i == len(stmts)-1 {
			start = time.Now() // consumption starts with the view
		}
		if err := e.ch.Exec(ctx, q); err != nil {
			f.Error = err.Error()
			return
		}
	}
	w, werr := e.watch(ctx, watchSpec{
		table: store, expected: f.Rows, pid: e.chPID, start: start,
		quietFor: 2 * time.Second, stallFor: 90 * time.Second, progress: r.progress(f.Table),
	})
	f.fromSamples(w, f.Rows)
	if werr != nil {
		f.Error = werr.Error()
	}
	for _, q := range stop {
		if err := e.ch.Exec(ctx, q); err != nil {
			f.Error = join(f.Error, err.Error())
		}
	}
	e.finishGates(ctx, f, gate, want, 0)
	f.Server = e.serverCounters(ctx, store)
}

// sustained is one open-loop run at a fraction of the drain throughput.
type sustained struct {
	drainFigures
	Fraction         float64 `json:"fraction_of_drain"`
	TargetRowsPerSec float64 `json:"target_rows_per_s"`
	BatchesPerSec    float64 `json:"batches_per_s"`
	DurationS        float64 `json:"duration_s"`
	ProducerMaxLateS float64 `json:"producer_max_late_s"`
	// Latency from the intended send time to ingest_ts. On 26.9 ingest_ts
	// is now64(6) at insert, so the figures are exact to the microsecond
	// (LatencyResolutionS 1e-6). On 18.16 it is now(): a DateTime, whole
	// seconds, rounded down; a row's latency lies in [L, L+1s) for the L
	// measured, and every percentile likewise in [lo, lo+1s).
	LatencyResolutionS float64 `json:"latency_resolution_s"`
	LatencyP50LoS      float64 `json:"latency_p50_lo_s"`
	LatencyP99LoS      float64 `json:"latency_p99_lo_s"`
	LatencyMaxLoS      float64 `json:"latency_max_lo_s"`
	// The same, from the rig's 200 ms count() samples against the
	// producer's schedule: the time from the n-th row's intended send to
	// the first sample with n rows landed, assuming rows land in the order
	// they were sent (they do per partition; across the 8 partitions it is
	// an approximation). Resolution 200 ms.
	CountGapP50S float64 `json:"count_gap_latency_p50_s"`
	CountGapP99S float64 `json:"count_gap_latency_p99_s"`
	CountGapMaxS float64 `json:"count_gap_latency_max_s"`
	// Per second of the schedule: p50 and p99 of the ingest_ts latency's
	// lower bound, for the chart.
	PerSecond [][3]float64 `json:"latency_per_second_lo"`
	// The count-gap latency over the schedule: [seconds since t0, s].
	CountGap [][2]float64 `json:"count_gap_latency"`
	t0       time.Time    // the schedule's start
	start    time.Time    // sluice's start, the samples' origin
}

func (r *rig) sustained(ctx context.Context, fraction, drainRowsPerSec float64) *sustained {
	e := r.env
	name := fmt.Sprintf("se_sus_%02.0f", fraction*100)
	s := &sustained{drainFigures: drainFigures{System: "sluice", Format: "avro", Topic: "sensor_" + name, Table: name},
		Fraction: fraction, DurationS: r.prof.sustainedSeconds, LatencyResolutionS: e.layout.LatencyResolutionS()}
	s.TargetRowsPerSec = fraction * drainRowsPerSec
	rowsPerBatch := float64(sensor.ExpectedRows(200)) / 200
	s.BatchesPerSec = s.TargetRowsPerSec / rowsPerBatch
	s.Batches = uint64(s.BatchesPerSec * s.DurationS)
	if err := e.createTopic(ctx, s.Topic, e.partitions); err != nil {
		s.Error = err.Error()
		return s
	}
	// The schedule starts once sluice has joined, so t0 is set by produce,
	// and the expectation (send_ts_us) follows from it.
	var want sensor.Expectation
	ready := make(chan struct{})
	produce := func(ctx context.Context) error {
		s.t0 = time.Now().Add(200 * time.Millisecond)
		want = sensor.Expect(s.Batches, func(b uint64) int64 { return intendedTime(s.t0, b, s.BatchesPerSec).UnixMicro() })
		close(ready)
		late, err := e.openLoop(ctx, s.Topic, s.Batches, s.t0, s.BatchesPerSec, sensor.AppendAvro)
		s.ProducerMaxLateS = late.Seconds()
		return err
	}
	r.logf("sustained %.0f%%: %.0f rows/s (%.1f batches/s) for %.0fs", fraction*100, s.TargetRowsPerSec, s.BatchesPerSec, s.DurationS)
	rows := int64(sensor.ExpectedRows(s.Batches))
	s.start = r.runSluice(ctx, &s.drainFigures, e.avroWasm, rows, func() sensor.Expectation {
		select {
		case <-ready:
			return want
		default: // never produced: the gates fail on the count
			return sensor.Expectation{Rows: uint64(rows)}
		}
	}, produce)
	r.latency(ctx, s)
	if e.layout == sensor.LayoutModern {
		r.logf("sustained %.0f%%: latency p50 %.3f s, p99 %.3f s, max %.3f s (ingest_ts now64(6)); count-gap p50 %.2f s, p99 %.2f s; peak RSS %.0f MiB; gates pass %v%s",
			fraction*100, s.LatencyP50LoS, s.LatencyP99LoS, s.LatencyMaxLoS,
			s.CountGapP50S, s.CountGapP99S, s.PeakRSSMiB, s.GatesPass, errSuffix(s.Error))
		return s
	}
	r.logf("sustained %.0f%%: latency p50 [%.1f, %.1f) s, p99 [%.1f, %.1f) s, max [%.1f, %.1f) s (ingest_ts, 1 s resolution); count-gap p50 %.2f s, p99 %.2f s; peak RSS %.0f MiB; gates pass %v%s",
		fraction*100, s.LatencyP50LoS, s.LatencyP50LoS+1, s.LatencyP99LoS, s.LatencyP99LoS+1, s.LatencyMaxLoS, s.LatencyMaxLoS+1,
		s.CountGapP50S, s.CountGapP99S, s.PeakRSSMiB, s.GatesPass, errSuffix(s.Error))
	return s
}

// latency reads the per-row latencies of a sustained run from the server
// and derives the count-gap estimate from the samples.
func (r *rig) latency(ctx context.Context, s *sustained) {
	if s.t0.IsZero() {
		return
	}
	l := r.env.layout.LatencyUs()
	out, err := r.env.query(ctx, "SELECT quantilesExact(0.5, 0.99)("+l+"), max("+l+") FROM "+s.Table+" FORMAT TSV")
	if err != nil {
		s.Error = join(s.Error, "latency: "+err.Error())
		return
	}
	f := strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ").Replace(out))
	if len(f) == 3 {
		v := make([]float64, 3)
		for i := range f {
			x, _ := strconv.ParseFloat(f[i], 64)
			v[i] = x / 1e6
		}
		s.LatencyP50LoS, s.LatencyP99LoS, s.LatencyMaxLoS = v[0], v[1], v[2]
	}
	t0us := s.t0.UnixMicro()
	out, err = r.env.query(ctx, fmt.Sprintf("SELECT intDiv(%s - %d, 1000000) AS s, quantilesExact(0.5, 0.99)(%s) FROM %s GROUP BY s ORDER BY s FORMAT TSV",
		r.env.layout.SendTsUs(), t0us, l, s.Table))
	if err == nil {
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ").Replace(line))
			if len(f) == 3 {
				sec, _ := strconv.ParseFloat(f[0], 64)
				p50, _ := strconv.ParseFloat(f[1], 64)
				p99, _ := strconv.ParseFloat(f[2], 64)
				s.PerSecond = append(s.PerSecond, [3]float64{sec, p50 / 1e6, p99 / 1e6})
			}
		}
	}
	// Count gap: the n-th row was sent with batch b where ExpectedRows(b+1)
	// first reaches n, and had landed by the first sample with n rows.
	var gaps []float64
	total := int64(sensor.ExpectedRows(s.Batches))
	step := max(total/2000, 1)
	sent0 := s.t0.Sub(s.start).Seconds()
	b := uint64(0)
	for n := step; n <= total; n += step {
		for int64(sensor.ExpectedRows(b+1)) < n {
			b++
		}
		smp, ok := at(s.samples, n)
		if !ok {
			break
		}
		sent := float64(b) / s.BatchesPerSec
		gaps = append(gaps, smp.T-(sent0+sent))
		if len(s.CountGap) == 0 || sent-s.CountGap[len(s.CountGap)-1][0] >= 0.25 {
			s.CountGap = append(s.CountGap, [2]float64{sent, smp.T - (sent0 + sent)})
		}
	}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		s.CountGapP50S = gaps[len(gaps)/2]
		s.CountGapP99S = gaps[int(math.Ceil(0.99*float64(len(gaps))))-1]
		s.CountGapMaxS = gaps[len(gaps)-1]
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "; ERROR: " + e
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
