package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// polledBatch is one poll's records of a partition with its ack.
type polledBatch struct {
	recs []*kgo.Record
	ack  *batchAck
	ctx  context.Context // carries the consume span
	span trace.Span
}

// partitionWorker runs one partition's records through its own module
// instance and fills that partition's open blocks, one per target table.
// The poll loop hands it batches without ever waiting: the queue is bounded
// by the in-flight byte budget, not by its length.
type partitionWorker struct {
	p     *Pipeline
	tp    topicPartition
	acks  *partitionAcks
	route *route
	// mv is the module version the worker's instance runs, and schema the
	// tables it writes; the worker changes to the route's current ones
	// between batches.
	mv     *moduleVersion
	schema *routeSchema

	// ctx ends the worker's work at once (the drain or revoke gave up on
	// it, or the pipeline failed); what it holds stays uncommitted.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	queue    []polledBatch
	wake     chan struct{} // a batch was queued
	quit     chan struct{} // closed to stop the worker
	quitOnce sync.Once
	stopped  chan struct{} // closed when run returns

	inst     *wasmhost.Instance
	batch    wasmhost.Batch
	headers  []wasmhost.Header // slab for batch.Records[i].Headers
	blocks   []*clickhouse.Block
	holders  [][]clickhouse.Ack // acks of the batches with rows in blocks[i]
	lastHeld []*batchAck
	marks    []int
	openedAt time.Time // when the first row went into an open block

	// crash counts the module's recent failures and failed calls, for the
	// crash-loop check.
	crash crashLoop
	// slotWait observes the waits for a call slot of the route's tenant.
	slotWait prometheus.Observer
	// peakOpen is the most output the worker's open blocks have held
	// after a module call: at most chunk_bytes plus one call's output.
	peakOpen int
	// instCalls counts the calls the current instance has served: a record
	// is dead-lettered only when it fails alone on a fresh instance.
	instCalls int

	spanCtx context.Context // the consume span of the batch in hand

	// Exactly-once delivery (eo): the open blocks hold the rows of one
	// segment, from segStart (-1: none open) up to lastOff. segReplay is
	// set when that segment is replay[0], recorded before this worker
	// owned the partition; replay is what is left to rebuild of them.
	eo        bool
	segStart  int64
	lastOff   int64
	segReplay bool
	replay    []segment
}

func newPartitionWorker(p *Pipeline, tp topicPartition, acks *partitionAcks) *partitionWorker {
	r := p.byTopic[tp.topic]
	sch := r.schema.Load()
	n := len(sch.tables)
	w := &partitionWorker{
		p: p, tp: tp, acks: acks, route: r, schema: sch,
		wake:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		blocks:   make([]*clickhouse.Block, n),
		holders:  make([][]clickhouse.Ack, n),
		lastHeld: make([]*batchAck, n),
		marks:    make([]int, n),
	}
	w.segStart = -1
	if acks.eo != nil {
		w.eo, w.replay = true, acks.eo.replay
	}
	w.ctx, w.cancel = context.WithCancel(p.workCtx)
	w.slotWait = p.metrics.slotWait.WithLabelValues(r.tenant)
	w.batch.Topic, w.batch.Partition = tp.topic, tp.partition
	for i, t := range sch.tables {
		w.blocks[i] = p.sink.NewBlock(t)
	}
	return w
}

// submit queues a batch; it never blocks.
func (w *partitionWorker) submit(b polledBatch) {
	w.mu.Lock()
	w.queue = append(w.queue, b)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest batch handed to the worker. The queue keeps no
// reference to it, so that its records are garbage once it is processed
// (see transform), while later batches still wait.
func (w *partitionWorker) next() (polledBatch, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return polledBatch{}, false
	}
	b := w.queue[0]
	w.queue[0] = polledBatch{}
	w.queue = w.queue[1:]
	if len(w.queue) == 0 {
		w.queue = nil
	}
	return b, true
}

// processQueued processes the batches handed to the worker, in order,
// until none is left.
func (w *partitionWorker) processQueued(ctx context.Context) error {
	for {
		b, ok := w.next()
		if !ok {
			return nil
		}
		if err := w.process(ctx, b); err != nil {
			return err
		}
	}
}

// errWorkerStopped ends a worker that was told to stop while it could not
// finish a batch (paused for a failing module): the batch stays
// uncommitted, and nothing failed.
var errWorkerStopped = errors.New("partition worker stopped")

// stop tells the worker to finish the batches already handed to it, send
// its last chunks and return. It does not wait: see stopped.
func (w *partitionWorker) stop() {
	w.quitOnce.Do(func() { close(w.quit) })
}

// run is the worker's goroutine. It stops when told to, after sending what
// it holds, or when its context ends. A worker that is stopped or cancelled
// never fails the pipeline: what it did not finish stays uncommitted.
func (w *partitionWorker) run() {
	defer close(w.stopped)
	defer w.cancel()
	ctx := w.ctx
	defer func() {
		if w.inst != nil {
			_ = w.inst.Close(context.Background())
		}
	}()
	linger := w.p.sink.Config().ChunkLinger
	if w.eo {
		linger = segmentLinger(w.p.sink.Config())
	}
	tick := time.NewTicker(linger / 2)
	defer tick.Stop()
	for {
		if err := w.processQueued(ctx); err != nil {
			w.exit(ctx, err)
			return
		}
		select {
		case <-w.wake:
		case <-tick.C:
			if !w.openedAt.IsZero() && time.Since(w.openedAt) >= linger && !w.segReplay {
				if err := w.sealAll(ctx); err != nil {
					w.exit(ctx, err)
					return
				}
			}
		case <-w.quit:
			if err := w.processQueued(ctx); err != nil {
				w.exit(ctx, err)
				return
			}
			if err := w.sealAll(ctx); err != nil {
				w.exit(ctx, err)
			}
			w.dropUnfinishedReplay()
			return
		case <-ctx.Done():
			return
		}
	}
}

// exit ends the worker after err: a stop or cancellation is not a failure
// of the pipeline; anything else is.
func (w *partitionWorker) exit(ctx context.Context, err error) {
	if errors.Is(err, errFenced) {
		// The coordinator gave the partition to another member; the group
		// session will tell this member so and take the partition away.
		w.p.log.Warn("exactly-once: partition worker fenced; what it held stays uncommitted for the partition's new owner",
			"partition", w.tp.String(), "reason", err)
		return
	}
	if errors.Is(err, errWorkerStopped) || ctx.Err() != nil {
		w.p.log.Debug("partition worker stopped with work unfinished; it stays uncommitted",
			"partition", w.tp.String(), "reason", err)
		return
	}
	w.p.fail(err)
}

// process transforms one polled batch and appends its rows. Records the
// module fails on go to the dead-letter topic; a failing instance is replaced
// and the batch bisected until the records that fail on their own are found.
//
// The batch's ack is released only when every record is accounted for; a
// batch that ends in an error keeps it, so its offsets are never committed.
// Blocks that reach the chunk size are sealed after every module call, so
// what one poll's output holds is bounded by chunk_bytes plus one call's
// output, however many records the poll brought.
func (w *partitionWorker) process(ctx context.Context, b polledBatch) error {
	defer b.span.End()
	w.spanCtx = b.ctx
	if err := w.pickVersion(ctx); err != nil {
		return err
	}
	if err := w.pickSchema(ctx); err != nil {
		return err
	}
	w.p.stats.recordsIn.Add(int64(len(b.recs)))
	w.mv.recordsIn.Add(int64(len(b.recs)))
	maxRecs, maxBytes := w.p.cfg.Module.MaxBatchRecords, int64(w.p.cfg.Module.MaxBatchBytes)
	for recs := b.recs; len(recs) > 0; {
		limit := int64(math.MaxInt64)
		if w.eo {
			var err error
			if limit, err = w.segmentBoundary(ctx, recs[0].Offset); err != nil {
				return err
			}
		}
		n, bytes := 0, int64(0)
		for n < len(recs) && n < maxRecs && recs[n].Offset < limit {
			rb := recordBytes(recs[n])
			if n > 0 && bytes+rb > maxBytes {
				break
			}
			bytes += rb
			n++
		}
		if n == 0 && w.eo {
			// segmentBoundary always leaves the first record below limit.
			return fmt.Errorf("partition %s: no record of offset %d fits below segment boundary %d", w.tp, recs[0].Offset, limit)
		}
		if err := w.transform(ctx, recs[:n], b.ack); err != nil {
			return err
		}
		if w.eo {
			w.lastOff = recs[n-1].Offset
			if w.segReplay && w.lastOff == w.replay[0].end-1 {
				if err := w.closeSegment(ctx); err != nil {
					return err
				}
			}
		}
		recs = recs[n:]
	}
	// After every call and the seals they made: a chunk sealed before
	// this counts the batch's module stage up to its seal (lagPoints).
	b.ack.moduleEnd.Store(int64(time.Since(b.ack.polled)))
	b.ack.finish()
	return nil
}

