package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Deliveries (Config.Delivery).
const (
	// DeliveryAtLeastOnce commits a record once its rows landed: a crash,
	// a broker restart or a rebalance inserts what was in flight again.
	DeliveryAtLeastOnce = "at_least_once"
	// DeliveryExactlyOnce records every insert's offset range in the
	// group's fenced offset commit before inserting it, and replays a
	// recorded range as the same insert with the same token, which the
	// server drops if the first one landed (docs/adr/0004-exactly-once.md).
	DeliveryExactlyOnce = "exactly_once"
)

// A segment is a run of one partition's offsets, [start, end), whose rows
// go into one insert per table (and shard) of their own, inserted only
// after the segment was recorded in the group's offset commit. sha is the
// module version that made its rows.
type segment struct {
	start, end int64
	sha        string
}

// id names the segment in its inserts' deduplication tokens: the same for
// every replay of it, whatever rows the replay makes.
func (s segment) id(tp topicPartition) string {
	return fmt.Sprintf("%s/%d/%d-%d/%s", tp.topic, tp.partition, s.start, s.end, s.sha)
}

// maxSegmentMetadata is the most a partition's commit metadata may take,
// under the broker's default offset.metadata.max.bytes (4,096). A segment
// that would make it longer waits for a commit to drop older ones, when one
// can (see record).
const maxSegmentMetadata = 3900

// segmentsPrefix starts the commit metadata of exactly-once delivery, with
// its format version.
const segmentsPrefix = "sluice-eo1"

// encodeSegments writes a partition's open segments as commit metadata:
// "sluice-eo1|<sha>,<sha>|<start>:<len>,<gap>:<len>@<i>,…". The first
// segment gives its start offset, each later one its distance from the end
// of the one before (0 when they touch); "@i" indexes the shas, left out for
// the first. A segment of the usual kind takes five or six bytes.
func encodeSegments(segs []segment) string {
	var shas []string
	idx := map[string]int{}
	var b strings.Builder
	prevEnd := int64(0)
	for i, s := range segs {
		k, ok := idx[s.sha]
		if !ok {
			k = len(shas)
			idx[s.sha] = k
			shas = append(shas, s.sha)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s.start-prevEnd, 10))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(s.end-s.start, 10))
		if k != 0 {
			b.WriteByte('@')
			b.WriteString(strconv.Itoa(k))
		}
		prevEnd = s.end
	}
	return segmentsPrefix + "|" + strings.Join(shas, ",") + "|" + b.String()
}

// decodeSegments reads what encodeSegments wrote. Metadata that is not
// sluice's (a commit of at-least-once delivery, or of another client) has
// no segments and is not an error; metadata that starts like sluice's and
// does not parse is.
func decodeSegments(meta string) ([]segment, error) {
	rest, ok := strings.CutPrefix(meta, segmentsPrefix+"|")
	if !ok {
		return nil, nil
	}
	shaList, list, ok := strings.Cut(rest, "|")
	if !ok {
		return nil, fmt.Errorf("segment metadata %q: no segment list", meta)
	}
	if list == "" {
		return nil, nil
	}
	shas := strings.Split(shaList, ",")
	var segs []segment
	prevEnd := int64(0)
	for _, item := range strings.Split(list, ",") {
		rng, k, hasK := strings.Cut(item, "@")
		a, b, ok := strings.Cut(rng, ":")
		gap, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		i := 0
		var err3 error
		if hasK {
			i, err3 = strconv.Atoi(k)
		}
		if !ok || err1 != nil || err2 != nil || err3 != nil || i < 0 || i >= len(shas) || gap < 0 || n <= 0 {
			return nil, fmt.Errorf("segment metadata %q: bad segment %q", meta, item)
		}
		start := prevEnd + gap
		segs = append(segs, segment{start: start, end: start + n, sha: shas[i]})
		prevEnd = start + n
	}
	return segs, nil
}

// eoPartition is a partition's exactly-once state: what its committed
// offset was when this member was assigned it, and its recorded segments
// that the committed offset has not passed, in offset order. Guarded by
// exactlyOnce.mu.
type eoPartition struct {
	base int64 // committed offset at assignment; -1: none
	open []segment
	// replay is the segments recorded before this member owned the
	// partition, which its worker rebuilds; read once by the worker.
	replay []segment
}

// exactlyOnce is the pipeline's exactly-once delivery state.
type exactlyOnce struct {
	// mu serializes the member's offset commits, so that a partition's
	// metadata is never overwritten by an older list, and guards the
	// partitions' eoPartition.
	mu sync.Mutex
	// assigned holds what onAssigned read, until the partition's worker
	// takes it.
	assigned map[topicPartition]*eoPartition
	// committed is closed and replaced after every successful commit,
	// waking workers that wait for room for a segment.
	committed chan struct{}

	recorded, replayed, fenced atomic.Int64
}

func newExactlyOnce() *exactlyOnce {
	return &exactlyOnce{assigned: map[topicPartition]*eoPartition{}, committed: make(chan struct{})}
}

