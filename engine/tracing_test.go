package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestProducerContext checks the allocation-free traceparent parser against
// the SDK's propagator on valid and malformed headers.
func TestProducerContext(t *testing.T) {
	for _, v := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", // only the sampled flag is kept
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-fields",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // version 00 has no more fields
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // uppercase
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"",
	} {
		h := []kgo.RecordHeader{{Key: "other", Value: []byte("x")}, {Key: "traceparent", Value: []byte(v)}}
		got, ok := producerContext(h)
		want := trace.SpanContextFromContext(traceContext.Extract(context.Background(), kotel.NewRecordCarrier(&kgo.Record{Headers: h})))
		if ok != want.IsValid() || ok && (got.TraceID() != want.TraceID() || got.SpanID() != want.SpanID() ||
			got.IsSampled() != want.IsSampled() || !got.IsRemote()) {
			t.Errorf("%q: parsed %v %v, propagator %v", v, ok, got, want)
		}
	}
	if _, ok := producerContext(nil); ok {
		t.Error("no headers parsed as a context")
	}
	// A repeated traceparent: both read the first, so that the batch is
	// the child of the producer it was sampled for.
	h := []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: "traceparent", Value: []byte("00-11111111111111111111111111111111-2222222222222222-00")},
	}
	got, _ := producerContext(h)
	want := trace.SpanContextFromContext(traceContext.Extract(context.Background(), kotel.NewRecordCarrier(&kgo.Record{Headers: h})))
	if got.TraceID() != want.TraceID() || got.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("a repeated traceparent: parsed %v, propagator %v; want both the first", got.TraceID(), want.TraceID())
	}
}

// BenchmarkExtractProducerTrace measures what a sampled batch pays once
// to read its producer's trace context (traceparent and tracestate) from
// a record's headers with the propagator.
func BenchmarkExtractProducerTrace(b *testing.B) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{
		{Key: "content-type", Value: []byte("application/json")},
		{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		{Key: "tracestate", Value: []byte("vendor=value,other=x")},
		{Key: "source", Value: []byte("web")},
	}}
	b.ReportAllocs()
	for b.Loop() {
		if !trace.SpanContextFromContext(traceContext.Extract(context.Background(), kotel.NewRecordCarrier(r))).IsSampled() {
			b.Fatal("not sampled")
		}
	}
}

// TestUnsampledTracingCost checks that what tracing does for an unsampled
// batch costs no allocation per record, and holding and sealing its rows
// none at all.
func TestUnsampledTracingCost(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	p := &Pipeline{tracer: tp.Tracer(tracerName)}
	batch := func(n int) kgo.FetchTopicPartition {
		fp := kgo.FetchTopicPartition{Topic: "logs"}
		for i := range n {
			// Unsampled producer contexts must not make the batch sampled
			// or cost anything per record.
			tp := fmt.Sprintf("00-%032x-%016x-00", i+1, i+1)
			fp.Records = append(fp.Records, &kgo.Record{Offset: int64(i), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp)}}})
		}
		return fp
	}
	one, many := batch(1), batch(1000)
	consume := func(fp kgo.FetchTopicPartition) float64 {
		return testing.AllocsPerRun(100, func() {
			_, span := p.startConsume(fp)
			if span.SpanContext().IsSampled() {
				t.Fatal("unsampled producers sampled the batch")
			}
			span.End()
		})
	}
	if a1, a1000 := consume(one), consume(many); a1000 != a1 {
		t.Errorf("starting an unsampled consume span: %v allocations for 1 record, %v for 1000", a1, a1000)
	}

	w := &partitionWorker{marks: []int{0}, holders: make([][]clickhouse.Ack, 1)}
	unsampled := &batchAck{}
	if a := testing.AllocsPerRun(100, func() {
		if w.holdFor(0, unsampled) != clickhouse.Ack(unsampled) {
			t.Fatal("an unsampled batch is held as something else than its ack")
		}
	}); a != 0 {
		t.Errorf("holding an unsampled batch: %v allocations", a)
	}
	chunk := clickhouse.NewChunk(nil, []clickhouse.Ack{unsampled, unsampled})
	exp := tracetest.NewInMemoryExporter()
	p.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer(tracerName)
	if a := testing.AllocsPerRun(100, func() { p.traceSeal(chunk) }); a != 0 {
		t.Errorf("sealing a chunk of unsampled batches: %v allocations", a)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("a chunk of unsampled batches got %d seal spans", n)
	}
}

// TestSampledHoldRows checks the row range a sampled batch's hold records
// as the worker appends the rows of several batches to one block.
func TestSampledHoldRows(t *testing.T) {
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	w := &partitionWorker{marks: []int{0}, holders: make([][]clickhouse.Ack, 1)}
	hold := func(mark int, b *batchAck) clickhouse.Ack {
		w.marks[0] = mark
		h := w.holdFor(0, b)
		w.holders[0] = append(w.holders[0], h)
		return h
	}
	a := hold(0, &batchAck{span: sampled})
	hold(5, &batchAck{}) // unsampled: ends a's range
	c := hold(8, &batchAck{span: sampled})
	d := hold(8, &batchAck{span: sampled}) // c's record was rolled back: c has no rows
	for _, tc := range []struct {
		name        string
		h           clickhouse.Ack
		start, rows int
	}{{"a", a, 0, 5}, {"c", c, 8, 0}, {"d", d, 8, -1}} {
		h, ok := tc.h.(*sampledHold)
		if !ok {
			t.Fatalf("%s: sampled batch held as %T", tc.name, tc.h)
		}
		if h.start != tc.start || h.rows != tc.rows {
			t.Errorf("%s: start %d rows %d, want %d %d", tc.name, h.start, h.rows, tc.start, tc.rows)
		}
	}
}

// BenchmarkUnsampledBatchTracing measures what tracing adds to one polled
// batch of 500 records that is not sampled: the consume and transform
// spans, holding its rows and the seal and insert checks, with tracing off
// (noop provider) and with the SDK at ratio 0.
func BenchmarkUnsampledBatchTracing(b *testing.B) {
	fp := kgo.FetchTopicPartition{Topic: "logs"}
	for i := range 500 {
		fp.Records = append(fp.Records, &kgo.Record{Offset: int64(i)})
	}
	for _, tc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", noop.NewTracerProvider()},
		{"sdk-unsampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := &Pipeline{tracer: tc.tp.Tracer(tracerName)}
			w := &partitionWorker{marks: []int{0}, holders: make([][]clickhouse.Ack, 1)}
			b.ReportAllocs()
			for b.Loop() {
				ctx, span := p.startConsume(fp)
				ack := &batchAck{span: span.SpanContext()}
				_, tspan := p.tracer.Start(ctx, "transform")
				tspan.End()
				w.holders[0] = append(w.holders[0][:0], w.holdFor(0, ack))
				p.traceSeal(clickhouse.NewChunk(nil, w.holders[0]))
				span.End()
			}
		})
	}
}

// TestProducerLinksPastLimit checks that a sampled batch with more sampled
// producers than the link limit links the first maxLinks, counts the rest
// and names their trace ids in an event, and that it is a child of its
// first sampled producer.
func TestProducerLinksPastLimit(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	limits := sdktrace.NewSpanLimits()
	limits.LinkCountLimit = maxLinks
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSpanLimits(limits),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	p := &Pipeline{tracer: tp.Tracer(tracerName)}
	const extra = 76
	fp := kgo.FetchTopicPartition{Topic: "logs"}
	fp.Partition = 3
	fp.Records = append(fp.Records, &kgo.Record{Offset: 0, Headers: []kgo.RecordHeader{{Key: "traceparent",
		Value: []byte("00-00000000000000000000000000000001-0000000000000001-00")}}}) // unsampled: not the parent
	for i := 1; i <= maxLinks+extra; i++ {
		fp.Records = append(fp.Records, &kgo.Record{Offset: int64(i), Headers: []kgo.RecordHeader{{Key: "traceparent",
			Value: fmt.Appendf(nil, "00-%032x-%016x-01", i+1, i+1)}}})
	}
	_, span := p.startConsume(fp)
	span.End()
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want the consume span", len(spans))
	}
	s := spans[0]
	if s.Name != "process logs" || s.Parent.TraceID().String() != fmt.Sprintf("%032x", 2) || s.Parent.SpanID().String() != fmt.Sprintf("%016x", 2) {
		t.Errorf("span %q with parent %s/%s, want process logs, child of the first sampled producer", s.Name, s.Parent.TraceID(), s.Parent.SpanID())
	}
	if len(s.Links) != maxLinks || s.DroppedLinks != 0 {
		t.Errorf("%d links (%d dropped by the SDK), want %d", len(s.Links), s.DroppedLinks, maxLinks)
	}
	for i, l := range s.Links {
		if l.SpanContext.SpanID().String() != fmt.Sprintf("%016x", i+2) || len(l.Attributes) != 1 || l.Attributes[0].Value.AsInt64() != int64(i+1) {
			t.Errorf("link %d: %s %v, want the producer of offset %d", i, l.SpanContext.SpanID(), l.Attributes, i+1)
			break
		}
	}
	if a := attrsOf(s); a["sluice.producer.links.dropped"] != fmt.Sprint(extra) || a["messaging.destination.partition.id"] != "3" {
		t.Errorf("attributes %v, want %d dropped producer links", a, extra)
	}
	if len(s.Events) != 1 || s.Events[0].Name != "sluice.producer.unlinked" {
		t.Fatalf("events %v, want one sluice.producer.unlinked", s.Events)
	}
	ids := s.Events[0].Attributes[0].Value.AsStringSlice()
	if len(ids) != extra || ids[0] != fmt.Sprintf("%032x", maxLinks+2) || ids[extra-1] != fmt.Sprintf("%032x", maxLinks+extra+1) {
		t.Errorf("event names %d trace ids (%v…), want the %d unlinked", len(ids), ids[:min(len(ids), 2)], extra)
	}
}

func attrsOf(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// TestFlushSpanOfFailedAttempt checks a flush span's name, parent and
// attributes, and what a failed attempt adds: error status, error.type and
// the ClickHouse error code.
func TestFlushSpanOfFailedAttempt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p := &Pipeline{tracer: sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer(tracerName)}
	consume := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
	first := &sampledHold{batchAck: &batchAck{span: consume}}
	start := time.Now()
	for _, tc := range []struct {
		err               error
		errorType, dbCode string
	}{
		{&clickhouse.ServerError{Code: 241, Status: 500, Message: "memory limit"}, "241", "241"},
		{fmt.Errorf("flush: %w", &clickhouse.PermanentError{Err: errors.New("no such table")}), "_OTHER", ""},
		{nil, "", ""},
	} {
		exp.Reset()
		p.traceFlush(&clickhouse.InsertEvent{Table: "db1.events", Replica: "10.0.0.7:9440", Rows: 10, Bytes: 800, Attempt: 2,
			Start: start, End: start.Add(time.Millisecond), Err: tc.err}, first)
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%v: %d spans", tc.err, len(spans))
		}
		s := spans[0]
		a := attrsOf(s)
		if s.Name != "INSERT events" || s.Parent.SpanID() != consume.SpanID() || s.SpanContext.TraceID() != consume.TraceID() ||
			a["db.namespace"] != "db1" || a["db.collection.name"] != "events" || a["server.address"] != "10.0.0.7" || a["server.port"] != "9440" ||
			a["sluice.insert.attempt"] != "2" || a["sluice.rows"] != "10" || a["sluice.clickhouse.shard"] != "default" || !s.EndTime.Equal(start.Add(time.Millisecond)) {
			t.Errorf("%v: span %q parent %s, attributes %v", tc.err, s.Name, s.Parent.SpanID(), a)
		}
		failed := s.Status.Code == codes.Error
		if failed != (tc.err != nil) || a["error.type"] != tc.errorType || a["db.response.status_code"] != tc.dbCode {
			t.Errorf("%v: status %v, error.type %q, db.response.status_code %q; want %q %q", tc.err, s.Status, a["error.type"], a["db.response.status_code"], tc.errorType, tc.dbCode)
		}
	}
}
