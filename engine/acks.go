package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
)

// partitionAcks tracks one partition's polled batches until their rows are
// inserted. Its commit watermark is one past the last offset of the longest
// prefix of batches that are all done: an offset is committed only when
// every record at or below it is.
type partitionAcks struct {
	topic     string
	partition int32
	// budget is the pipeline's in-flight byte count; a batch's bytes leave
	// it when the batch is done.
	budget *flowControl
	// route is the partition's route, for the lag metrics; nil in tests.
	route *route

	mu      sync.Mutex
	batches []*batchAck // in offset order
	next    kgo.EpochOffset
	hasNext bool
	// hwm is the partition's high watermark as of the last fetch.
	hwm      atomic.Int64
	inflight atomic.Int64 // batches not yet done
	// abandoned is set once the partition is given up; guarded by mu.
	abandoned bool
	// eo is the partition's exactly-once state; nil for at least once.
	eo *eoPartition
}

// batchAck is one polled batch of a partition. Pending counts the holds on
// it: one while it is transformed, plus one per chunk holding its rows.
type batchAck struct {
	p     *partitionAcks
	first int64           // offset of the batch's first record
	last  kgo.EpochOffset // offset of the batch's last record
	// bytes is what the batch holds against the budget: its records, plus
	// the rows the module made of them (see addBytes).
	bytes atomic.Int64
	// transient is the part of its records' bytes that the batch gives
	// back once it is transformed (see recordBytes); set before the
	// worker gets the batch.
	transient int64
	// data is its records' data (recordData), which it gives back when
	// its fetch group is (fetchGroup), if before it is done; group is nil
	// for a batch tracked outside the poll loop. dataReleased is guarded
	// by p.mu.
	data         int64
	group        *fetchGroup
	dataReleased bool
	span         trace.SpanContext // the batch's consume span
	pending      atomic.Int32
	done         bool // guarded by p.mu
	// transformed is set when the worker releases its hold, every record
	// of the batch handled; a batch a stopped worker left without it is
	// never done (see waitIdle).
	transformed atomic.Bool

	// The batch's stage boundaries for the lag metrics (lag.go). polled
	// and oldest (the oldest record's timestamp relative to polled) are
	// set before the worker gets the batch; moduleStart by its first
	// module call, before any of its rows go into a block; moduleEnd,
	// in nanoseconds since polled, once the worker is done with it.
	polled      time.Time
	oldest      time.Duration
	moduleStart time.Time
	moduleEnd   atomic.Int64
}

// track registers a batch whose last record is at last and whose records
// take bytes; the batch starts with one hold, released by Done.
func (p *partitionAcks) track(first int64, last kgo.EpochOffset, bytes int64) *batchAck {
	b := &batchAck{p: p, first: first, last: last}
	b.bytes.Store(bytes)
	if p.budget != nil {
		p.budget.add(bytes)
	}
	b.pending.Store(1)
	p.inflight.Add(1)
	p.mu.Lock()
	p.batches = append(p.batches, b)
	p.mu.Unlock()
	return b
}

// Range is the batch's topic, partition and offsets, for the sink's
// insert deduplication token.
func (b *batchAck) Range() (topic string, partition int32, first, last int64) {
	return b.p.topic, b.p.partition, b.first, b.last.Offset
}

// SpanContext is the batch's consume span, for the flush span's links.
func (b *batchAck) SpanContext() trace.SpanContext { return b.span }

// finish releases the worker's hold once it has handled every record of
// the batch.
func (b *batchAck) finish() {
	if n := b.transient; n > 0 {
		p := b.p
		p.mu.Lock()
		// The worker's hold keeps the batch from being done meanwhile;
		// an abandoned partition has given every byte back already.
		if !p.abandoned && !b.done {
			b.bytes.Add(-n)
			if p.budget != nil {
				p.budget.add(-n)
			}
		}
		p.mu.Unlock()
	}
	b.transformed.Store(true)
	if b.group != nil {
		b.group.release()
	}
	b.Done()
}

// releaseData gives back the records' data: none of them is reachable any
// more (fetchGroup). A batch done, or of an abandoned partition, gave
// every byte back already.
func (b *batchAck) releaseData() {
	p := b.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandoned || b.done || b.dataReleased || b.data <= 0 {
		return
	}
	b.dataReleased = true
	b.bytes.Add(-b.data)
	if p.budget != nil {
		p.budget.add(-b.data)
	}
}

// isDone reports whether the batch is done, or its partition abandoned:
// either way it has nothing left in the budget.
func (b *batchAck) isDone() bool {
	b.p.mu.Lock()
	defer b.p.mu.Unlock()
	return b.done || b.p.abandoned
}

// hold adds a hold on the batch (a chunk now carries some of its rows).
func (b *batchAck) hold() { b.pending.Add(1) }

// Done releases one hold; the last release marks the batch done. A batch
// is released only by the worker that finished every record in it (rows in
// blocks, filtered or dead-lettered) and by the chunks carrying its rows once
// inserted: a batch that failed keeps its hold, so the watermark never
// passes it.
func (b *batchAck) Done() {
	if b.pending.Add(-1) != 0 {
		return
	}
	p := b.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if p.abandoned {
		// abandon already gave the batch's bytes back.
		return
	}
	n := 0
	for n < len(p.batches) && p.batches[n].done {
		n++
	}
	if n > 0 {
		last := p.batches[n-1].last
		p.next = kgo.EpochOffset{Epoch: last.Epoch, Offset: last.Offset + 1}
		p.hasNext = true
		clear(p.batches[:n])
		p.batches = p.batches[n:]
	}
	p.inflight.Add(-1)
	if p.budget != nil {
		p.budget.add(-b.bytes.Load())
	}
}

// addBytes counts n more bytes against the batch, until it is done: the
// rows its records became, which can be far larger than the records.
func (b *batchAck) addBytes(n int64) {
	if n <= 0 {
		return
	}
	b.bytes.Add(n)
	if b.p.budget != nil {
		b.p.budget.add(n)
	}
}

// abandon gives up the partition (revoked, lost or stopped): the bytes of
// batches not done leave the budget, later releases of them change nothing,
// and the watermark stays where it is.
func (p *partitionAcks) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandoned {
		return
	}
	p.abandoned = true
	for _, b := range p.batches {
		if b.done {
			continue
		}
		p.inflight.Add(-1)
		if p.budget != nil {
			p.budget.add(-b.bytes.Load())
		}
	}
	clear(p.batches)
	p.batches = nil
}

// batchFirst is the first offset of the tracked batch that holds off, or
// off when none does.
func (p *partitionAcks) batchFirst(off int64) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		if b.first <= off && off <= b.last.Offset {
			return b.first
		}
	}
	return off
}

// watermark returns the offset to commit, if any.
func (p *partitionAcks) watermark() (kgo.EpochOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, p.hasNext
}

// waitIdle waits, once the partition's worker has stopped, until every
// tracked batch is done or can no longer be, or ctx ends. A batch the
// worker stopped before finishing (or never took) keeps the worker's hold
// for ever: once only that hold is left (its chunks inserted, its dead
// letters sent), nothing of it is in flight any more. Waiting for it
// instead held every other partition's polls (a revoke callback blocks
// them) for the whole revoke timeout whenever a revoked partition's
// module was cooling down.
func (p *partitionAcks) waitIdle(ctx context.Context) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !p.idle() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// idle reports whether no batch has anything in flight beyond the hold of
// a worker that will not release it.
func (p *partitionAcks) idle() bool {
	if p.inflight.Load() == 0 {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.batches {
		if b.done {
			continue
		}
		if b.transformed.Load() || b.pending.Load() > 1 {
			return false
		}
	}
	return true
}