// take hands a partition's state read at assignment to its new worker.
func (eo *exactlyOnce) take(tp topicPartition) *eoPartition {
	eo.mu.Lock()
	defer eo.mu.Unlock()
	st := eo.assigned[tp]
	delete(eo.assigned, tp)
	if st == nil {
		st = &eoPartition{base: -1}
	}
	st.replay = append([]segment(nil), st.open...)
	return st
}

// errFenced is a commit the group coordinator refused because this member
// no longer owns the generation it named: another member owns the
// partition now.
var errFenced = errors.New("offset commit fenced: this member no longer owns the partition")

// onAssigned reads the committed offsets and segments of newly assigned
// partitions before they are fetched. It retries until it has them or the
// client closes; a partition whose state cannot be read is never consumed
// with a guess.
func (p *Pipeline) onAssigned(ctx context.Context, cl *kgo.Client, assigned map[string][]int32) {
	if p.eo == nil || len(assigned) == 0 {
		return
	}
	adm := kadm.NewClient(cl)
	b := time.Duration(100 * time.Millisecond)
	for attempt := 1; ; attempt++ {
		resps, err := adm.FetchOffsets(ctx, p.cfg.Kafka.Group)
		if err == nil {
			err = p.loadSegments(resps, assigned)
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.log.Warn("exactly-once: reading the committed offsets and segments failed; retrying", "attempt", attempt, "err", err, "in", b)
		select {
		case <-ctx.Done():
			return
		case <-time.After(b):
		}
		b = min(2*b, 5*time.Second)
	}
}

func (p *Pipeline) loadSegments(resps kadm.OffsetResponses, assigned map[string][]int32) error {
	loaded := map[topicPartition]*eoPartition{}
	for topic, parts := range assigned {
		for _, part := range parts {
			tp := topicPartition{topic, part}
			st := &eoPartition{base: -1}
			if r, ok := resps.Lookup(topic, part); ok {
				if r.Err != nil {
					return fmt.Errorf("partition %s: %w", tp, r.Err)
				}
				st.base = r.At
				segs, err := decodeSegments(r.Metadata)
				if err != nil {
					return fmt.Errorf("partition %s: %w", tp, err)
				}
				st.open = segs
			}
			loaded[tp] = st
			if len(st.open) > 0 {
				p.log.Info("exactly-once: partition has recorded segments to replay", "partition", tp.String(),
					"committed", st.base, "segments", len(st.open), "from", st.open[0].start, "to", st.open[len(st.open)-1].end)
			}
		}
	}
	p.eo.mu.Lock()
	for tp, st := range loaded {
		p.eo.assigned[tp] = st
	}
	p.eo.mu.Unlock()
	return nil
}

// record adds seg to its partition's open segments and commits them,
// fenced by the member's generation; only once that commit is acknowledged
// may seg be inserted. It retries a commit that fails for a reason other
// than fencing (a broker restart, a rebalance in progress) with backoff
// until ctx ends, and returns errFenced when the coordinator says this
// member no longer owns the partition.
//
// When the metadata would grow past maxSegmentMetadata it waits for a
// commit to drop the oldest segments, but only when that can happen without
// this worker: when the oldest segment ends before floor, the first offset
// of the batch that holds seg's first record (that batch is not done until
// seg lands, and neither are the segments that share it). Otherwise waiting
// would never end, and the segment fails the pipeline, naming the limit.
func (p *Pipeline) record(ctx context.Context, tp topicPartition, a *partitionAcks, seg segment, floor int64) error {
	eo := p.eo
	b := 50 * time.Millisecond
	for {
		eo.mu.Lock()
		st := a.eo
		wm, hasWM := a.watermark()
		open := pruneSegments(st.open, wm, hasWM)
		if len(encodeSegments(append(open, seg))) > maxSegmentMetadata {
			wait := eo.committed
			eo.mu.Unlock()
			if len(open) == 0 || open[0].end > floor {
				return fmt.Errorf("exactly-once: partition %s has %d segments open within one polled batch, more than its commit metadata can record (%d bytes); lower kafka.max_poll_records or raise clickhouse.chunk_bytes",
					tp, len(open)+1, maxSegmentMetadata)
			}
			select {
			case <-wait:
			case <-time.After(p.cfg.Kafka.CommitInterval):
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		st.open = append(open, seg)
		err := p.commitLocked(ctx, []topicPartition{tp})
		if err != nil {
			// Not recorded as far as this member knows: the segment is
			// never inserted. (If the commit did land and only its answer
			// was lost, the next owner replays the segment, whose rows
			// did not land, and lands them.)
			st.open = st.open[:len(st.open)-1]
		}
		eo.mu.Unlock()
		if err == nil {
			eo.recorded.Add(1)
			return nil
		}
		if errors.Is(err, errFenced) {
			eo.fenced.Add(1)
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.log.Warn("exactly-once: recording a segment failed; retrying", "partition", tp.String(),
			"start", seg.start, "end", seg.end, "err", err, "in", b)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(b + time.Duration(rand.Int64N(int64(b/2)))):
		}
		b = min(2*b, 2*time.Second)
	}
}

// pruneSegments drops the segments the watermark passed: every record of
// theirs is committed.
func pruneSegments(segs []segment, wm kgo.EpochOffset, ok bool) []segment {
	if !ok {
		return segs
	}
	n := 0
	for n < len(segs) && segs[n].end <= wm.Offset {
		n++
	}
	return segs[n:]
}

// errNotMember is a commit while this member is not in the group (before
// it joined, or after it left).
var errNotMember = errors.New("not a member of the consumer group yet")

// commitExactlyOnce is commitSync for exactly-once delivery.
func (p *Pipeline) commitExactlyOnce(ctx context.Context, tps []topicPartition) error {
	p.eo.mu.Lock()
	defer p.eo.mu.Unlock()
	err := p.commitLocked(ctx, tps)
	if errors.Is(err, errFenced) {
		p.eo.fenced.Add(1)
	}
	return err
}

// commitLocked commits, for every partition of tps (all tracked ones when
// tps is nil), its watermark (or, before it has one, the offset it was
// assigned at, or its first segment's start) with its open segments as
// metadata, in one OffsetCommit that names this member and its generation.
// Committing every tracked partition (tps nil) with none tracked returns
// nil, a member of the group or not: a member stopped before it joined
// has nothing to commit. A commit of named partitions (recording a
// segment, committing revoked partitions) always needs the membership: a
// segment is never taken as recorded by a non-member.
// Called with eo.mu held.
func (p *Pipeline) commitLocked(ctx context.Context, tps []topicPartition) error {
	memberID, gen := p.client.GroupMetadata()
	member := memberID != "" && gen >= 0
	if !member && tps != nil {
		return errNotMember
	}
	type pending struct {
		st   *eoPartition
		open []segment
	}
	sent := map[topicPartition]pending{}
	topics := map[string]*kmsg.OffsetCommitRequestTopic{}
	p.mu.Lock()
	for tp, a := range p.acks {
		if a.eo == nil || (tps != nil && !containsTP(tps, tp)) {
			continue
		}
		wm, ok := a.watermark()
		open := pruneSegments(a.eo.open, wm, ok)
		offset, epoch := wm.Offset, wm.Epoch
		switch {
		case ok:
		case a.eo.base >= 0:
			offset, epoch = a.eo.base, -1
		case len(open) > 0:
			offset, epoch = open[0].start, -1
		default:
			continue
		}
		t := topics[tp.topic]
		if t == nil {
			t = &kmsg.OffsetCommitRequestTopic{Topic: tp.topic}
			topics[tp.topic] = t
		}
		meta := encodeSegments(open)
		pr := kmsg.NewOffsetCommitRequestTopicPartition()
		pr.Partition, pr.Offset, pr.LeaderEpoch, pr.Metadata = tp.partition, offset, epoch, &meta
		t.Partitions = append(t.Partitions, pr)
		sent[tp] = pending{a.eo, open}
	}
	p.mu.Unlock()
	if len(sent) == 0 {
		return nil
	}
	if !member {
		return errNotMember
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = p.cfg.Kafka.Group
	req.MemberID = memberID
	req.Generation = gen
	if id := p.cfg.Kafka.InstanceID; id != "" {
		req.InstanceID = &id
	}
	for _, t := range topics {
		req.Topics = append(req.Topics, *t)
	}
	resp, err := req.RequestWith(ctx, p.client)
	if err != nil {
		return err
	}
	var failed error
	for _, t := range resp.Topics {
		for _, pr := range t.Partitions {
			tp := topicPartition{t.Topic, pr.Partition}
			if e := kerr.ErrorForCode(pr.ErrorCode); e != nil {
				if errors.Is(e, kerr.UnknownMemberID) || errors.Is(e, kerr.FencedInstanceID) {
					e = fmt.Errorf("%w (%v)", errFenced, e)
				}
				if failed == nil || errors.Is(e, errFenced) {
					failed = fmt.Errorf("commit %s: %w", tp, e)
				}
				continue
			}
			if s, ok := sent[tp]; ok {
				s.st.open = s.open
			}
		}
	}
	if failed == nil {
		close(p.eo.committed)
		p.eo.committed = make(chan struct{})
	}
	return failed
}

// checkExactlyOnce refuses exactly-once delivery unless every route's
// tables drop a repeated insert (see clickhouse.Sink.CheckExactlyOnce).
func (p *Pipeline) checkExactlyOnce(ctx context.Context) error {
	for _, r := range p.routes {
		for _, t := range r.schema.Load().tables {
			if err := p.sink.CheckExactlyOnce(ctx, t); err != nil {
				return fmt.Errorf("delivery: exactly_once: %w", err)
			}
		}
	}
	return nil
}
