package engine

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func eo(off int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: 1, Offset: off} }

// TestWatermarkIsContiguous: the watermark covers only a prefix of batches
// that are all done, whatever order they finish in, and a batch with a
// hold left (a chunk not inserted, a batch that failed) stops it.
func TestWatermarkIsContiguous(t *testing.T) {
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	b1 := a.track(0, eo(9), 100)
	b2 := a.track(10, eo(19), 100)
	b3 := a.track(20, eo(29), 100)
	if _, ok := a.watermark(); ok {
		t.Fatal("watermark before any batch is done")
	}
	b2.hold() // a chunk carries some of b2's rows
	b2.Done() // the worker is done with b2
	b3.Done()
	if _, ok := a.watermark(); ok {
		t.Fatal("watermark moved while the first batch is not done")
	}
	b1.Done()
	if wm, _ := a.watermark(); wm.Offset != 10 {
		t.Fatalf("watermark %d, want 10: b2's chunk is not inserted", wm.Offset)
	}
	b2.Done() // its chunk landed
	if wm, _ := a.watermark(); wm.Offset != 30 {
		t.Fatalf("watermark %d, want 30", wm.Offset)
	}
	if got := budget.inflight.Load(); got != 0 {
		t.Errorf("in-flight %d bytes after every batch is done, want 0", got)
	}
}

// TestAbandonReleasesBudget: a partition given up (revoked or lost) gives
// the bytes of its unfinished batches back to its pipeline's budget, once,
// and a later release of one of them changes neither the budget nor the
// watermark. Without it, every revoke leaks budget until the pipeline
// pauses for good.
func TestAbandonReleasesBudget(t *testing.T) {
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	b1 := a.track(0, eo(9), 100)
	b2 := a.track(10, eo(19), 200)
	b2.addBytes(50) // rows the module made of b2
	b1.Done()
	if got := budget.inflight.Load(); got != 250 {
		t.Fatalf("in-flight %d, want 250", got)
	}
	a.abandon()
	if got := budget.inflight.Load(); got != 0 {
		t.Fatalf("in-flight %d after abandon, want 0", got)
	}
	a.abandon()
	b2.Done()
	if got := budget.inflight.Load(); got != 0 {
		t.Errorf("in-flight %d after a release past abandon, want 0", got)
	}
	if wm, _ := a.watermark(); wm.Offset != 10 {
		t.Errorf("watermark %d after abandon, want it left at 10", wm.Offset)
	}
	if n := a.inflight.Load(); n != 0 {
		t.Errorf("%d batches in flight after abandon, want 0", n)
	}
}

// TestOutputCountsAgainstBudget: the rows a batch became count against
// the budget until the batch is done, so that a module whose output dwarfs
// its input pauses fetching.
func TestOutputCountsAgainstBudget(t *testing.T) {
	paused := false
	budget := &flowControl{high: 1000, low: 500, pause: func() { paused = true }, resume: func() { paused = false }}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	b := a.track(0, eo(0), 10)
	budget.check()
	if paused {
		t.Fatal("paused at 10 bytes")
	}
	b.addBytes(4000)
	budget.check()
	if !paused {
		t.Fatalf("not paused with %d bytes in flight against a budget of 1000", budget.inflight.Load())
	}
	b.Done()
	budget.check()
	if paused || budget.inflight.Load() != 0 {
		t.Errorf("after the batch is done: paused %v, in-flight %d", paused, budget.inflight.Load())
	}
}

// TestTransformedBatchKeepsItsDataOnce: once its worker has transformed a
// batch, the batch gives back the second copy of its records and their
// bookkeeping (recordBytes) and keeps its records' data and its rows
// against the budget until it is done; a batch of an abandoned partition
// gives nothing back twice.
func TestTransformedBatchKeepsItsDataOnce(t *testing.T) {
	rec := &kgo.Record{Key: []byte("k"), Value: make([]byte, 999)}
	if got, want := recordBytes(rec), 2*recordData(rec)+256; got != want || recordData(rec) != 1000 {
		t.Fatalf("recordBytes %d, recordData %d: want 2 × 1000 + 256 and 1000", got, recordData(rec))
	}
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	recs := make([]*kgo.Record, 10)
	for i := range recs {
		recs[i] = &kgo.Record{Key: rec.Key, Value: rec.Value, Offset: int64(i)}
	}
	b := a.trackPolled(recs, time.Now())
	if got, want := budget.inflight.Load(), 10*recordBytes(rec); got != want {
		t.Fatalf("in-flight %d once polled, want %d: the records' recordBytes", got, want)
	}
	b.addBytes(300) // its rows, in an open block
	b.hold()        // a chunk carries them
	b.finish()
	if got, want := budget.inflight.Load(), 10*recordData(rec)+300; got != want {
		t.Fatalf("in-flight %d once transformed, want %d: the records' data once and the rows", got, want)
	}
	b.Done() // the chunk landed
	if got := budget.inflight.Load(); got != 0 {
		t.Fatalf("in-flight %d once done, want 0", got)
	}

	for i := range recs {
		recs[i] = &kgo.Record{Key: rec.Key, Value: rec.Value, Offset: int64(10 + i)}
	}
	b = a.trackPolled(recs, time.Now())
	a.abandon()
	b.finish()
	if got := budget.inflight.Load(); got != 0 {
		t.Errorf("in-flight %d after a batch of an abandoned partition finished, want 0", got)
	}
}

// TestFetchGroupReleasesData: the records' data of a transformed batch
// leaves the budget once every batch polled with it (the fetch group, here
// two partitions of one poll and a batch of the poll after, which the
// first poll's full max_poll_records left open) is transformed and every
// dead letter of theirs produced, not when its rows land; the rows stay
// counted until they do. A batch done or abandoned before its group is
// released gives nothing back twice.
func TestFetchGroupReleasesData(t *testing.T) {
	budget := &flowControl{high: 1 << 30}
	value := make([]byte, 999)
	poll := func(a *partitionAcks, first int64) *batchAck {
		recs := make([]*kgo.Record, 10)
		for i := range recs {
			recs[i] = &kgo.Record{Key: []byte("k"), Value: value, Offset: first + int64(i)}
		}
		return a.trackPolled(recs, time.Now())
	}
	const data, polled = 10 * 1000, 10 * (2*1000 + 256) // one batch's recordData and recordBytes
	in := func(want int64, when string) {
		t.Helper()
		if got := budget.inflight.Load(); got != want {
			t.Fatalf("%s: in-flight %d, want %d", when, got, want)
		}
	}
	p0 := &partitionAcks{topic: "t", partition: 0, budget: budget}
	p1 := &partitionAcks{topic: "t", partition: 1, budget: budget}

	g := newFetchGroup()
	b0, b1 := poll(p0, 0), poll(p1, 0) // one poll, two partitions
	g.add(b0)
	g.add(b1)
	b0.addBytes(300) // b0's rows
	b0.hold()        // in a chunk
	b0.finish()
	in(data+300+polled, "b0 transformed, b1 not")
	b1.hold()
	b1.finish()
	in(2*data+300, "both transformed, the group open (the poll was full)")
	b2 := poll(p0, 10) // the next poll takes the rest of the fetch
	g.add(b2)
	g.close() // and fewer than max_poll_records
	b2.addBytes(200)
	b2.hold()
	g.hold() // b2 dead-letters a record while it is transformed
	b2.finish()
	in(3*data+500, "every batch transformed, a dead letter in flight")
	g.release() // the dead letter is produced
	in(500, "the group released: the rows alone")
	b1.Done()
	b1.Done() // its dead letter landed
	b0.Done()
	in(200, "b0 landed")
	b2.Done()
	in(0, "every batch done")

	// A batch done before its group is released, and one of an
	// abandoned partition, give nothing back twice.
	g = newFetchGroup()
	b3, b4 := poll(p0, 20), poll(p1, 10)
	g.add(b3)
	g.add(b4)
	b3.finish() // no rows: done at once
	in(polled, "b3 done, b4 untransformed")
	p1.abandon()
	in(0, "p1 abandoned")
	b4.finish()
	g.close()
	in(0, "the group released after b3 was done and p1 abandoned")
}

// TestFetchGroupConcurrent: batches of one group finished, dead letters
// held and released and the group closed from many goroutines give each
// batch's data back exactly once, and only once nothing holds the group.
func TestFetchGroupConcurrent(t *testing.T) {
	for round := range 50 {
		budget := &flowControl{high: 1 << 40}
		g := newFetchGroup()
		var batches []*batchAck
		for part := range 8 {
			a := &partitionAcks{topic: "t", partition: int32(part), budget: budget}
			recs := []*kgo.Record{{Value: make([]byte, 100), Offset: int64(round)}}
			b := a.trackPolled(recs, time.Now())
			b.addBytes(10) // its rows
			b.hold()       // in a chunk
			g.add(b)
			batches = append(batches, b)
		}
		var wg sync.WaitGroup
		for _, b := range batches {
			wg.Go(func() {
				g.hold() // a dead letter
				b.finish()
				g.release() // produced
			})
		}
		wg.Go(g.close)
		wg.Wait()
		if got, want := budget.inflight.Load(), int64(10*len(batches)); got != want {
			t.Fatalf("round %d: in-flight %d once every batch is transformed and the group closed, want %d (the rows)", round, got, want)
		}
		for _, b := range batches {
			b.Done()
		}
		if got := budget.inflight.Load(); got != 0 {
			t.Fatalf("round %d: in-flight %d once done", round, got)
		}
	}
}

// TestFetchGroupKeepsOnlyBatchesNotDone: a group that stays open (a
// backlog polled full, poll after poll) keeps the batches it may still
// give data back for, not every batch it ever took; the one not done
// still gives its data back when the group closes.
func TestFetchGroupKeepsOnlyBatchesNotDone(t *testing.T) {
	budget := &flowControl{high: 1 << 40}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	track := func(off int64) *batchAck {
		return a.trackPolled([]*kgo.Record{{Value: make([]byte, 100), Offset: off}}, time.Now())
	}
	g := newFetchGroup()
	held := track(0)
	g.add(held)
	held.addBytes(10) // rows in a chunk not landed
	held.hold()
	held.finish()
	const n = 10_000
	for off := int64(1); off <= n; off++ {
		b := track(off)
		g.add(b)
		b.finish() // no rows: done at once
	}
	if len(g.acks) > 2*minCompact+1 {
		t.Fatalf("an open group of %d batches, all but one done, keeps %d of them", n+1, len(g.acks))
	}
	g.close()
	if got := budget.inflight.Load(); got != 10 {
		t.Fatalf("in-flight %d once the group closed, want 10 (the rows of the batch not done)", got)
	}
}

// ackBatch is a batch an acks test tracks: its offsets, the bytes of its
// records and the leader epoch of its last record (default 1).
type ackBatch struct {
	first, last int64
	bytes       int64
	epoch       int32
}

// ackStep is one event on a partition's batches and what the partition
// shows after it: the watermark to commit (-1 for none), the bytes held
// against the budget and the batches not done.
type ackStep struct {
	op    string // "done" or "hold" on batch, "bytes" (n more on batch), "abandon"
	batch int
	n     int64

	wm       int64
	wmEpoch  int32 // default 1
	inflight int64
	batches  int64
}

func runAckSteps(t *testing.T, batches []ackBatch, steps []ackStep) {
	t.Helper()
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 3, budget: budget}
	var acks []*batchAck
	for _, b := range batches {
		acks = append(acks, a.track(b.first, kgo.EpochOffset{Epoch: cmp.Or(b.epoch, 1), Offset: b.last}, b.bytes))
	}
	for i, s := range steps {
		switch s.op {
		case "done":
			acks[s.batch].Done()
		case "hold":
			acks[s.batch].hold()
		case "bytes":
			acks[s.batch].addBytes(s.n)
		case "abandon":
			a.abandon()
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		what := fmt.Sprintf("step %d (%s %d)", i, s.op, s.batch)
		wm, ok := a.watermark()
		switch {
		case s.wm < 0 && ok:
			t.Errorf("%s: watermark %d, want none", what, wm.Offset)
		case s.wm >= 0 && (!ok || wm != kgo.EpochOffset{Epoch: cmp.Or(s.wmEpoch, 1), Offset: s.wm}):
			t.Errorf("%s: watermark %+v (set %v), want offset %d epoch %d", what, wm, ok, s.wm, cmp.Or(s.wmEpoch, 1))
		}
		if got := budget.inflight.Load(); got != s.inflight {
			t.Errorf("%s: %d bytes against the budget, want %d", what, got, s.inflight)
		}
		if got := a.inflight.Load(); got != s.batches {
			t.Errorf("%s: %d batches in flight, want %d", what, got, s.batches)
		}
	}
}

// TestWatermarkSteps: the watermark, the budget and the count of batches
// in flight after each release, hold and revoke, for completions in and
// out of order. The watermark only ever covers a prefix of batches whose
// every hold is released; a batch that failed (never released) or whose
// rows are still in a chunk stops it.
func TestWatermarkSteps(t *testing.T) {
	three := []ackBatch{{0, 9, 100, 0}, {10, 19, 100, 0}, {20, 29, 100, 0}}
	tests := []struct {
		name    string
		batches []ackBatch
		steps   []ackStep
	}{
		{"in order", three, []ackStep{
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
			{op: "done", batch: 1, wm: 20, inflight: 100, batches: 1},
			{op: "done", batch: 2, wm: 30, inflight: 0, batches: 0},
		}},
		{"reverse order", three, []ackStep{
			{op: "done", batch: 2, wm: -1, inflight: 200, batches: 2},
			{op: "done", batch: 1, wm: -1, inflight: 100, batches: 1},
			{op: "done", batch: 0, wm: 30, inflight: 0, batches: 0},
		}},
		{"a chunk holds the middle batch", three, []ackStep{
			{op: "hold", batch: 1, wm: -1, inflight: 300, batches: 3},
			{op: "done", batch: 1, wm: -1, inflight: 300, batches: 3}, // the worker is done; the chunk is not inserted
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
			{op: "done", batch: 2, wm: 10, inflight: 100, batches: 1},
			{op: "done", batch: 1, wm: 30, inflight: 0, batches: 0}, // the chunk landed
		}},
		{"a batch that failed holds back every later one", three, []ackStep{
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
			{op: "done", batch: 2, wm: 10, inflight: 100, batches: 1},
		}},
		{"holds of two chunks", three, []ackStep{
			{op: "hold", batch: 0, wm: -1, inflight: 300, batches: 3},
			{op: "hold", batch: 0, wm: -1, inflight: 300, batches: 3},
			{op: "done", batch: 0, wm: -1, inflight: 300, batches: 3},
			{op: "done", batch: 0, wm: -1, inflight: 300, batches: 3},
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
		}},
		{"a gap between batches (compaction, transaction markers)", []ackBatch{{0, 9, 100, 0}, {15, 19, 50, 0}}, []ackStep{
			{op: "done", batch: 1, wm: -1, inflight: 100, batches: 1},
			{op: "done", batch: 0, wm: 20, inflight: 0, batches: 0},
		}},
		{"the epoch of the last done batch", []ackBatch{{0, 9, 100, 1}, {10, 19, 100, 2}}, []ackStep{
			{op: "done", batch: 0, wm: 10, wmEpoch: 1, inflight: 100, batches: 1},
			{op: "done", batch: 1, wm: 20, wmEpoch: 2, inflight: 0, batches: 0},
		}},
		{"output counts until its batch is done", three, []ackStep{
			{op: "bytes", batch: 1, n: 4000, wm: -1, inflight: 4300, batches: 3},
			{op: "bytes", batch: 1, n: -5, wm: -1, inflight: 4300, batches: 3}, // ignored
			{op: "done", batch: 1, wm: -1, inflight: 200, batches: 2},
			{op: "done", batch: 0, wm: 20, inflight: 100, batches: 1},
		}},
		{"revoke with a chunk in flight", three, []ackStep{
			{op: "hold", batch: 1, wm: -1, inflight: 300, batches: 3},
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
			{op: "done", batch: 1, wm: 10, inflight: 200, batches: 2},
			{op: "abandon", wm: 10, inflight: 0, batches: 0},
			{op: "done", batch: 1, wm: 10, inflight: 0, batches: 0}, // the chunk lands after the revoke
			{op: "done", batch: 2, wm: 10, inflight: 0, batches: 0},
			{op: "abandon", wm: 10, inflight: 0, batches: 0},
		}},
		{"revoke before anything is done", three, []ackStep{
			{op: "bytes", batch: 2, n: 50, wm: -1, inflight: 350, batches: 3},
			{op: "abandon", wm: -1, inflight: 0, batches: 0},
			{op: "done", batch: 0, wm: -1, inflight: 0, batches: 0},
		}},
		{"revoke after everything is done", three, []ackStep{
			{op: "done", batch: 0, wm: 10, inflight: 200, batches: 2},
			{op: "done", batch: 1, wm: 20, inflight: 100, batches: 1},
			{op: "done", batch: 2, wm: 30, inflight: 0, batches: 0},
			{op: "abandon", wm: 30, inflight: 0, batches: 0},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runAckSteps(t, tc.batches, tc.steps) })
	}
}

