package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pollLoop fetches records and hands each partition's batch to its worker.
func (p *Pipeline) pollLoop(ctx context.Context) {
	p.polling.Store(true)
	defer p.polling.Store(false)
	var group *fetchGroup // the open group of the polls before, if any
	for ctx.Err() == nil {
		fetches := p.client.PollRecords(ctx, p.cfg.Kafka.MaxPollRecords)
		polled := time.Now()
		if fetches.IsClientClosed() {
			return
		}
		group = p.takePoll(fetches, polled, group)
		p.checkFlow()
		p.client.AllowRebalance()
	}
}

// takePoll hands each partition's records of one poll to its worker as a
// batch, in group (a new group when nil), and returns the group the next
// poll joins: nil once this poll closed it.
func (p *Pipeline) takePoll(fetches kgo.Fetches, polled time.Time, group *fetchGroup) *fetchGroup {
	if group == nil {
		group = newFetchGroup()
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
		group.add(ack)
		spanCtx, span := p.startConsume(fp)
		ack.span = span.SpanContext()
		w.submit(polledBatch{recs: fp.Records, ack: ack, ctx: spanCtx, span: span})
	})
	if max := p.cfg.Kafka.MaxPollRecords; max <= 0 || fetches.NumRecords() < max {
		// The poll took every record the client had buffered: no later
		// poll shares a fetch buffer with this group's.
		group.close()
		return nil
	}
	return group
}

// A fetchGroup is a run of polls whose records may share fetch buffers,
// so that their data can leave the in-flight budget as soon as none of
// those buffers is reachable any more, rather than when their rows land.
//
// The Kafka client decodes a fetch response's records in place: a
// record's key, value and headers point into the response (or into the
// decompressed record batch), which stays in memory while any record of
// it does. A batch's records are dropped once the worker has transformed
// it, and a dead-lettered one once its copy is produced, but the buffer
// they were fetched in is shared by the other partitions' records of the
// same response and, when a poll stops at max_poll_records, by records
// the next poll takes. A poll that takes fewer than max_poll_records
// drains every buffered fetch: a run of polls ending with such a poll
// shares no buffer with any other, and once each of its batches is
// transformed and each of its dead letters produced, its records' data
// is garbage. Each batch then gives it back (batchAck.releaseData); the
// rows the records became stay counted until they land. A group that
// never closes (every poll full) leaves its batches' data counted until
// they are done, as it was before; it keeps only the batches not done, so
// that a backlog polled full for hours does not grow it. The group spans
// every route of the pipeline: a batch one tenant's module has not
// transformed yet (a slow module, a cool-down) holds its records' fetch
// buffer, so the other batches of the group keep their data counted until
// it is transformed or they are done, which is never longer than before.
type fetchGroup struct {
	mu        sync.Mutex
	open      bool // a later poll may still join
	pending   int  // batches not transformed and dead letters not produced
	acks      []*batchAck
	compactAt int // len(acks) at which add drops the batches done
}

func newFetchGroup() *fetchGroup { return &fetchGroup{open: true, compactAt: minCompact} }

// minCompact is the fewest batches a group holds before add looks for done
// ones to drop.
const minCompact = 64

// add puts b in the group, untransformed. Dropping the batches done reads
// each one's state under its partition's lock, inside g.mu: nothing takes
// g.mu while it holds a partition's lock (finish and releaseData take them
// one after the other), so the order cannot deadlock.
func (g *fetchGroup) add(b *batchAck) {
	g.mu.Lock()
	g.pending++
	if len(g.acks) >= g.compactAt {
		kept := g.acks[:0]
		for _, a := range g.acks {
			if !a.isDone() {
				kept = append(kept, a)
			}
		}
		clear(g.acks[len(kept):])
		g.acks = kept
		g.compactAt = max(minCompact, 2*len(kept))
	}
	g.acks = append(g.acks, b)
	g.mu.Unlock()
	b.group = g
}

// hold keeps the group's data counted until a matching release: a dead
// letter's copy points into the fetch buffer until it is produced. Only
// taken while a batch of the group is being transformed.
func (g *fetchGroup) hold() {
	g.mu.Lock()
	g.pending++
	g.mu.Unlock()
}

// release ends a hold, or a batch's transform.
func (g *fetchGroup) release() {
	g.mu.Lock()
	g.pending--
	acks := g.drained()
	g.mu.Unlock()
	releaseData(acks)
}

// close says no later poll joins the group.
func (g *fetchGroup) close() {
	g.mu.Lock()
	g.open = false
	acks := g.drained()
	g.mu.Unlock()
	releaseData(acks)
}

// drained takes the group's batches once it is closed and nothing holds
// it; g.mu is held.
func (g *fetchGroup) drained() []*batchAck {
	if g.open || g.pending > 0 {
		return nil
	}
	acks := g.acks
	g.acks = nil
	return acks
}

func releaseData(acks []*batchAck) {
	for _, b := range acks {
		b.releaseData()
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
	ack.transient, ack.data = bytes-data, data
	ack.stampPolled(polled, oldest)
	return ack
}

// recordBytes is what a record counts against the in-flight budget when it
// is polled: an estimate of the memory it holds until it is transformed.
// Its key, value and headers count twice (the fetched response and the
// decompressed batch) plus 256 bytes of bookkeeping. Once its batch is
// transformed it counts its data once (recordData): the records are
// dropped then, but the buffer they were fetched in may still be held by
// the records of other batches fetched with them, until every batch of
// its fetchGroup is transformed, or else until the batch is done.
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