// reopen gives table i an empty open block, held by no batch.
func (w *partitionWorker) reopen(i int) {
	w.blocks[i] = w.p.sink.NewBlock(w.schema.tables[i])
	w.holders[i] = nil
	w.lastHeld[i] = nil
}

// openBytes is the encoded size of the worker's open blocks.
func (w *partitionWorker) openBytes() int {
	n := 0
	for _, b := range w.blocks {
		n += b.Size()
	}
	return n
}

// sealFull seals every block that reached the chunk size.
func (w *partitionWorker) sealFull(ctx context.Context) error {
	target := w.p.sink.Config().ChunkBytes
	if w.eo {
		// A segment is closed whole; a replayed one only at its recorded
		// end.
		if !w.segReplay && w.openBytesMax() >= segmentBytes(w.p.sink.Config()) {
			return w.closeSegment(ctx)
		}
		return nil
	}
	for i, blk := range w.blocks {
		if blk.Size() >= target {
			if err := w.seal(ctx, i, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// transform runs recs through the instance. On an instance failure it
// bisects: each half runs on a fresh instance, down to single records. A
// record is dead-lettered with the failure only when it fails alone on a
// fresh instance, so that the state an earlier record left in a stateful
// module never blames an innocent one; only such poison records and
// instances that fail to start count towards the crash-loop budget.
func (w *partitionWorker) transform(ctx context.Context, recs []*kgo.Record, ack *batchAck) error {
	if err := w.ensureInstance(ctx); err != nil {
		return err
	}
	fresh := w.instCalls == 0
	w.batch.Records = w.batch.Records[:0]
	// Headers of every record share one slab reused across calls, so a
	// record with headers costs no allocation. A record's slice stays valid
	// if the slab grows later: it keeps the old backing array.
	w.headers = w.headers[:0]
	for _, r := range recs {
		rec := wasmhost.Record{Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			start := len(w.headers)
			for _, h := range r.Headers {
				w.headers = append(w.headers, wasmhost.Header{Key: h.Key, Value: h.Value})
			}
			rec.Headers = w.headers[start:len(w.headers):len(w.headers)]
		}
		w.batch.Records = append(w.batch.Records, rec)
	}
	if err := w.acquireSlot(ctx); err != nil {
		return err
	}
	_, span := w.p.tracer.Start(w.spanCtx, "transform")
	started := time.Now()
	if ack.moduleStart.IsZero() {
		ack.moduleStart = started
	}
	out, err := w.inst.Transform(ctx, &w.batch)
	// Keep nothing that points into the records' bytes: the buffer they
	// were fetched in leaves the in-flight budget once every batch
	// fetched with them is transformed (fetchGroup), and must be garbage
	// then.
	clear(w.batch.Records)
	clear(w.headers)
	w.p.slots.release(w.route.tenant)
	w.p.metrics.moduleSeconds.Observe(time.Since(started).Seconds())
	w.instCalls++
	if err != nil {
		if span.IsRecording() {
			span.RecordError(err)
			span.SetStatus(codes.Error, "instance failed")
			span.SetAttributes(w.moduleAttrs()...)
			span.SetAttributes(attrRecordsIn.Int(len(recs)))
		}
		span.End()
		if ctx.Err() != nil {
			// Interrupted because the worker is stopping: no one's fault.
			return ctx.Err()
		}
		var trap *wasmhost.TrapError
		if !errors.As(err, &trap) {
			return fmt.Errorf("partition %s offsets %d-%d: %w", w.tp, recs[0].Offset, recs[len(recs)-1].Offset, err)
		}
		w.route.failed(trap)
		w.p.stats.traps.Add(1)
		w.discardInstance()
		if err := w.callFailed(ctx, time.Since(started), err); err != nil {
			return err
		}
		if len(recs) == 1 {
			if !fresh {
				// Try it once more alone on a fresh instance.
				return w.transform(ctx, recs, ack)
			}
			if err := w.moduleFailed(ctx, err); err != nil {
				return err
			}
			return w.deadLetter(ctx, recs[0], ack, err.Error())
		}
		mid := len(recs) / 2
		if err := w.transform(ctx, recs[:mid], ack); err != nil {
			return err
		}
		return w.transform(ctx, recs[mid:], ack)
	}
	rows, errored := 0, 0
	before := w.openBytes()
	defer func() {
		// Build the attributes only for a span that records them.
		if span.IsRecording() {
			span.SetAttributes(w.moduleAttrs()...)
			span.SetAttributes(attrRecordsIn.Int(len(recs)), attrRowsOut.Int(rows), attrErrored.Int(errored))
		}
		span.End()
	}()
	for i := 0; ; i++ {
		res, ok := out.Next()
		if !ok {
			break
		}
		if res.Err != "" {
			errored++
			if err := w.deadLetter(ctx, recs[i], ack, res.Err); err != nil {
				return err
			}
			continue
		}
		if err := w.appendRows(&res, ack); err != nil {
			errored++
			if err := w.deadLetter(ctx, recs[i], ack, err.Error()); err != nil {
				return err
			}
			continue
		}
		rows += res.Rows()
	}
	w.p.stats.rowsOut.Add(int64(rows))
	w.mv.rowsOut.Add(int64(rows))
	// The rows count against the budget until the batch is done, so that
	// output far larger than its input pauses fetching too; and blocks are
	// sealed after every successful call, bisection's included, so that
	// open blocks never hold more than chunk_bytes plus one call's output.
	open := w.openBytes()
	w.peakOpen = max(w.peakOpen, open)
	ack.addBytes(int64(open - before))
	return w.sealFull(ctx)
}

// pickVersion changes the worker over to the route's current module
// version, if it changed, between two batches.
func (w *partitionWorker) pickVersion(ctx context.Context) error {
	cur := w.route.cur.Load()
	if cur == nil {
		return fmt.Errorf("partition %s: route %s has no module", w.tp, w.route)
	}
	if cur == w.mv {
		return nil
	}
	if w.eo && w.mv != nil {
		if w.segReplay {
			// The replayed segment is finished with the version at hand.
			return nil
		}
		// A segment names the one version that made its rows.
		if err := w.closeSegment(ctx); err != nil {
			return err
		}
	}
	w.discardInstance()
	if w.mv != nil {
		w.p.log.Info("partition changed module version", "partition", w.tp.String(), "route", w.route.String(),
			"from", w.mv.module.SHA256, "to", cur.module.SHA256)
	}
	w.mv = cur
	w.crash.reset()
	return nil
}

// pickSchema changes the worker over to the route's current tables, if
// they changed, between two batches: the open blocks are sealed as they
// are (their rows go in with their own columns) and the next call starts a
// module instance with the new tables. While the module refuses the
// route's tables the worker waits, its records uncommitted, for a schema
// or a module version it accepts; it returns errWorkerStopped when told to
// stop meanwhile, and ctx's error when it ends.
func (w *partitionWorker) pickSchema(ctx context.Context) error {
	for {
		cur := w.route.schema.Load()
		if cur != w.schema && w.segReplay {
			// The replayed segment is finished with the tables at hand.
			return nil
		}
		if cur != w.schema {
			if err := w.sealAll(ctx); err != nil {
				return err
			}
			w.discardInstance()
			for i, t := range cur.tables {
				w.blocks[i] = w.p.sink.NewBlock(t)
			}
			w.schema = cur
			w.p.log.Info("partition changed over to the tables' new schema", "partition", w.tp.String(),
				"route", w.route.String(), "refused", cur.refused != "")
		}
		if cur.refused == "" {
			return nil
		}
		select {
		case <-cur.replaced:
		case <-ctx.Done():
			return ctx.Err()
		case <-w.quit:
			return errWorkerStopped
		}
	}
}

// ensureInstance starts an instance if the worker has none. An instance
// that fails to start (a trap or a refusal in sluice_init) is a failure of
// the module like a trap: it counts towards the crash-loop budget, the
// partition cools down when the module keeps failing, and the start is
// tried again; the records wait, uncommitted, and other partitions flow.
func (w *partitionWorker) ensureInstance(ctx context.Context) error {
	for w.inst == nil {
		if err := w.acquireSlot(ctx); err != nil {
			return err
		}
		inst, err := w.mv.module.Instantiate(ctx, w.schema.init)
		w.p.slots.release(w.route.tenant)
		if err == nil {
			w.inst, w.instCalls = inst, 0
			w.p.stats.instances.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.route.failedCause("init")
		w.p.log.Warn("module instance failed to start", "module", w.route.String(), "sha256", w.mv.module.SHA256,
			"partition", w.tp.String(), "err", err)
		if err := w.moduleFailed(ctx, err); err != nil {
			return err
		}
	}
	return nil
}

// acquireSlot waits for a call slot (see callSlots); the module's deadline
// starts once it has one.
func (w *partitionWorker) acquireSlot(ctx context.Context) error {
	started := time.Now()
	if err := w.p.slots.acquire(ctx, w.route.tenant); err != nil {
		return err
	}
	w.slotWait.Observe(time.Since(started).Seconds())
	return nil
}

func (w *partitionWorker) discardInstance() {
	if w.inst != nil {
		_ = w.inst.Close(context.Background())
		w.inst = nil
	}
}

// moduleFailed counts a failure of the module (a poison record or an
// instance that would not start) and, when the module keeps failing, pauses
// the partition for the cool-down. It returns errWorkerStopped when the
// worker is told to stop meanwhile, and ctx's error when it ends.
func (w *partitionWorker) moduleFailed(ctx context.Context, cause error) error {
	n, cool := w.crash.moduleFailed(time.Now(), w.route.maxTraps)
	if !cool {
		return nil
	}
	return w.coolDown(ctx, cause, "failures_last_minute", n)
}

// callFailed counts the time a failed call took. Bisection makes several
// failed calls per poison record, which do not count as failures of their
// own; but when the failed calls of the last minute took longer than
// max_traps_per_minute+1 calls that each ran to the deadline, the module
// costs too much (one that loops on every record, say) and the partition
// cools down: the budget bounds the CPU a failing module burns as well as
// the records it poisons.
func (w *partitionWorker) callFailed(ctx context.Context, took time.Duration, cause error) error {
	sum, cool := w.crash.callFailed(time.Now(), took, w.route.maxTraps, w.mv.module.Limits.Deadline)
	if !cool {
		return nil
	}
	return w.coolDown(ctx, cause, "failed_call_time_last_minute", sum)
}

// coolDown pauses the partition for the route's cool-down and forgets the
// failures counted so far.
func (w *partitionWorker) coolDown(ctx context.Context, cause error, why string, figure any) error {
	cool := w.route.trapCooldown
	w.p.log.Error("module keeps failing; pausing its partition", "module", w.route.String(), "sha256", w.mv.module.SHA256,
		"partition", w.tp.String(), why, figure, "cooldown", cool, "last_error", cause)
	w.p.stats.modulePauses.Add(1)
	w.p.setModulePaused(w.tp, true)
	defer w.p.setModulePaused(w.tp, false)
	w.crash.reset()
	t := time.NewTimer(cool)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.quit:
		// Stopping: the rest of this batch is not processed and stays
		// uncommitted.
		return errWorkerStopped
	}
}

// deadLetter sends r to the dead-letter topic; without one, the failure
// stops the pipeline and names the record.
func (w *partitionWorker) deadLetter(_ context.Context, r *kgo.Record, ack *batchAck, cause string) error {
	m := w.mv.module
	w.p.stats.recordsErrored.Add(1)
	if w.p.dlq == nil {
		return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Module: m.Name,
			Err: errors.New(cause)}
	}
	ack.hold()
	// The copy points into the buffer r was fetched in: the fetch group
	// keeps its data counted until the copy is produced.
	if g := ack.group; g != nil {
		g.hold()
	}
	// The copy outlives the worker: a worker that stops after handing it
	// over (a revoke, a drain) still gets its batch committed once the
	// copy lands. Only the pipeline's end abandons it.
	dctx := w.p.workCtx
	w.p.dlq.send(dctx, r, m.Name, m.SHA256, cause, func(err error) {
		if g := ack.group; g != nil {
			g.release()
		}
		if err != nil {
			if dctx.Err() != nil {
				// The pipeline gave up on its work: the record stays
				// uncommitted and is dead-lettered again by whoever
				// consumes it next.
				return
			}
			w.p.fail(fmt.Errorf("dead-letter record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err))
			return
		}
		w.p.stats.deadLettered.Add(1)
		ack.Done()
	})
	return nil
}

// appendRows decodes one record's rows into the open blocks; a row that does
// not decode removes all of the record's rows.
func (w *partitionWorker) appendRows(res *wasmhost.RecordResult, ack *batchAck) error {
	if res.Rows() == 0 {
		return nil
	}
	for i, b := range w.blocks {
		w.marks[i] = b.Rows()
	}
	for {
		table, row, ok := res.NextRow()
		if !ok {
			break
		}
		if table >= len(w.blocks) {
			w.rollback()
			return fmt.Errorf("row for table index %d; the module has %d tables", table, len(w.blocks))
		}
		if err := w.blocks[table].AppendRow(row); err != nil {
			w.rollback()
			return err
		}
		if w.lastHeld[table] != ack {
			ack.hold()
			w.lastHeld[table] = ack
			w.holders[table] = append(w.holders[table], w.holdFor(table, ack))
		}
		if w.openedAt.IsZero() {
			w.openedAt = time.Now()
		}
	}
	return nil
}

func (w *partitionWorker) rollback() {
	for i, b := range w.blocks {
		b.Truncate(w.marks[i])
	}
}

// seal sends table i's open block as a chunk (of the exactly-once
// segment named segment, if not "") and opens a new one.
func (w *partitionWorker) seal(ctx context.Context, i int, segment string) error {
	chunk := clickhouse.NewSegmentChunk(w.blocks[i], w.holders[i], segment)
	w.p.traceSeal(chunk)
	w.reopen(i)
	if err := w.p.sink.Send(ctx, chunk); err != nil {
		return fmt.Errorf("partition %s: %w", w.tp, err)
	}
	return nil
}

func (w *partitionWorker) sealAll(ctx context.Context) error {
	if w.eo {
		if w.segReplay {
			// A replayed segment goes in whole or not at all: the records
			// it still lacks stay uncommitted, and it stays recorded for
			// the next owner.
			return nil
		}
		return w.closeSegment(ctx)
	}
	for i := range w.blocks {
		if w.blocks[i].Rows() == 0 && len(w.holders[i]) == 0 {
			continue
		}
		if err := w.seal(ctx, i, ""); err != nil {
			return err
		}
	}
	w.openedAt = time.Time{}
	return nil
}

// RecordError is a record the module could not normalize, or whose output
// did not fit the table, when there is no dead-letter topic. It names the
// record.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Module    string
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %s/%d@%d: module %s: %v (configure dead_letter.topic to divert such records)",
		e.Topic, e.Partition, e.Offset, e.Module, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }
