package engine

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

const tracerName = "github.com/sluicehq/sluice/engine"

// Option configures a Pipeline beyond its Config.
type Option func(*options)

type options struct {
	tracerProvider trace.TracerProvider
	journal        *wasmhost.CallJournal
}

// WithTracerProvider sets the provider of the pipeline's spans. Default:
// the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracerProvider = tp }
}

// Span attributes. Kafka and ClickHouse attributes follow the OpenTelemetry
// messaging and database semantic conventions; sluice's own are under
// sluice.*.
var (
	attrMessagingSystem  = attribute.Key("messaging.system")
	attrDestination      = attribute.Key("messaging.destination.name")
	attrPartition        = attribute.Key("messaging.destination.partition.id")
	attrOperationType    = attribute.Key("messaging.operation.type")
	attrOperationName    = attribute.Key("messaging.operation.name")
	attrBatchCount       = attribute.Key("messaging.batch.message_count")
	attrConsumerGroup    = attribute.Key("messaging.consumer.group.name")
	attrKafkaOffset      = attribute.Key("messaging.kafka.offset")
	attrFirstOffset      = attribute.Key("sluice.kafka.offset.first")
	attrLastOffset       = attribute.Key("sluice.kafka.offset.last")
	attrProducerDropped  = attribute.Key("sluice.producer.links.dropped")
	attrProducerTraceIDs = attribute.Key("sluice.producer.trace_ids")
	attrModule           = attribute.Key("sluice.module.name")
	attrModuleSHA        = attribute.Key("sluice.module.sha256")
	attrTenant           = attribute.Key("sluice.tenant")
	attrPipeline         = attribute.Key("sluice.pipeline")
	attrRecordsIn        = attribute.Key("sluice.records.in")
	attrRowsOut          = attribute.Key("sluice.rows.out")
	attrErrored          = attribute.Key("sluice.records.errored")
	attrRows             = attribute.Key("sluice.rows")
	attrChunkRows        = attribute.Key("sluice.chunk.rows")
	attrBytes            = attribute.Key("sluice.bytes")
	attrBatches          = attribute.Key("sluice.batches")
	attrSampledBatches   = attribute.Key("sluice.batches.sampled")
	attrLinksDropped     = attribute.Key("sluice.links.dropped")
	attrShard            = attribute.Key("sluice.clickhouse.shard")
	attrAttempt          = attribute.Key("sluice.insert.attempt")

	attrDBSystem     = attribute.Key("db.system.name")
	attrDBNamespace  = attribute.Key("db.namespace")
	attrDBCollection = attribute.Key("db.collection.name")
	attrDBOperation  = attribute.Key("db.operation.name")
	attrDBStatus     = attribute.Key("db.response.status_code")
	attrErrorType    = attribute.Key("error.type")
	attrServerAddr   = attribute.Key("server.address")
	attrServerPort   = attribute.Key("server.port")
)

// consumeOperation is the consume span's messaging operation, and with the
// topic its name.
const consumeOperation = "process"

// maxLinks bounds the links of one span: a consume span's to the sampled
// producer contexts of its records, a seal or flush span's to the sampled
// consume spans whose rows it carries. The SDK keeps at most
// OTEL_SPAN_LINK_COUNT_LIMIT links per span (its default is 128);
// telemetry.Setup raises that default to this bound.
const maxLinks = telemetry.FlushLinkLimit

var traceContext = propagation.TraceContext{}

// producerContext parses a record's W3C traceparent header without
// allocating, so that finding the sampled producers of an unsampled batch
// costs nothing per record. It accepts what propagation.TraceContext does.
func producerContext(headers []kgo.RecordHeader) (trace.SpanContext, bool) {
	var v []byte
	for _, h := range headers {
		if h.Key == "traceparent" {
			v = h.Value
			break
		}
	}
	// version-traceid-spanid-flags: 2+1+32+1+16+1+2 bytes, more only
	// after a further '-' in a later version.
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' || (len(v) > 55 && (v[55] != '-' || string(v[:2]) == "00")) {
		return trace.SpanContext{}, false
	}
	var ver [1]byte
	var cfg trace.SpanContextConfig
	var flags [1]byte
	if !lowerHex(ver[:], v[0:2]) || ver[0] == 0xff || !lowerHex(cfg.TraceID[:], v[3:35]) ||
		!lowerHex(cfg.SpanID[:], v[36:52]) || !lowerHex(flags[:], v[53:55]) {
		return trace.SpanContext{}, false
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & trace.FlagsSampled
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	return sc, sc.IsValid()
}

// lowerHex decodes lowercase hex src into dst, len(src) == 2*len(dst).
func lowerHex(dst, src []byte) bool {
	nibble := func(c byte) (byte, bool) {
		switch {
		case '0' <= c && c <= '9':
			return c - '0', true
		case 'a' <= c && c <= 'f':
			return c - 'a' + 10, true
		}
		return 0, false
	}
	for i := range dst {
		hi, ok1 := nibble(src[2*i])
		lo, ok2 := nibble(src[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// startConsume starts the consume span of one polled partition batch. A
// batch with a record whose producer span was sampled is a child of the
// first such producer span, so parent-based samplers sample it; other
// batches are roots. The span links to every sampled producer context, up
// to maxLinks; the trace ids of the rest go into an event.
func (p *Pipeline) startConsume(fp kgo.FetchTopicPartition) (context.Context, trace.Span) {
	recs := fp.Records
	parent := context.Background()
	for _, r := range recs {
		if len(r.Headers) == 0 {
			continue
		}
		if sc, ok := producerContext(r.Headers); ok && sc.IsSampled() {
			// The propagator, for the producer's tracestate. Extract only
			// reads: kotel's carrier writes the record only in Set. Its Get
			// takes a header's first value, as producerContext does.
			parent = traceContext.Extract(parent, kotel.NewRecordCarrier(r))
			break
		}
	}
	ctx, span := p.tracer.Start(parent, consumeOperation, trace.WithSpanKind(trace.SpanKindConsumer))
	if !span.IsRecording() {
		return ctx, span
	}
	// Named and attributed only once it records, so that an unsampled
	// batch builds none of it.
	span.SetName(consumeOperation + " " + fp.Topic)
	span.SetAttributes(
		attrMessagingSystem.String("kafka"),
		attrOperationType.String(consumeOperation),
		attrOperationName.String(consumeOperation),
		attrDestination.String(fp.Topic),
		attrPartition.String(strconv.Itoa(int(fp.Partition))),
		attrConsumerGroup.String(p.cfg.Kafka.Group),
		attrBatchCount.Int(len(recs)),
		attrFirstOffset.Int64(recs[0].Offset),
		attrLastOffset.Int64(recs[len(recs)-1].Offset),
	)
	linkProducers(span, recs)
	return ctx, span
}

// linkProducers links span to the sampled producer context of each record,
// with the record's offset, up to maxLinks. The trace ids of sampled
// producers past that go into a sluice.producer.unlinked event, and their
// number into sluice.producer.links.dropped, so that every sampled
// producer's record stays findable from its trace id.
func linkProducers(span trace.Span, recs []*kgo.Record) {
	linked, dropped := 0, 0
	var unlinked map[trace.TraceID]bool
	for _, r := range recs {
		sc, ok := producerContext(r.Headers)
		if !ok || !sc.IsSampled() {
			continue
		}
		if linked < maxLinks {
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attrKafkaOffset.Int64(r.Offset)}})
			linked++
			continue
		}
		if unlinked == nil {
			unlinked = map[trace.TraceID]bool{}
		}
		unlinked[sc.TraceID()] = true
		dropped++
	}
	if dropped == 0 {
		return
	}
	ids := make([]string, 0, len(unlinked))
	for id := range unlinked {
		ids = append(ids, id.String())
	}
	slices.Sort(ids)
	span.SetAttributes(attrProducerDropped.Int(dropped))
	span.AddEvent("sluice.producer.unlinked", trace.WithAttributes(attrProducerTraceIDs.StringSlice(ids)))
}

// sampledHold stands in a chunk's acks for a batch whose consume span was
// sampled, with the batch's rows in the chunk, so that the chunk's seal span
// and its inserts' flush spans are recorded and link to that batch. An
// unsampled batch is held as its *batchAck, so tracing costs it nothing.
type sampledHold struct {
	*batchAck
	start int // the block row of the batch's first row
	// rows is the batch's rows in the chunk: -1 while the batch is the
	// last in its open block, set when the next batch's rows start or the
	// block is sealed.
	rows int
	// exact: the chunk is one part, so an insert of it carries all rows.
	exact bool
}

// holdFor is what the worker adds to the acks of table's open block when
// ack's first row goes into it: ack itself, or for a sampled batch its
// sampledHold. It also ends the previous batch's row range.
func (w *partitionWorker) holdFor(table int, ack *batchAck) clickhouse.Ack {
	// marks[table] is the block's row count before the record being
	// appended, the first of ack's records with rows for table.
	at := w.marks[table]
	if hs := w.holders[table]; len(hs) > 0 {
		if h, ok := hs[len(hs)-1].(*sampledHold); ok && h.rows < 0 {
			h.rows = at - h.start
		}
	}
	if !ack.span.IsSampled() {
		return ack
	}
	return &sampledHold{batchAck: ack, start: at, rows: -1}
}

// traceSeal records a seal span for a chunk holding rows of a sampled batch:
// a child of the first such batch's consume span, linked to all of them with
// their rows. A chunk of unsampled batches gets no span.
func (p *Pipeline) traceSeal(c *clickhouse.Chunk) {
	var first *sampledHold
	for _, a := range c.Acks() {
		h, ok := a.(*sampledHold)
		if !ok {
			continue
		}
		if h.rows < 0 {
			h.rows = c.Block().Rows() - h.start
		}
		h.exact = c.Block().Table().Shards() == 1
		if first == nil {
			first = h
		}
	}
	if first == nil {
		return
	}
	t := c.Block().Table()
	_, span := p.tracer.Start(trace.ContextWithSpanContext(context.Background(), first.span), "seal")
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		attrDBNamespace.String(t.Database),
		attrDBCollection.String(t.Name),
		attrRows.Int(c.Block().Rows()),
		attrBytes.Int(c.Block().Size()),
		attrBatches.Int(len(c.Acks())),
	)
	sampled, dropped := 0, 0
	for _, a := range c.Acks() {
		if h, ok := a.(*sampledHold); ok {
			if sampled++; sampled > maxLinks {
				dropped++
				continue
			}
			span.AddLink(trace.Link{SpanContext: h.span, Attributes: []attribute.KeyValue{attrRows.Int(h.rows)}})
		}
	}
	span.SetAttributes(attrSampledBatches.Int(sampled))
	if dropped > 0 {
		span.SetAttributes(attrLinksDropped.Int(dropped))
	}
}

// observeInsert is the sink's OnInsert function: the insert latency
// histogram, and a flush span for an insert attempt that carries rows of a
// sampled batch. An insert of unsampled batches only looks at its acks.
func (p *Pipeline) observeInsert(e *clickhouse.InsertEvent) {
	outcome := "ok"
	if e.Err != nil {
		outcome = "error"
	}
	p.metrics.insertSeconds.WithLabelValues(e.Table, outcome).Observe(e.End.Sub(e.Start).Seconds())
	var first *sampledHold
	e.Acks(func(a clickhouse.Ack) bool {
		first, _ = a.(*sampledHold)
		return first == nil
	})
	if first != nil {
		p.traceFlush(e, first)
	}
}

// traceFlush records the flush span of an insert attempt: a child of the
// consume span of first, the first sampled batch it carries, linked to the
// consume spans of all sampled batches it carries with their rows.
func (p *Pipeline) traceFlush(e *clickhouse.InsertEvent, first *sampledHold) {
	db, table, _ := strings.Cut(e.Table, ".")
	_, span := p.tracer.Start(trace.ContextWithSpanContext(context.Background(), first.span), "INSERT "+table,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(e.Start))
	defer span.End(trace.WithTimestamp(e.End))
	if !span.IsRecording() {
		return
	}
	shard := e.Shard
	if shard == "" {
		shard = "default"
	}
	host, port := e.Replica, 0
	if h, ps, err := net.SplitHostPort(e.Replica); err == nil {
		host = h
		port, _ = strconv.Atoi(ps)
	}
	span.SetAttributes(
		attrDBSystem.String("clickhouse"),
		attrDBNamespace.String(db),
		attrDBCollection.String(table),
		attrDBOperation.String("INSERT"),
		attrServerAddr.String(host),
		attrShard.String(shard),
		attrRows.Int(e.Rows),
		attrBytes.Int(e.Bytes),
		attrAttempt.Int(e.Attempt),
	)
	if port > 0 {
		span.SetAttributes(attrServerPort.Int(port))
	}
	// A batch is in an insert once per chunk of its rows the insert
	// carries; its link sums them.
	type batchRows struct {
		b     *batchAck
		rows  int
		exact bool
	}
	var batches []batchRows
	index := map[*batchAck]int{}
	e.Acks(func(a clickhouse.Ack) bool {
		h, ok := a.(*sampledHold)
		if !ok {
			return true
		}
		if i, ok := index[h.batchAck]; ok {
			batches[i].rows += h.rows
			batches[i].exact = batches[i].exact && h.exact
			return true
		}
		index[h.batchAck] = len(batches)
		batches = append(batches, batchRows{h.batchAck, h.rows, h.exact})
		return true
	})
	for i, b := range batches {
		if i == maxLinks {
			span.SetAttributes(attrLinksDropped.Int(len(batches) - maxLinks))
			break
		}
		// With routing shards a chunk's rows are split over the shards'
		// inserts: the link then says the batch's rows in the chunk.
		rows := attrRows.Int(b.rows)
		if !b.exact {
			rows = attrChunkRows.Int(b.rows)
		}
		span.AddLink(trace.Link{SpanContext: b.b.span, Attributes: []attribute.KeyValue{rows}})
	}
	span.SetAttributes(attrSampledBatches.Int(len(batches)))
	if e.Err != nil {
		errType := "_OTHER"
		if code := e.ErrorCode(); code != 0 {
			errType = strconv.Itoa(code)
			span.SetAttributes(attrDBStatus.String(errType))
		}
		span.SetAttributes(attrErrorType.String(errType))
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, "insert failed")
	}
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
