package engine

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// The lag metrics split the time from a record's Kafka timestamp to the
// acknowledgement of the insert carrying its rows into stages. One sample
// is the rows of one polled batch that one chunk carried: a chunk merges
// rows of several batches, and a batch's rows can be split over several
// chunks (one per table, or more when a block fills mid-batch). Its origin
// is the timestamp of the batch's oldest record, so the end-to-end figure
// is an upper bound for every record of the batch. The poll, the module
// call's start and the insert's acknowledgement are times the pipeline
// already takes for its other metrics and spans; the other boundaries
// cost a clock read per batch or per chunk, and none is read per record.
const (
	stageBroker   = iota // oldest record's timestamp → the poll that returned the batch
	stageInflight        // poll → the batch's first module call starts (worker queue, instance start, slot wait)
	stageModule          // → the batch is processed: its calls, their output decoded (or the chunk's seal, if sealed meanwhile)
	stageSeal            // → the chunk is sealed: the rows waited in the open block for chunk_bytes or chunk_linger
	stageQueue           // → an insert takes the chunk off its shard queue (waits for room included)
	stageInsert          // → the server acknowledges the insert (insert_linger, retries and parking included)
	numStages
)

// stageNames are the values of sluice_stage_seconds's stage label.
var stageNames = [numStages]string{"broker", "inflight", "module", "seal", "queue", "insert"}

// LagStages returns the values of sluice_stage_seconds's stage label, in
// the order a record passes the stages.
func LagStages() []string { return slices.Clone(stageNames[:]) }

// lagBuckets serve the end-to-end and every stage histogram, so that their
// quantiles compare: 100 µs to 56 minutes.
var lagBuckets = prometheus.ExponentialBuckets(0.0001, 2, 26)

// lagPoints are the times one sample passes the stage boundaries, in
// nanoseconds since its batch was polled: point i starts stage i, and the
// last point is the insert's acknowledgement.
type lagPoints [numStages + 1]int64

// stages returns the duration of each stage and the end-to-end total. A
// record timestamp after the poll (a producer clock ahead of this host's)
// counts as taken at the poll, and a later point found before an earlier
// one counts as that one, so that no stage is negative; the stages then
// sum to the total exactly, in integer nanoseconds.
func (pts lagPoints) stages() (d [numStages]int64, total int64) {
	pts[0] = min(pts[0], pts[1])
	for i := 2; i < len(pts); i++ {
		pts[i] = max(pts[i], pts[i-1])
	}
	for i := range d {
		d[i] = pts[i+1] - pts[i]
	}
	return d, pts[numStages] - pts[0]
}

// stampPolled records when the batch was polled and its oldest record
// timestamp in Unix milliseconds (see olderMillis), 0 when no record has
// one.
func (b *batchAck) stampPolled(polled time.Time, oldestMillis int64) {
	b.polled = polled
	if oldestMillis > 0 {
		// A wall-clock difference: a record timestamp has no monotonic
		// reading. stages clamps a positive one.
		b.oldest = time.UnixMilli(oldestMillis).Sub(polled)
	}
}

// OldestRecord is the batch's oldest record's Kafka timestamp (zero when
// none had one), for the sink's backlog linger.
func (b *batchAck) OldestRecord() time.Time {
	if b.polled.IsZero() || b.oldest == 0 {
		return time.Time{}
	}
	return b.polled.Add(b.oldest)
}

// olderMillis returns the older of oldest and r's timestamp, in Unix
// milliseconds; 0 stands for none, and a timestamp at or before the epoch
// is taken for none. The poll loop folds it over a batch's records in the
// loop that sizes them, where it costs no further memory access.
func olderMillis(oldest int64, r *kgo.Record) int64 {
	if ms := r.Timestamp.UnixMilli(); ms > 0 && (oldest == 0 || ms < oldest) {
		return ms
	}
	return oldest
}

