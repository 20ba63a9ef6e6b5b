package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/telemetry"
)

const producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// produceTraced produces n log lines over the topic's partitions, every
// tenth with a W3C traceparent header.
func produceTraced(t *testing.T, e *env, topic string, n int) {
	t.Helper()
	cl, err := e.kafka.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
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
// exporter and checks the span tree, attributes and links.
func TestTraceTree(t *testing.T) {
	const topic, n = "logs", 2000
	e := newEnv(t, topic, 2)
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
	consumes := byName["consume"]
	if len(consumes) == 0 || len(byName["transform"]) == 0 || len(byName["seal"]) == 0 {
		t.Fatalf("spans by name: consume %d, transform %d, seal %d", len(consumes), len(byName["transform"]), len(byName["seal"]))
	}
	consumeIDs := map[string]tracetest.SpanStub{}
	partitions := map[string]bool{}
	records, producerLinks := 0, 0
	for _, s := range consumes {
		a := attrs(s.Attributes)
		if a["messaging.system"] != "kafka" || a["messaging.destination.name"] != topic || a["messaging.consumer.group.name"] != "trace-tree" {
			t.Errorf("consume attributes: %v", a)
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
		if a["db.collection.name"] != "default.logs" {
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
	if len(byName["flush"]) == 0 {
		t.Fatal("no flush spans")
	}
	for _, s := range byName["flush"] {
		a := attrs(s.Attributes)
		if a["db.system.name"] != "clickhouse" || a["db.collection.name"] != "default.logs" || a["db.namespace"] != "default" ||
			a["db.operation.name"] != "INSERT" || a["db.clickhouse.shard"] != "default" || a["db.clickhouse.replica"] != e.ch.Addr ||
			a["db.clickhouse.attempt"] != "1" || s.SpanKind.String() != "client" {
			t.Errorf("flush attributes: %v (kind %s)", a, s.SpanKind)
		}
		r, _ := strconv.Atoi(a["db.clickhouse.rows"])
		b, _ := strconv.Atoi(a["db.clickhouse.bytes"])
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
}

// otlpReceiver is an in-test OTLP/HTTP trace receiver that decodes the
// protobuf requests.
type otlpReceiver struct {
	mu    sync.Mutex
	spans map[string]int // by name
	svc   map[string]bool
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
	for _, name := range []string{"consume", "transform", "seal", "flush"} {
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
