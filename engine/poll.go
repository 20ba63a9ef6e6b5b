package engine

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pollLoop fetches records and hands each partition's batch to its worker.
func (p *Pipeline) pollLoop(ctx context.Context) {
	p.polling.Store(true)
	defer p.polling.Store(false)
	for ctx.Err() == nil {
		fetches := p.client.PollRecords(ctx, p.cfg.Kafka.MaxPollRecords)
		polled := time.Now()
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			p.log.Warn("fetch error", "topic", topic, "partition", partition, "err", err)
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 {
				return
			}
			w := p.worker(topicPartition{fp.Topic, fp.Partition})
			w.acks.hwm.Store(fp.HighWatermark)
			ack := w.acks.trackPolled(fp.Records, polled)
			spanCtx, span := p.startConsume(fp)
			ack.span = span.SpanContext()
			w.submit(polledBatch{recs: fp.Records, ack: ack, ctx: spanCtx, span: span})
		})
		p.checkFlow()
		p.client.AllowRebalance()
	}
}

// trackPolled registers the records of one partition that a poll brought
// (at least one) as a batch: they count their recordBytes against the
// budget, of which the batch gives back all but their data once it is
// transformed (finish).
func (p *partitionAcks) trackPolled(recs []*kgo.Record, polled time.Time) *batchAck {
	var data, oldest int64
	for _, r := range recs {
		data += recordData(r)
		oldest = olderMillis(oldest, r)
	}
	bytes := recordCopies*data + recordOverhead*int64(len(recs)) // the sum of their recordBytes
	last := recs[len(recs)-1]
	ack := p.track(recs[0].Offset, kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset}, bytes)
	ack.transient = bytes - data
	ack.stampPolled(polled, oldest)
	return ack
}

// recordBytes is what a record counts against the in-flight budget when it
// is polled: an estimate of the memory it holds until it is transformed.
// Its key, value and headers count twice (the fetched response and the
// decompressed batch) plus 256 bytes of bookkeeping. Once its batch is
// transformed it counts its data once (recordData) until the batch is
// done: the records are dropped then, but the buffer they were fetched in
// may still be held by the records of other batches fetched with them.
// The rows the module makes of it are counted as they are made
// (batchAck.addBytes), so that a module whose output dwarfs its input is
// bounded by the budget too.
func recordBytes(r *kgo.Record) int64 {
	return recordCopies*recordData(r) + recordOverhead
}

// A polled record's data counts recordCopies times against the budget, and
// its bookkeeping recordOverhead bytes, until its batch is transformed.
const (
	recordCopies   = 2
	recordOverhead = 256
)

// recordData is the size of a record's key, value and headers.
func recordData(r *kgo.Record) int64 {
	n := int64(len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return n
}

// worker returns the partition's worker, starting it on first use.
func (p *Pipeline) worker(tp topicPartition) *partitionWorker {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.workers[tp]; ok {
		return w
	}
	r := p.byTopic[tp.topic]
	acks := &partitionAcks{topic: tp.topic, partition: tp.partition, budget: r.flow, route: r}
	if p.eo != nil {
		acks.eo = p.eo.take(tp)
	}
	p.acks[tp] = acks
	w := newPartitionWorker(p, tp, acks)
	p.workers[tp] = w
	p.workerGroup.Add(1)
	go func() {
		defer p.workerGroup.Done()
		w.run()
	}()
	return w
}

func (p *Pipeline) allPartitions() []topicPartition {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []topicPartition
	for tp := range p.workers {
		out = append(out, tp)
	}
	return out
}

// stopWorkers stops the workers of tps and waits until each has sent its
// last chunks; a worker still busy when ctx ends is cancelled, and waited
// for: a partition this member gives up never keeps a worker behind. A
// worker leaves the map only once it has stopped.
func (p *Pipeline) stopWorkers(ctx context.Context, tps []topicPartition) {
	p.mu.Lock()
	var ws []*partitionWorker
	for _, tp := range tps {
		if w, ok := p.workers[tp]; ok {
			ws = append(ws, w)
		}
	}
	p.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	for _, w := range ws {
		select {
		case <-w.stopped:
		case <-ctx.Done():
			w.cancel()
			<-w.stopped
		}
	}
	p.mu.Lock()
	for _, w := range ws {
		if p.workers[w.tp] == w {
			delete(p.workers, w.tp)
		}
	}
	p.mu.Unlock()
}