// lagPoints are the batch's stage boundaries for its rows in a chunk
// inserted at t.
func (b *batchAck) lagPoints(t clickhouse.ChunkTiming) lagPoints {
	since := func(x time.Time) int64 { return int64(x.Sub(b.polled)) }
	var start int64
	if !b.moduleStart.IsZero() {
		start = since(b.moduleStart)
	}
	sealed := since(t.Sealed)
	// moduleEnd is stored once the worker is done with the batch, after
	// every seal that processing made. A chunk sealed meanwhile holds
	// the rows made until its seal: its module stage ends there. Read
	// before or after the store, that gives the same point, since the
	// store comes after any such seal.
	end := b.moduleEnd.Load()
	if end <= 0 || end > sealed {
		end = sealed
	}
	return lagPoints{int64(b.oldest), 0, start, end, sealed, since(t.Taken), since(t.Inserted)}
}

// lagObservers are the lag histograms of one route and table.
type lagObservers struct {
	endToEnd prometheus.Observer
	stages   [numStages]prometheus.Observer
}

// newLagHistograms returns sluice_end_to_end_seconds and
// sluice_stage_seconds.
func newLagHistograms() (endToEnd, stages *prometheus.HistogramVec) {
	endToEnd = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_end_to_end_seconds",
		Help: "Age of a polled batch's oldest record (from its Kafka timestamp) when the insert carrying the batch's rows in a chunk was acknowledged; " +
			"one sample per batch and chunk. The stages of sluice_stage_seconds sum to it, sample by sample.",
		Buckets: lagBuckets,
	}, []string{"pipeline", "table"})
	stages = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "sluice_stage_seconds",
		Help: "Time the samples of sluice_end_to_end_seconds spent in one stage: broker (record timestamp to poll), inflight (poll to the batch's first module call), " +
			"module (the batch's processing: module calls, decoding their output), seal (rows waiting in the open block), queue (in the shard queue), " +
			"insert (to the insert's acknowledgement, insert_linger and retries included).",
		Buckets: lagBuckets,
	}, []string{"pipeline", "table", "stage"})
	return endToEnd, stages
}

func (m *metrics) lagObservers(pipeline, table string) *lagObservers {
	o := &lagObservers{endToEnd: m.endToEnd.WithLabelValues(pipeline, table)}
	for i, name := range stageNames {
		o.stages[i] = m.stageSeconds.WithLabelValues(pipeline, table, name)
	}
	return o
}

// observe adds one sample to the end-to-end histogram and each stage's,
// all from the same integer durations, so that the stage histograms' sums
// add up to the end-to-end one's and their counts equal it.
func (o *lagObservers) observe(pts lagPoints) {
	d, total := pts.stages()
	o.endToEnd.Observe(seconds(total))
	for i, s := range o.stages {
		s.Observe(seconds(d[i]))
	}
}

func seconds(ns int64) float64 { return float64(ns) / 1e9 }

// lagFor returns the lag histograms of the route's table t, nil if t is
// not one of its tables.
func (r *route) lagFor(t *clickhouse.Table) *lagObservers {
	for i, rt := range r.schema.Load().tables {
		if rt.Name == t.Name && i < len(r.lag) {
			return r.lag[i]
		}
	}
	return nil
}

// observeChunk is the sink's OnChunkInserted function: one lag sample per
// batch with rows in the chunk. Every batch of a chunk comes from the one
// partition worker that sealed it, so they share a route.
func (p *Pipeline) observeChunk(c *clickhouse.Chunk, t clickhouse.ChunkTiming) {
	for _, a := range c.Acks() {
		if b := heldBatch(a); b != nil && b.p != nil && b.p.route != nil {
			if obs := b.p.route.lagFor(c.Block().Table()); obs != nil {
				obs.observeAcks(c.Acks(), t)
			}
			return
		}
	}
}

// observeAcks adds a sample for each batch among acks.
func (o *lagObservers) observeAcks(acks []clickhouse.Ack, t clickhouse.ChunkTiming) {
	for _, a := range acks {
		if b := heldBatch(a); b != nil {
			o.observe(b.lagPoints(t))
		}
	}
}

// heldBatch is the batch a chunk's ack stands for, nil for another ack.
func heldBatch(a clickhouse.Ack) *batchAck {
	switch a := a.(type) {
	case *batchAck:
		return a
	case *sampledHold:
		return a.batchAck
	}
	return nil
}
