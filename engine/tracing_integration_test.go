package engine_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/internal/testinfra"
)

const producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// roundRobinProducer is a client producing to topic, over its partitions in turn.
func roundRobinProducer(t *testing.T, e *env, topic string) *kgo.Client {
	t.Helper()
	cl, err := e.kafka.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// produceTraced produces n log lines over the topic's partitions, every
// tenth with a W3C traceparent header.
func produceTraced(t *testing.T, e *env, topic string, n int) {
	t.Helper()
	cl := roundRobinProducer(t, e, topic)
	defer cl.Close()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Value: loggen.Generate(5, i).JSON}
		if i%10 == 0 {
			r.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte(producerTraceparent)}}
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// TestTraceTree runs a 2-partition pipeline with the SDK's in-memory
// exporter and checks the span tree, attributes and links, on each
// ClickHouse server of the matrix.
func TestTraceTree(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		const topic, n = "logs", 2000
		e := newEnvOn(t, server, topic, 2)
		produceTraced(t, e, topic, n)

		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		_, stop := run(t, e.config(t, "trace-tree", topic), engine.WithTracerProvider(tp))
		waitRows(t, e.ch, n, time.Minute)
		if err := stop(); err != nil {
			t.Fatal(err)
		}

		spans := exp.GetSpans()
		byName := map[string][]tracetest.SpanStub{}
		for _, s := range spans {
			byName[s.Name] = append(byName[s.Name], s)
		}
		consumes := byName["process "+topic]
		if len(consumes) == 0 || len(byName["transform"]) == 0 || len(byName["seal"]) == 0 {
			t.Fatalf("spans by name: process %d, transform %d, seal %d (names %v)", len(consumes), len(byName["transform"]), len(byName["seal"]), slices.Sorted(maps.Keys(byName)))
		}
		consumeIDs := map[string]tracetest.SpanStub{}
		partitions := map[string]bool{}
		records, producerLinks := 0, 0
		for _, s := range consumes {
			a := attrs(s.Attributes)
			if a["messaging.system"] != "kafka" || a["messaging.destination.name"] != topic || a["messaging.consumer.group.name"] != "trace-tree" ||
				a["messaging.operation.name"] != "process" || a["messaging.operation.type"] != "process" || s.SpanKind.String() != "consumer" {
				t.Errorf("consume attributes: %v (kind %s)", a, s.SpanKind)
			}
			for _, kv := range s.Attributes {
				if kv.Key == "messaging.destination.partition.id" && kv.Value.Type() != attribute.STRING {
					t.Errorf("messaging.destination.partition.id is a %s, want a string", kv.Value.Type())
				}
			}
			first, _ := strconv.Atoi(a["sluice.kafka.offset.first"])
			last, _ := strconv.Atoi(a["sluice.kafka.offset.last"])
			count, _ := strconv.Atoi(a["messaging.batch.message_count"])
			if last-first+1 != count {
				t.Errorf("consume offsets %d-%d but %d records", first, last, count)
			}
			records += count
			partitions[a["messaging.destination.partition.id"]] = true
			consumeIDs[s.SpanContext.SpanID().String()] = s
			for _, l := range s.Links {
				if l.SpanContext.TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
					producerLinks++
				}
			}
		}
		if records != n {
			t.Errorf("consume spans cover %d records, want %d", records, n)
		}
		if len(partitions) != 2 {
			t.Errorf("consume spans on partitions %v, want 2", partitions)
		}
		if producerLinks == 0 {
			t.Error("no consume span links to the producer's traceparent")
		}
		transformed, rows := 0, 0
		for _, s := range byName["transform"] {
			parent, ok := consumeIDs[s.Parent.SpanID().String()]
			if !ok || parent.SpanContext.TraceID() != s.SpanContext.TraceID() {
				t.Errorf("transform span is not a child of a consume span")
				continue
			}
			a := attrs(s.Attributes)
			if a["sluice.module.name"] != "log-normalize" || len(a["sluice.module.sha256"]) != 64 {
				t.Errorf("transform attributes: %v", a)
			}
			in, _ := strconv.Atoi(a["sluice.records.in"])
			out, _ := strconv.Atoi(a["sluice.rows.out"])
			transformed += in
			rows += out
		}
		if transformed != n || rows != n {
			t.Errorf("transform spans: %d records in, %d rows out; want %d each", transformed, rows, n)
		}
		sealedRows := 0
		for _, s := range byName["seal"] {
			a := attrs(s.Attributes)
			r, _ := strconv.Atoi(a["sluice.rows"])
			sealedRows += r
			if a["db.collection.name"] != "logs" || a["db.namespace"] != "default" {
				t.Errorf("seal attributes: %v", a)
			}
			for _, l := range s.Links {
				if _, ok := consumeIDs[l.SpanContext.SpanID().String()]; !ok {
					t.Errorf("seal span links to %s, not a consume span", l.SpanContext.SpanID())
				}
			}
			if len(s.Links) == 0 && r > 0 {
				t.Errorf("seal span of %d rows has no links", r)
			}
		}
		if sealedRows != n {
			t.Errorf("seal spans carry %d rows, want %d", sealedRows, n)
		}

		// Every successful insert has a flush span; together they carry every
		// row, and every consume span is linked from the flush span of the
		// insert that carried its rows.
		flushedRows := 0
		linked := map[string]bool{}
		if len(byName["INSERT logs"]) == 0 {
			t.Fatal("no flush spans")
		}
		host, port, _ := net.SplitHostPort(e.ch.Addr)
		for _, s := range byName["INSERT logs"] {
			a := attrs(s.Attributes)
			if a["db.system.name"] != "clickhouse" || a["db.collection.name"] != "logs" || a["db.namespace"] != "default" ||
				a["db.operation.name"] != "INSERT" || a["sluice.clickhouse.shard"] != "default" || a["server.address"] != host ||
				a["server.port"] != port || a["sluice.insert.attempt"] != "1" || s.SpanKind.String() != "client" {
				t.Errorf("flush attributes: %v (kind %s)", a, s.SpanKind)
			}
			for k := range a {
				if strings.HasPrefix(k, "db.clickhouse.") {
					t.Errorf("flush attribute %s is not a semantic convention", k)
				}
			}
			r, _ := strconv.Atoi(a["sluice.rows"])
			b, _ := strconv.Atoi(a["sluice.bytes"])
			if r <= 0 || b < r {
				t.Errorf("flush span carries %d rows in %d bytes", r, b)
			}
			flushedRows += r
			if !s.EndTime.After(s.StartTime) {
				t.Errorf("flush span %s–%s has no duration", s.StartTime, s.EndTime)
			}
			for _, l := range s.Links {
				id := l.SpanContext.SpanID().String()
				if _, ok := consumeIDs[id]; !ok {
					t.Errorf("flush span links to %s, not a consume span", id)
				}
				linked[id] = true
			}
		}
		if flushedRows != n {
			t.Errorf("flush spans carry %d rows, want %d", flushedRows, n)
		}
		for id := range consumeIDs {
			if !linked[id] {
				t.Errorf("consume span %s is linked from no flush span", id)
			}
		}
	})
}

// otlpReceiver is an in-test OTLP/HTTP trace receiver that decodes the
// protobuf requests.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]int // by name
	svc   map[string]bool
	all   []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				r.svc[kv.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans[s.Name]++
				r.all = append(r.all, s)
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// TestOTLPExportAndMetrics runs the pipeline with the real OTLP/HTTP
// exporter configured as users configure it, against a receiver that decodes
// the requests, and scrapes /metrics after the run.
func TestOTLPExportAndMetrics(t *testing.T) {
	const topic, n = "logs", 3000
	e := newEnv(t, topic, 2)
	produceTraced(t, e, topic, n)
	recv := &otlpReceiver{spans: map[string]int{}, svc: map[string]bool{}}
	srv := httptest.NewServer(recv)
	defer srv.Close()

	ratio := 1.0
	tc := telemetry.TracesConfig{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: srv.URL, SampleRatio: &ratio, ServiceName: "sluice-test"}
	tp, shutdown, err := telemetry.Setup(context.Background(), tc, "test")
	if err != nil {
		t.Fatal(err)
	}
	p, stop := run(t, e.config(t, "otlp", topic), engine.WithTracerProvider(tp))
	metricsSrv := httptest.NewServer(p.Handler())
	defer metricsSrv.Close()
	waitRows(t, e.ch, n, time.Minute)
	// Give the commit loop a tick so lag reaches 0.
	time.Sleep(1500 * time.Millisecond)
	body := get(t, metricsSrv.URL+"/metrics")
	if code := status(t, metricsSrv.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d while consuming", code)
	}
	if code := status(t, metricsSrv.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d", code)
	}
	// Readiness follows ClickHouse: not ready while it is down, ready
	// again once it is back.
	if err := e.ch.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past the cached check
	code, why := statusBody(t, metricsSrv.URL+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(why, "ClickHouse unreachable") {
		t.Errorf("/readyz with ClickHouse stopped = %d %q, want 503 naming ClickHouse", code, why)
	}
	startCtx, cancelStart := context.WithTimeout(context.Background(), time.Minute)
	if err := e.ch.Start(startCtx); err != nil {
		cancelStart()
		t.Fatal(err)
	}
	cancelStart()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, why := statusBody(t, metricsSrv.URL+"/readyz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q 10 s after ClickHouse came back", code, why)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	recv.mu.Lock()
	defer recv.mu.Unlock()
	if !recv.svc["sluice-test"] {
		t.Errorf("no spans from service sluice-test; services %v", recv.svc)
	}
	for _, name := range []string{"process logs", "transform", "seal", "INSERT logs"} {
		if recv.spans[name] == 0 {
			t.Errorf("receiver got no %s spans (got %v)", name, recv.spans)
		}
	}

	for _, want := range []string{
		fmt.Sprintf("sluice_records_in_total %d", n),
		fmt.Sprintf("sluice_rows_out_total %d", n),
		fmt.Sprintf("sluice_rows_inserted_total %d", n),
		"sluice_records_dead_lettered_total 0",
		"sluice_records_errored_total 0",
		fmt.Sprintf(`sluice_table_rows_inserted_total{table="default.logs"} %d`, n),
		`sluice_insert_seconds_count{outcome="ok",table="default.logs"}`,
		`sluice_sink_shard_queue_depth{shard="default"} 0`,
		`sluice_sink_shard_failing{shard="default"} 0`,
		"sluice_fetch_pauses_total",
		"sluice_module_instances_started_total 2",
		"sluice_module_traps_total 0",
		`sluice_consumer_lag{partition="0",topic="logs"} 0`,
		`sluice_consumer_lag{partition="1",topic="logs"} 0`,
		"sluice_inflight_budget_bytes 1.34217728e+08",
		"sluice_module_batch_seconds_count",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want+" ") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The two instances were open when /metrics was read.
	if f := parseMetrics(t, body)["sluice_module_memory_bytes"]; f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() <= 0 {
		t.Errorf("sluice_module_memory_bytes is %v, want the open instances' memory", f)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = io.Copy(&b, resp.Body)
	return b.String()
}

func statusBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sampledProducerEvery and unsampledProducerEvery place producer
// traceparent headers in produceSampling's records.
const sampledProducerEvery, unsampledProducerEvery = 500, 7

// produceSampling produces n log lines over the topic's partitions. Every
// sampledProducerEvery-th record carries a sampled producer traceparent of
// its own trace, every unsampledProducerEvery-th one an unsampled one. It
// returns the sampled producers' span ids by trace id, and the unsampled
// ones' trace ids.
func produceSampling(t *testing.T, e *env, topic string, n int) (sampled map[string]string, unsampled map[string]bool) {
	t.Helper()
	cl := roundRobinProducer(t, e, topic)
	defer cl.Close()
	sampled, unsampled = map[string]string{}, map[string]bool{}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Value: loggen.Generate(7, i).JSON}
		tid, sid := fmt.Sprintf("%016x%016x", i+1, uint64(i+1)*0x9e3779b97f4a7c15), fmt.Sprintf("%016x", i+1)
		switch {
		case i%sampledProducerEvery == 0:
			sampled[tid] = sid
			r.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + tid + "-" + sid + "-01")}}
		case i%unsampledProducerEvery == 0:
			unsampled[tid] = true
			r.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + tid + "-" + sid + "-00")}}
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return sampled, unsampled
}

// pbAttrs indexes OTLP attributes by key.
func pbAttrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// ratioSamples is the SDK's TraceIDRatioBased decision for a trace id.
func ratioSamples(traceID []byte, ratio float64) bool {
	return binary.BigEndian.Uint64(traceID[8:16])>>1 < uint64(ratio*(1<<63))
}

// TestTraceSampling runs a 2-partition pipeline over many small batches
// with the OTLP/HTTP exporter set up as the binary does, at config sampling
// ratios and OTEL_TRACES_SAMPLER values, and follows every exported batch
// to its inserts through the spans the receiver decoded.
func TestTraceSampling(t *testing.T) {
	const topic, n = "logs", 4000
	e := newEnv(t, topic, 2)
	sampledProducers, unsampledProducers := produceSampling(t, e, topic, n)
	// The batch span processor drops spans when its queue is full: make it
	// large enough for always_on.
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100000")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
	ddl := readSchema(t)
	for i, tc := range []struct {
		name, sampler, arg string  // OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG
		ratio              float64 // observability.traces.sample_ratio
		// rootRatio is the share of batches without a sampled producer
		// that are sampled; producers: batches with one are sampled.
		rootRatio float64
		producers bool
	}{
		{"ratio 0.01", "", "", 0.01, 0.01, true},
		{"ratio 0.5", "", "", 0.5, 0.5, true},
		{"always_on", "always_on", "", 0, 1, true},
		{"always_off", "always_off", "", 1, 0, false},
		{"parentbased_traceidratio", "parentbased_traceidratio", "0.25", 1, 0.25, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			table := fmt.Sprintf("logs_%d", i)
			if err := e.ch.Exec(context.Background(), strings.Replace(ddl, "CREATE TABLE logs", "CREATE TABLE "+table, 1)); err != nil {
				t.Fatal(err)
			}
			recv := &otlpReceiver{spans: map[string]int{}, svc: map[string]bool{}}
			srv := httptest.NewServer(recv)
			defer srv.Close()
			ratio := tc.ratio
			tp, shutdown, err := telemetry.Setup(context.Background(), telemetry.TracesConfig{Exporter: "otlp", Protocol: "http/protobuf",
				Endpoint: srv.URL, SampleRatio: &ratio, ServiceName: "sluice-sampling"}, "test")
			if err != nil {
				t.Fatal(err)
			}
			cfg := e.config(t, "sampling-"+table, topic)
			cfg.Module.Tables = []string{table}
			cfg.Module.Params = map[string]string{"table": table}
			cfg.Kafka.MaxPollRecords = 20
			// Many chunks and inserts, each with rows of several batches.
			cfg.ClickHouse.ChunkBytes = 8 << 10
			cfg.ClickHouse.MaxInsertRows = 300
			_, stop := run(t, cfg, engine.WithTracerProvider(tp))
			for deadline := time.Now().Add(time.Minute); queryInt(t, e.ch, "SELECT count() FROM "+table) < n; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d rows after a minute", queryInt(t, e.ch, "SELECT count() FROM "+table), n)
				}
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := queryInt(t, e.ch, "SELECT count() FROM "+table); got != n {
				t.Fatalf("%d rows in %s, want %d", got, table, n)
			}
			recv.mu.Lock()
			defer recv.mu.Unlock()
			checkSampledTraces(t, recv.all, e.ch.Addr, table, n, tc.rootRatio, tc.producers, sampledProducers, unsampledProducers)
			checkFindRecord(t, recv.all, topic)
		})
	}
}

// checkSampledTraces checks the spans of one run: every exported consume
// span reaches the flush spans of the inserts that carried its rows, with
// its rows, and the sampler chose the batches it should have.
func checkSampledTraces(t *testing.T, spans []*tracepb.Span, chAddr, table string, n int, rootRatio float64, producers bool,
	sampledProducers map[string]string, unsampledProducers map[string]bool) {
	t.Helper()
	if rootRatio == 0 && !producers {
		if len(spans) != 0 {
			t.Fatalf("%d spans exported, want none", len(spans))
		}
		return
	}
	sampledProducers = maps.Clone(sampledProducers)
	id := hex.EncodeToString
	consumes := map[string]*tracepb.Span{}
	var transforms, seals, flushes []*tracepb.Span
	for _, s := range spans {
		switch s.Name {
		case "process logs":
			consumes[id(s.SpanId)] = s
		case "transform":
			transforms = append(transforms, s)
		case "seal":
			seals = append(seals, s)
		case "INSERT " + table:
			flushes = append(flushes, s)
		default:
			t.Errorf("span named %q", s.Name)
		}
	}
	if len(consumes) == 0 || len(flushes) == 0 {
		t.Fatalf("%d consume and %d flush spans exported", len(consumes), len(flushes))
	}
	// parentConsume is the exported consume span s is a child of.
	parentConsume := func(s *tracepb.Span) *tracepb.Span {
		c, ok := consumes[id(s.ParentSpanId)]
		if !ok || !bytes.Equal(c.TraceId, s.TraceId) {
			t.Errorf("%s span %s is not the child of an exported consume span", s.Name, id(s.SpanId))
			return nil
		}
		return c
	}
	rowsOut := map[string]int64{}
	for _, s := range transforms {
		if c := parentConsume(s); c != nil {
			rowsOut[id(c.SpanId)] += pbAttrs(s.Attributes)["sluice.rows.out"].GetIntValue()
		}
	}
	// linkedRows sums, per consume span, the rows the links of spans say
	// they carry of it.
	linkedRows := func(kind string, spans []*tracepb.Span) map[string]int64 {
		rows := map[string]int64{}
		for _, s := range spans {
			parentConsume(s)
			a := pbAttrs(s.Attributes)
			if got := a["sluice.batches.sampled"].GetIntValue(); got != int64(len(s.Links)) || s.DroppedLinksCount != 0 {
				t.Errorf("%s span: %d links (%d dropped), sluice.batches.sampled %d", kind, len(s.Links), s.DroppedLinksCount, got)
			}
			for _, l := range s.Links {
				c, ok := consumes[id(l.SpanId)]
				if !ok || !bytes.Equal(c.TraceId, l.TraceId) {
					t.Errorf("%s span links to %s/%s, not an exported consume span", kind, id(l.TraceId), id(l.SpanId))
					continue
				}
				r, ok := pbAttrs(l.Attributes)["sluice.rows"]
				if !ok {
					t.Errorf("%s span's link has no sluice.rows", kind)
				}
				rows[id(l.SpanId)] += r.GetIntValue()
			}
		}
		return rows
	}
	sealRows, flushRows := linkedRows("seal", seals), linkedRows("flush", flushes)
	host, port, _ := net.SplitHostPort(chAddr)
	for _, s := range flushes {
		a := pbAttrs(s.Attributes)
		if a["db.collection.name"].GetStringValue() != table || a["db.namespace"].GetStringValue() != "default" ||
			a["server.address"].GetStringValue() != host || strconv.Itoa(int(a["server.port"].GetIntValue())) != port ||
			a["db.operation.name"].GetStringValue() != "INSERT" || a["db.system.name"].GetStringValue() != "clickhouse" {
			t.Errorf("flush attributes: %v", a)
		}
	}

	covered := 0
	for sid, c := range consumes {
		a := pbAttrs(c.Attributes)
		count := int(a["messaging.batch.message_count"].GetIntValue())
		covered += count
		if p := a["messaging.destination.partition.id"].GetStringValue(); p != "0" && p != "1" {
			t.Errorf("consume span partition id %v, want the string 0 or 1", a["messaging.destination.partition.id"])
		}
		if rowsOut[sid] != int64(count) {
			t.Errorf("consume span %s: %d records, its transforms made %d rows", sid, count, rowsOut[sid])
		}
		if flushRows[sid] != rowsOut[sid] || sealRows[sid] != rowsOut[sid] {
			t.Errorf("consume span %s made %d rows; its seal links carry %d, its flush links %d", sid, rowsOut[sid], sealRows[sid], flushRows[sid])
		}
		// The sampler's decision: a root batch by its trace id, a batch
		// with a sampled producer as that producer's child.
		var linkedProducers []string
		for _, l := range c.Links {
			tid := id(l.TraceId)
			if unsampledProducers[tid] {
				t.Errorf("consume span links to the unsampled producer trace %s", tid)
			}
			if sampledProducers[tid] != id(l.SpanId) {
				t.Errorf("consume span links to %s/%s, no sampled producer", tid, id(l.SpanId))
			}
			if _, ok := pbAttrs(l.Attributes)["messaging.kafka.offset"]; !ok {
				t.Errorf("producer link without messaging.kafka.offset")
			}
			linkedProducers = append(linkedProducers, tid)
		}
		switch {
		case len(c.ParentSpanId) == 0:
			if len(linkedProducers) > 0 || !ratioSamples(c.TraceId, rootRatio) {
				t.Errorf("root consume span %s (producer links %v) sampled at ratio %v", id(c.TraceId), linkedProducers, rootRatio)
			}
		case !slices.Contains(linkedProducers, id(c.TraceId)) || sampledProducers[id(c.TraceId)] != id(c.ParentSpanId):
			t.Errorf("consume span's parent %s/%s is not a sampled producer it links to (%v)", id(c.TraceId), id(c.ParentSpanId), linkedProducers)
		}
		for _, p := range linkedProducers {
			delete(sampledProducers, p)
		}
	}
	if producers && len(sampledProducers) > 0 {
		t.Errorf("sampled producers linked from no consume span: %v", sampledProducers)
	}
	// Many small batches, sampled at about the ratio (with those forced
	// in by their producers).
	switch {
	case rootRatio == 1:
		if covered != n || len(consumes) < n/40 {
			t.Errorf("%d consume spans cover %d records, want all %d in at least %d", len(consumes), covered, n, n/40)
		}
	case covered < int(rootRatio*float64(n)/2) || covered > int((rootRatio+0.1)*float64(n)) || covered == n:
		t.Errorf("consume spans cover %d of %d records at ratio %v", covered, n, rootRatio)
	}
	t.Logf("%d consume spans over %d of %d records, %d transform, %d seal, %d flush spans", len(consumes), covered, n, len(transforms), len(seals), len(flushes))
}

// checkFindRecord writes spans as OTLP/JSON, reads them back as sluice trace
// does, and finds the first and last record of every exported consume span:
// the spans found are that consume span, its transforms, and seal and
// INSERT spans that carry all of its rows. A record of an unexported batch
// is not found.
func checkFindRecord(t *testing.T, spans []*tracepb.Span, topic string) {
	t.Helper()
	if len(spans) == 0 {
		return
	}
	doc, err := protojson.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
	if err != nil {
		t.Fatal(err)
	}
	read, err := telemetry.ReadSpans(bytes.NewReader(append(doc, '\n')))
	if err != nil || len(read) != len(spans) {
		t.Fatalf("read back %d of %d spans: %v", len(read), len(spans), err)
	}
	covered := map[int32]map[int64]bool{0: {}, 1: {}}
	for _, c := range read {
		if c.Name != "process "+topic {
			continue
		}
		a := pbAttrs(c.Attributes)
		partition, _ := strconv.Atoi(a["messaging.destination.partition.id"].GetStringValue())
		first, last, count := a["sluice.kafka.offset.first"].GetIntValue(), a["sluice.kafka.offset.last"].GetIntValue(), a["messaging.batch.message_count"].GetIntValue()
		for o := first; o <= last; o++ {
			covered[int32(partition)][o] = true
		}
		for _, offset := range []int64{first, last} {
			found := telemetry.FindRecord(read, topic, int32(partition), offset)
			if len(found) != 1 || !bytes.Equal(found[0].Consume.SpanId, c.SpanId) {
				t.Errorf("%s/%d@%d: found %d consume spans, want %s", topic, partition, offset, len(found), hex.EncodeToString(c.SpanId))
				continue
			}
			rt := found[0]
			var sealed, inserted int64
			for _, s := range rt.Seals {
				sealed += s.Rows
			}
			for _, s := range rt.Inserts {
				if !s.Exact || s.Span.Name != "INSERT "+telemetry.Attr(s.Span, "db.collection.name") {
					t.Errorf("%s/%d@%d: insert span %s (exact rows %v)", topic, partition, offset, s.Span.Name, s.Exact)
				}
				inserted += s.Rows
			}
			if len(rt.Transforms) == 0 || sealed != count || inserted != count {
				t.Errorf("%s/%d@%d: %d transforms; seals carry %d rows, inserts %d, of a batch of %d", topic, partition, offset, len(rt.Transforms), sealed, inserted, count)
			}
		}
	}
	for o := int64(0); o < 100; o++ {
		if !covered[0][o] {
			if found := telemetry.FindRecord(read, topic, 0, o); len(found) != 0 {
				t.Errorf("%s/0@%d is in no exported batch, found %d", topic, o, len(found))
			}
			break
		}
	}
}
