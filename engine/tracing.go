package engine

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

const tracerName = "github.com/sluicehq/sluice/engine"

// Option configures a Pipeline beyond its Config.
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
}

// WithTracerProvider sets the provider of the pipeline's spans. Default:
// the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// Span attributes. Kafka attributes follow the OpenTelemetry messaging
// semantic conventions; sluice's own are under sluice.*.
var (
	attrMessagingSystem = attribute.Key("messaging.system")
	attrDestination     = attribute.Key("messaging.destination.name")
	attrPartition       = attribute.Key("messaging.destination.partition.id")
	attrOperation       = attribute.Key("messaging.operation.type")
	attrBatchCount      = attribute.Key("messaging.batch.message_count")
	attrConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	attrFirstOffset     = attribute.Key("sluice.kafka.offset.first")
	attrLastOffset      = attribute.Key("sluice.kafka.offset.last")
	attrModule          = attribute.Key("sluice.module.name")
	attrModuleSHA       = attribute.Key("sluice.module.sha256")
	attrTenant          = attribute.Key("sluice.tenant")
	attrPipeline        = attribute.Key("sluice.pipeline")
	attrRecordsIn       = attribute.Key("sluice.records.in")
	attrRowsOut         = attribute.Key("sluice.rows.out")
	attrErrored         = attribute.Key("sluice.records.errored")
	attrTable           = attribute.Key("db.collection.name")
	attrRows            = attribute.Key("sluice.rows")
	attrBytes           = attribute.Key("sluice.bytes")

	attrDBSystem    = attribute.Key("db.system.name")
	attrDBNamespace = attribute.Key("db.namespace")
	attrDBOperation = attribute.Key("db.operation.name")
	attrDBShard     = attribute.Key("db.clickhouse.shard")
	attrDBReplica   = attribute.Key("db.clickhouse.replica")
	attrDBRows      = attribute.Key("db.clickhouse.rows")
	attrDBBytes     = attribute.Key("db.clickhouse.bytes")
	attrDBAttempt   = attribute.Key("db.clickhouse.attempt")
	attrServerAddr  = attribute.Key("server.address")
)

// maxProducerLinks bounds the links from a consume span to the producer
// contexts found in its records' traceparent headers.
const maxProducerLinks = 16

// maxFlushLinks bounds a flush span's links to the consume spans whose
// rows its insert carries. The SDK keeps at most OTEL_SPAN_LINK_COUNT_LIMIT
// links per span (its default is 128); telemetry.Setup raises that default
// to this bound.
const maxFlushLinks = telemetry.FlushLinkLimit

// maxSealLinks bounds a seal span's links to the batches in its chunk.
const maxSealLinks = 32

// headerCarrier reads a record's headers as a propagation carrier.
type headerCarrier []kgo.RecordHeader

func (h headerCarrier) Get(key string) string {
	for _, kv := range h {
		if kv.Key == key {
			return string(kv.Value)
		}
	}
	return ""
}
func (h headerCarrier) Set(string, string) {}
func (h headerCarrier) Keys() []string {
	keys := make([]string, len(h))
	for i, kv := range h {
		keys[i] = kv.Key
	}
	return keys
}

var traceContext = propagation.TraceContext{}

// startConsume starts the consume span of one polled partition batch, linked
// to the producers' trace contexts.
func (p *Pipeline) startConsume(fp kgo.FetchTopicPartition) (context.Context, trace.Span) {
	recs := fp.Records
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attrMessagingSystem.String("kafka"),
			attrOperation.String("process"),
			attrDestination.String(fp.Topic),
			attrPartition.Int(int(fp.Partition)),
			attrConsumerGroup.String(p.cfg.Kafka.Group),
			attrBatchCount.Int(len(recs)),
			attrFirstOffset.Int64(recs[0].Offset),
			attrLastOffset.Int64(recs[len(recs)-1].Offset),
		),
	}
	ctx, span := p.tracer.Start(context.Background(), "consume", opts...)
	if !span.IsRecording() {
		return ctx, span
	}
	links := 0
	for _, r := range recs {
		if len(r.Headers) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), headerCarrier(r.Headers)))
		if sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
			if links++; links == maxProducerLinks {
				break
			}
		}
	}
	return ctx, span
}

// traceSeal records a seal span for a chunk, linked to the batches whose
// rows it carries.
func (p *Pipeline) traceSeal(c *clickhouse.Chunk) {
	_, span := p.tracer.Start(context.Background(), "seal", trace.WithAttributes(
		attrTable.String(c.Block.Table().FullName()),
		attrRows.Int(c.Block.Rows()),
		attrBytes.Int(c.Block.Size()),
	))
	// Links are added after the start, as in startConsume, so that an
	// unsampled chunk does not walk its acks.
	if span.IsRecording() {
		links := 0
		for _, a := range c.Acks {
			if b, ok := a.(*batchAck); ok && b.span.IsValid() {
				span.AddLink(trace.Link{SpanContext: b.span})
				if links++; links == maxSealLinks {
					break
				}
			}
		}
	}
	span.End()
}

// observeInsert is the sink's OnInsert function: a flush span per insert
// attempt, linked to the consume spans of the batches whose rows the insert
// carries, and the insert latency histogram.
func (p *Pipeline) observeInsert(e *clickhouse.InsertEvent) {
	outcome := "ok"
	if e.Err != nil {
		outcome = "error"
	}
	p.metrics.insertSeconds.WithLabelValues(e.Table, outcome).Observe(e.End.Sub(e.Start).Seconds())
	db, _, _ := strings.Cut(e.Table, ".")
	shard := e.Shard
	if shard == "" {
		shard = "default"
	}
	_, span := p.tracer.Start(context.Background(), "flush",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(e.Start),
		trace.WithAttributes(
			attrDBSystem.String("clickhouse"),
			attrDBNamespace.String(db),
			attrTable.String(e.Table),
			attrDBOperation.String("INSERT"),
			attrDBShard.String(shard),
			attrDBReplica.String(e.Replica),
			attrServerAddr.String(e.Replica),
			attrDBRows.Int(e.Rows),
			attrDBBytes.Int(e.Bytes),
			attrDBAttempt.Int(e.Attempt),
		))
	if span.IsRecording() {
		seen := map[*batchAck]bool{}
		e.Acks(func(a clickhouse.Ack) bool {
			b, ok := a.(*batchAck)
			if !ok || seen[b] || !b.span.IsValid() {
				return true
			}
			seen[b] = true
			span.AddLink(trace.Link{SpanContext: b.span})
			return len(seen) < maxFlushLinks
		})
	}
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, "insert failed")
	}
	span.End(trace.WithTimestamp(e.End))
}

// moduleAttrs are the transform span's attributes naming the module
// version, and with tenants the tenant and pipeline.
func (w *partitionWorker) moduleAttrs() []attribute.KeyValue {
	m := w.mv.module
	attrs := []attribute.KeyValue{attrModule.String(m.Name), attrModuleSHA.String(m.SHA256)}
	if w.route.tenant != "" {
		attrs = append(attrs, attrTenant.String(w.route.tenant), attrPipeline.String(w.route.pipeline))
	}
	return attrs
}
