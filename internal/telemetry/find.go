package telemetry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// ReadSpans reads OTLP/JSON trace data: one or more ExportTraceServiceRequest
// (or TracesData) documents, as the OpenTelemetry Collector's file exporter
// writes them, one per line.
func ReadSpans(r io.Reader) ([]*tracepb.Span, error) {
	dec := json.NewDecoder(r)
	var spans []*tracepb.Span
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return spans, nil
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &req); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
}

// RecordTrace is what exported spans say about one Kafka record: the
// consume span of the batch that held it and the spans that carried its
// rows.
type RecordTrace struct {
	Consume    *tracepb.Span
	Transforms []*tracepb.Span
	// Seals and Inserts are the seal and INSERT spans that are children of
	// the consume span or link to it, in start order.
	Seals, Inserts []CarrierSpan
}

// CarrierSpan is a seal or INSERT span with the rows of the batch it
// carried, from its link's sluice.rows. Exact is false when the link says
// sluice.chunk.rows (routing shards: the batch's rows in the chunk, split
// over the shards' inserts) or has no row count.
type CarrierSpan struct {
	Span  *tracepb.Span
	Rows  int64
	Exact bool
}

// FindRecord returns the trace of every exported consume span whose batch
// holds topic/partition/offset (more than one when the record was consumed
// again after a rebalance or restart), in start order. None means the
// record's batch was not sampled, or its spans are not among spans.
func FindRecord(spans []*tracepb.Span, topic string, partition int32, offset int64) []RecordTrace {
	var out []RecordTrace
	pid := strconv.Itoa(int(partition))
	for _, s := range spans {
		if s.Name != "process "+topic {
			continue
		}
		a := attrMap(s.Attributes)
		if a["messaging.destination.name"].GetStringValue() != topic || a["messaging.destination.partition.id"].GetStringValue() != pid ||
			a["sluice.kafka.offset.first"].GetIntValue() > offset || a["sluice.kafka.offset.last"].GetIntValue() < offset {
			continue
		}
		out = append(out, RecordTrace{Consume: s})
	}
	for i := range out {
		rt := &out[i]
		c := rt.Consume
		for _, s := range spans {
			child := bytes.Equal(s.TraceId, c.TraceId) && bytes.Equal(s.ParentSpanId, c.SpanId)
			switch {
			case s.Name == "transform" && child:
				rt.Transforms = append(rt.Transforms, s)
			case s.Name == "seal" || strings.HasPrefix(s.Name, "INSERT ") && s.Kind == tracepb.Span_SPAN_KIND_CLIENT:
				cs, ok := carried(s, c)
				if !ok && !child {
					continue
				}
				if s.Name == "seal" {
					rt.Seals = append(rt.Seals, cs)
				} else {
					rt.Inserts = append(rt.Inserts, cs)
				}
			}
		}
		byStart := func(a, b CarrierSpan) int { return cmp.Compare(a.Span.StartTimeUnixNano, b.Span.StartTimeUnixNano) }
		slices.SortFunc(rt.Seals, byStart)
		slices.SortFunc(rt.Inserts, byStart)
		slices.SortFunc(rt.Transforms, func(a, b *tracepb.Span) int { return cmp.Compare(a.StartTimeUnixNano, b.StartTimeUnixNano) })
	}
	slices.SortFunc(out, func(a, b RecordTrace) int {
		return cmp.Compare(a.Consume.StartTimeUnixNano, b.Consume.StartTimeUnixNano)
	})
	return out
}

// carried finds s's link to the consume span c and the rows it says.
func carried(s, c *tracepb.Span) (CarrierSpan, bool) {
	for _, l := range s.Links {
		if !bytes.Equal(l.TraceId, c.TraceId) || !bytes.Equal(l.SpanId, c.SpanId) {
			continue
		}
		a := attrMap(l.Attributes)
		if v, ok := a["sluice.rows"]; ok {
			return CarrierSpan{Span: s, Rows: v.GetIntValue(), Exact: true}, true
		}
		return CarrierSpan{Span: s, Rows: a["sluice.chunk.rows"].GetIntValue()}, true
	}
	return CarrierSpan{Span: s}, false
}

func attrMap(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// Attr returns a span attribute as text, "" when absent.
func Attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			return strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		}
	}
	return ""
}
