package engine

import (
	"testing"

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