// TestWatermarkNeverPassesAnUnlandedRecord releases four batches, each
// held by its worker and by one chunk, in every order there is (2,520),
// and after every release checks the watermark against a model: one past
// the last offset of the longest prefix of batches whose both holds are
// released. The budget must hold exactly the bytes of the batches not done.
func TestWatermarkNeverPassesAnUnlandedRecord(t *testing.T) {
	const n = 4
	batches := [n]ackBatch{{0, 4, 10, 0}, {5, 5, 20, 0}, {6, 99, 40, 0}, {100, 149, 80, 0}}
	orders := 0
	var permute func(order []int, left [n]int)
	permute = func(order []int, left [n]int) {
		if len(order) == 2*n {
			orders++
			checkReleaseOrder(t, batches[:], order)
			return
		}
		for i := range n {
			if left[i] > 0 {
				left[i]--
				permute(append(order, i), left)
				left[i]++
			}
		}
	}
	permute(nil, [n]int{2, 2, 2, 2})
	if orders != 2520 {
		t.Fatalf("checked %d orders, want 8!/2^4 = 2520", orders)
	}
}

func checkReleaseOrder(t *testing.T, batches []ackBatch, order []int) {
	t.Helper()
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	acks := make([]*batchAck, len(batches))
	for i, b := range batches {
		acks[i] = a.track(b.first, eo(b.last), b.bytes)
		acks[i].hold() // a chunk carries some of its rows
	}
	released := make([]int, len(batches))
	for step, i := range order {
		acks[i].Done()
		released[i]++
		prefix, want, held := 0, int64(-1), int64(0)
		for prefix < len(batches) && released[prefix] == 2 {
			want = batches[prefix].last + 1
			prefix++
		}
		for j, b := range batches {
			if released[j] < 2 {
				held += b.bytes
			}
		}
		wm, ok := a.watermark()
		if got := map[bool]int64{true: wm.Offset, false: -1}[ok]; got != want {
			t.Fatalf("order %v, after release %d: watermark %d, want %d", order, step, got, want)
		}
		if got := budget.inflight.Load(); got != held {
			t.Fatalf("order %v, after release %d: budget holds %d bytes, want %d", order, step, got, held)
		}
	}
}

