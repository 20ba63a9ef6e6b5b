package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// partitionWorker runs one partition's records through its own module
// instance and fills that partition's open blocks, one per target table.
type partitionWorker struct {
	p    *Pipeline
	tp   topicPartition
	acks *partitionAcks

	in      chan []*kgo.Record
	quit    chan struct{} // closed to stop the worker
	stopped chan struct{} // closed when run returns

	inst     *wasmhost.Instance
	batch    wasmhost.Batch
	blocks   []*clickhouse.Block
	holders  [][]clickhouse.Ack // acks of the batches with rows in blocks[i]
	lastHeld []*batchAck
	marks    []int
	openedAt time.Time // when the first row went into an open block
}

func newPartitionWorker(p *Pipeline, tp topicPartition, acks *partitionAcks) *partitionWorker {
	n := len(p.tables)
	w := &partitionWorker{
		p: p, tp: tp, acks: acks,
		in:       make(chan []*kgo.Record, 2),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		blocks:   make([]*clickhouse.Block, n),
		holders:  make([][]clickhouse.Ack, n),
		lastHeld: make([]*batchAck, n),
		marks:    make([]int, n),
	}
	w.batch.Topic, w.batch.Partition = tp.topic, tp.partition
	for i, t := range p.tables {
		w.blocks[i] = p.sink.NewBlock(t)
	}
	return w
}

// stop ends the worker after the batches already handed to it, and waits
// until it has sent its last chunks or ctx ends.
func (w *partitionWorker) stop(ctx context.Context) {
	close(w.quit)
	select {
	case <-w.stopped:
	case <-ctx.Done():
	}
}

// run is the worker's goroutine. Its context is the pipeline's drain: it
// stops when told to, after sending what it holds.
func (w *partitionWorker) run() {
	defer close(w.stopped)
	ctx := w.p.workCtx
	defer func() {
		if w.inst != nil {
			_ = w.inst.Close(context.Background())
		}
	}()
	linger := w.p.sink.Config().ChunkLinger
	tick := time.NewTicker(linger / 2)
	defer tick.Stop()
	for {
		select {
		case recs := <-w.in:
			if err := w.process(ctx, recs); err != nil {
				w.p.fail(err)
				return
			}
		case <-tick.C:
			if !w.openedAt.IsZero() && time.Since(w.openedAt) >= linger {
				if err := w.sealAll(ctx); err != nil {
					w.p.fail(err)
					return
				}
			}
		case <-w.quit:
			// Take what the poll loop already handed over, then seal.
			for {
				select {
				case recs := <-w.in:
					if err := w.process(ctx, recs); err != nil {
						w.p.fail(err)
						return
					}
					continue
				default:
				}
				break
			}
			if err := w.sealAll(ctx); err != nil {
				w.p.fail(err)
			}
			return
		}
	}
}

// process transforms one polled batch and appends its rows.
func (w *partitionWorker) process(ctx context.Context, recs []*kgo.Record) error {
	if w.inst == nil {
		inst, err := w.p.module.Instantiate(ctx, w.p.init)
		if err != nil {
			return fmt.Errorf("partition %s: %w", w.tp, err)
		}
		w.inst = inst
	}
	last := recs[len(recs)-1]
	ack := w.acks.track(kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset})
	defer ack.Done()

	w.batch.Records = w.batch.Records[:0]
	for _, r := range recs {
		rec := wasmhost.Record{Offset: r.Offset, Timestamp: r.Timestamp.UnixMilli(), Key: r.Key, Value: r.Value}
		if len(r.Headers) > 0 {
			rec.Headers = make([]wasmhost.Header, len(r.Headers))
			for i, h := range r.Headers {
				rec.Headers[i] = wasmhost.Header{Key: h.Key, Value: h.Value}
			}
		}
		w.batch.Records = append(w.batch.Records, rec)
	}
	out, err := w.inst.Transform(ctx, &w.batch)
	if err != nil {
		_ = w.inst.Close(ctx)
		w.inst = nil
		return fmt.Errorf("partition %s offsets %d-%d: %w", w.tp, recs[0].Offset, last.Offset, err)
	}
	for i := 0; ; i++ {
		res, ok := out.Next()
		if !ok {
			break
		}
		if res.Err != "" {
			return &RecordError{Topic: w.tp.topic, Partition: w.tp.partition, Offset: recs[i].Offset,
				Module: w.p.module.Name, Err: errors.New(res.Err)}
		}
		if err := w.appendRows(&res, ack); err != nil {
			return &RecordError{Topic: w.tp.topic, Partition: w.tp.partition, Offset: recs[i].Offset,
				Module: w.p.module.Name, Err: err}
		}
	}
	target := w.p.sink.Config().ChunkBytes
	for i, b := range w.blocks {
		if b.Size() >= target {
			if err := w.seal(ctx, i); err != nil {
				return err
			}
		}
	}
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
			w.holders[table] = append(w.holders[table], ack)
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

// seal sends table i's open block as a chunk and opens a new one.
func (w *partitionWorker) seal(ctx context.Context, i int) error {
	chunk := &clickhouse.Chunk{Block: w.blocks[i], Acks: w.holders[i]}
	w.blocks[i] = w.p.sink.NewBlock(w.p.tables[i])
	w.holders[i] = nil
	w.lastHeld[i] = nil
	if err := w.p.sink.Send(ctx, chunk); err != nil {
		return fmt.Errorf("partition %s: %w", w.tp, err)
	}
	return nil
}

func (w *partitionWorker) sealAll(ctx context.Context) error {
	for i := range w.blocks {
		if w.blocks[i].Rows() == 0 && len(w.holders[i]) == 0 {
			continue
		}
		if err := w.seal(ctx, i); err != nil {
			return err
		}
	}
	w.openedAt = time.Time{}
	return nil
}

// RecordError is a record the module could not normalize, or whose output
// did not fit the table. It names the record.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Module    string
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %s/%d@%d: module %s: %v", e.Topic, e.Partition, e.Offset, e.Module, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }
