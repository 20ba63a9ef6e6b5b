package main

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func kv(k string, v any) *commonpb.KeyValue {
	switch v := v.(type) {
	case string:
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	case int:
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(v)}}}
	}
	panic(v)
}

// TestTraceCommand finds a record's spans in a two-document OTLP/JSON file
// shaped as sluice exports them: its consume span, the transform and seal
// children, and the INSERT span of another trace that links to the consume
// span, but not an INSERT that carried other batches.
func TestTraceCommand(t *testing.T) {
	id := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	consume := &tracepb.Span{TraceId: id(1, 16), SpanId: id(1, 8), Name: "process logs", Kind: tracepb.Span_SPAN_KIND_CONSUMER,
		StartTimeUnixNano: 1e18, EndTimeUnixNano: 1e18 + 5e6,
		Attributes: []*commonpb.KeyValue{kv("messaging.destination.name", "logs"), kv("messaging.destination.partition.id", "1"),
			kv("sluice.kafka.offset.first", 100), kv("sluice.kafka.offset.last", 119), kv("messaging.batch.message_count", 20)}}
	other := &tracepb.Span{TraceId: id(2, 16), SpanId: id(2, 8), Name: "process logs", Kind: tracepb.Span_SPAN_KIND_CONSUMER,
		Attributes: []*commonpb.KeyValue{kv("messaging.destination.name", "logs"), kv("messaging.destination.partition.id", "0"),
			kv("sluice.kafka.offset.first", 100), kv("sluice.kafka.offset.last", 119)}}
	transform := &tracepb.Span{TraceId: id(1, 16), SpanId: id(3, 8), ParentSpanId: id(1, 8), Name: "transform",
		Attributes: []*commonpb.KeyValue{kv("sluice.rows.out", 20), kv("sluice.records.in", 20)}}
	linkTo := func(c *tracepb.Span, rows int) []*tracepb.Span_Link {
		return []*tracepb.Span_Link{{TraceId: c.TraceId, SpanId: c.SpanId, Attributes: []*commonpb.KeyValue{kv("sluice.rows", rows)}}}
	}
	seal := &tracepb.Span{TraceId: id(1, 16), SpanId: id(4, 8), ParentSpanId: id(1, 8), Name: "seal", Links: linkTo(consume, 20),
		Attributes: []*commonpb.KeyValue{kv("sluice.rows", 300)}}
	insert := &tracepb.Span{TraceId: id(5, 16), SpanId: id(5, 8), ParentSpanId: id(6, 8), Name: "INSERT logs", Kind: tracepb.Span_SPAN_KIND_CLIENT,
		Links: append(linkTo(other, 7), linkTo(consume, 20)...), Attributes: []*commonpb.KeyValue{kv("db.namespace", "default"),
			kv("db.collection.name", "logs"), kv("server.address", "127.0.0.1"), kv("server.port", 9000), kv("sluice.rows", 900)}}
	unrelated := &tracepb.Span{TraceId: id(7, 16), SpanId: id(7, 8), Name: "INSERT logs", Kind: tracepb.Span_SPAN_KIND_CLIENT, Links: linkTo(other, 7)}

	var file bytes.Buffer
	for _, spans := range [][]*tracepb.Span{{consume, other, transform}, {seal, insert, unrelated}} {
		doc, err := protojson.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}})
		if err != nil {
			t.Fatal(err)
		}
		file.Write(doc)
		file.WriteByte('\n')
	}
	path := filepath.Join(t.TempDir(), "traces.json")
	if err := os.WriteFile(path, file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"trace", "-spans", path, "-topic", "logs", "-partition", "1", "-offset", "105"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"process logs  trace " + hex.EncodeToString(consume.TraceId) + " span " + hex.EncodeToString(consume.SpanId),
		"offsets 100-119 (20 records)",
		"transform  span " + hex.EncodeToString(transform.SpanId),
		"seal  trace " + hex.EncodeToString(seal.TraceId) + " span " + hex.EncodeToString(seal.SpanId),
		"300 rows, 20 of this batch",
		"INSERT INTO default.logs  trace " + hex.EncodeToString(insert.TraceId) + " span " + hex.EncodeToString(insert.SpanId),
		"server 127.0.0.1:9000",
		"900 rows, 20 of this batch  ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, hex.EncodeToString(unrelated.SpanId)) || strings.Contains(out, hex.EncodeToString(other.SpanId)) {
		t.Errorf("output names spans of other batches:\n%s", out)
	}

	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"-spans", path, "-topic", "logs", "-partition", "1", "-offset", "120"}, 1},
		{[]string{"-spans", path, "-topic", "other", "-partition", "1", "-offset", "105"}, 1},
		{[]string{"-spans", path, "-topic", "logs", "-offset", "105"}, 2},
		{[]string{"-spans", filepath.Join(t.TempDir(), "none.json"), "-topic", "logs", "-partition", "1", "-offset", "105"}, 1},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := run(append([]string{"trace"}, tc.args...), &stdout, &stderr); code != tc.code || stderr.Len() == 0 {
			t.Errorf("trace %v: exit %d (stderr %q), want %d with a message", tc.args, code, stderr.String(), tc.code)
		}
	}
}