// TestConcurrentReleases: the sink acks chunks from its own goroutines
// while the worker releases its holds; with every hold released, whatever
// the interleaving, the watermark is one past the last record and the
// budget is back to zero (run with -race).
func TestConcurrentReleases(t *testing.T) {
	const batches, chunksPerBatch = 200, 3
	budget := &flowControl{high: 1 << 30}
	a := &partitionAcks{topic: "t", partition: 0, budget: budget}
	acks := make([]*batchAck, batches)
	for i := range acks {
		acks[i] = a.track(int64(i*10), eo(int64(i*10+9)), 64)
		for range chunksPerBatch {
			acks[i].hold()
		}
	}
	var wg sync.WaitGroup
	for c := range chunksPerBatch + 1 { // the chunks' goroutines and the worker's
		order := rand.New(rand.NewPCG(uint64(c), 1)).Perm(batches) // each its own order
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, i := range order {
				acks[i].Done()
			}
		}()
	}
	wg.Wait()
	if wm, ok := a.watermark(); !ok || wm.Offset != batches*10 {
		t.Errorf("watermark %d (set %v), want %d", wm.Offset, ok, batches*10)
	}
	if got := budget.inflight.Load(); got != 0 {
		t.Errorf("budget holds %d bytes, want 0", got)
	}
	if got := a.inflight.Load(); got != 0 {
		t.Errorf("%d batches in flight, want 0", got)
	}
}

// TestRevokeWaitsForInFlightRows: a revoke waits (waitIdle) for the
// partition's batches to be done, commits the watermark and then abandons
// what is left; a batch whose chunk never lands keeps its records out of
// the commit, and gives its bytes back to the budget when abandoned.
func TestRevokeWaitsForInFlightRows(t *testing.T) {
	tests := []struct {
		name     string
		landed   []bool // per batch: its chunk lands before the revoke
		wantIdle bool
		wantWM   int64 // -1 for none
	}{
		{"everything landed", []bool{true, true, true}, true, 30},
		{"the last chunk is stuck", []bool{true, true, false}, false, 20},
		{"the first chunk is stuck", []bool{false, true, true}, false, -1},
		{"nothing landed", []bool{false, false, false}, false, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			budget := &flowControl{high: 1 << 30}
			a := &partitionAcks{topic: "t", partition: 0, budget: budget}
			for i, landed := range tc.landed {
				b := a.track(int64(i*10), eo(int64(i*10+9)), 100)
				b.hold()
				b.finish() // the worker is done with it
				if landed {
					b.Done()
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			if idle := a.waitIdle(ctx); idle != tc.wantIdle {
				t.Errorf("waitIdle = %v, want %v", idle, tc.wantIdle)
			}
			wm, ok := a.watermark()
			if got := map[bool]int64{true: wm.Offset, false: -1}[ok]; got != tc.wantWM {
				t.Errorf("watermark to commit %d, want %d", got, tc.wantWM)
			}
			a.abandon()
			if got := budget.inflight.Load(); got != 0 {
				t.Errorf("budget holds %d bytes after the revoke, want 0", got)
			}
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if idle := a.waitIdle(ctx); !idle {
				t.Errorf("waitIdle after abandon: %d batches in flight, want none", a.inflight.Load())
			}
		})
	}
}

// TestRevokeDoesNotWaitForBatchesTheWorkerDropped: once the worker has
// stopped, a batch it never finished (it stopped in a cool-down, or never
// took the batch) can never be done; waitIdle waits only for what that
// batch still has in flight (a chunk with some of its rows), not for the
// revoke timeout. Before, it waited for the whole timeout, and the revoke
// callback held every other partition's polls as long.
func TestRevokeDoesNotWaitForBatchesTheWorkerDropped(t *testing.T) {
	a := &partitionAcks{topic: "t", partition: 0, budget: &flowControl{high: 1 << 30}}
	done := a.track(0, eo(9), 100)
	done.finish()
	a.track(10, eo(19), 100) // never taken: only the worker's hold
	partial := a.track(20, eo(29), 100)
	partial.hold() // a chunk holds some of its rows; the worker stopped before the rest
	stuck, cancel := context.WithCancel(context.Background())
	cancel()
	if a.waitIdle(stuck) {
		t.Fatal("waitIdle returned while a chunk of the partial batch was in flight")
	}
	partial.Done() // the chunk landed
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !a.waitIdle(ctx) {
		t.Fatal("waitIdle waited out its context for batches the stopped worker dropped")
	}
	if wm, ok := a.watermark(); !ok || wm.Offset != 10 {
		t.Errorf("watermark %d (%v), want 10: the dropped batch holds the rest back", wm.Offset, ok)
	}
}
