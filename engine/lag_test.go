package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// lagSumTolerance is how far apart, relative to the end-to-end sum, the
// stage histograms' sums may be: float rounding only, since every sample's
// stages sum to its total exactly in integer nanoseconds (docs/operations.md).
const lagSumTolerance = 1e-9

// TestStageArithmetic checks the stage durations of ordered points, of a
// record timestamp from a producer clock ahead of the host's, and of
// points out of order.
func TestStageArithmetic(t *testing.T) {
	ms := int64(time.Millisecond)
	for _, tc := range []struct {
		name   string
		pts    lagPoints
		stages [numStages]int64
		total  int64
	}{
		{"ordered", lagPoints{-900 * ms, 0, 5 * ms, 7 * ms, 150 * ms, 160 * ms, 200 * ms},
			[numStages]int64{900 * ms, 5 * ms, 2 * ms, 143 * ms, 10 * ms, 40 * ms}, 1100 * ms},
		{"timestamp after the poll", lagPoints{30 * ms, 0, 1 * ms, 2 * ms, 3 * ms, 4 * ms, 5 * ms},
			[numStages]int64{0, 1 * ms, 1 * ms, 1 * ms, 1 * ms, 1 * ms}, 5 * ms},
		{"no module start", lagPoints{-ms, 0, 0, 2 * ms, 3 * ms, 4 * ms, 5 * ms},
			[numStages]int64{ms, 0, 2 * ms, ms, ms, ms}, 6 * ms},
		{"taken before sealed", lagPoints{-ms, 0, ms, 2 * ms, 10 * ms, 9 * ms, 12 * ms},
			[numStages]int64{ms, ms, ms, 8 * ms, 0, 2 * ms}, 13 * ms},
	} {
		d, total := tc.pts.stages()
		if d != tc.stages || total != tc.total {
			t.Errorf("%s: stages %v total %d, want %v %d", tc.name, d, total, tc.stages, tc.total)
		}
	}
	// Whatever the points, no stage is negative and the stages sum to the
	// total exactly.
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		var pts lagPoints
		for i := range pts {
			if i != 1 {
				pts[i] = rnd.Int64N(2e10) - 1e9
			}
		}
		d, total := pts.stages()
		var sum int64
		for i, x := range d {
			if x < 0 {
				t.Fatalf("%v: stage %s is %d", pts, stageNames[i], x)
			}
			sum += x
		}
		if sum != total {
			t.Fatalf("%v: stages sum to %d, total %d", pts, sum, total)
		}
		if want := pts[6] - min(pts[0], 0); pts[6] >= max(pts[2], pts[3], pts[4], pts[5], 0) && total != want {
			t.Fatalf("%v: total %d, want the ack minus the origin, %d", pts, total, want)
		}
	}
}

// TestBatchLagPoints checks the points a batch gives for its rows in a
// chunk: its oldest record's timestamp, and a module stage that ends at
// the seal when the chunk was sealed before the worker was done with the
// batch.
func TestBatchLagPoints(t *testing.T) {
	polled := time.Now()
	at := func(d time.Duration) time.Time { return polled.Add(d) }
	ms := time.Millisecond
	recs := []*kgo.Record{{Timestamp: time.UnixMilli(-1)}, {Timestamp: polled.Add(-400 * ms).Round(ms)},
		{Timestamp: polled.Add(-700 * ms).Round(ms)}, {}}
	var oldestMs int64
	for _, r := range recs {
		oldestMs = olderMillis(oldestMs, r)
	}
	if oldestMs != recs[2].Timestamp.UnixMilli() {
		t.Fatalf("oldest timestamp %d, want %d", oldestMs, recs[2].Timestamp.UnixMilli())
	}
	oldest := recs[2].Timestamp
	if ms := olderMillis(0, &kgo.Record{}); ms != 0 {
		t.Fatalf("oldest timestamp of a record without one: %d", ms)
	}
	timing := clickhouse.ChunkTiming{Sealed: at(300 * ms), Taken: at(310 * ms), Inserted: at(350 * ms)}
	for _, tc := range []struct {
		name      string
		oldest    time.Time
		moduleEnd time.Duration // 0: the batch is still being processed
		want      lagPoints
	}{
		{"processed before the seal", oldest, 20 * ms, lagPoints{int64(oldest.Sub(polled)), 0, int64(10 * ms), int64(20 * ms), int64(300 * ms), int64(310 * ms), int64(350 * ms)}},
		{"sealed mid-batch, batch still in process", oldest, 0, lagPoints{int64(oldest.Sub(polled)), 0, int64(10 * ms), int64(300 * ms), int64(300 * ms), int64(310 * ms), int64(350 * ms)}},
		{"sealed mid-batch, batch done since", oldest, 400 * ms, lagPoints{int64(oldest.Sub(polled)), 0, int64(10 * ms), int64(300 * ms), int64(300 * ms), int64(310 * ms), int64(350 * ms)}},
		{"no record timestamp", time.Time{}, 20 * ms, lagPoints{0, 0, int64(10 * ms), int64(20 * ms), int64(300 * ms), int64(310 * ms), int64(350 * ms)}},
	} {
		b := &batchAck{moduleStart: at(10 * ms)}
		var ms int64
		if !tc.oldest.IsZero() {
			ms = tc.oldest.UnixMilli()
		}
		b.stampPolled(polled, ms)
		b.moduleEnd.Store(int64(tc.moduleEnd))
		if got := b.lagPoints(timing); got != tc.want {
			t.Errorf("%s: points %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestObserveAcks checks that a chunk's acks give one sample per batch in
// the end-to-end and every stage histogram, that the stage sums add up to
// the end-to-end sum, and that observing allocates nothing.
func TestObserveAcks(t *testing.T) {
	reg := prometheus.NewRegistry()
	e2e, stages := newLagHistograms()
	reg.MustRegister(e2e, stages)
	m := &metrics{endToEnd: e2e, stageSeconds: stages}
	obs := m.lagObservers("log-normalize", "default.logs")

	polled := time.Now()
	rnd := rand.New(rand.NewPCG(3, 4))
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	var acks []clickhouse.Ack
	var wantSum float64
	for i := range 50 {
		b := &batchAck{moduleStart: polled.Add(time.Duration(rnd.Int64N(1e8)))}
		b.stampPolled(polled, polled.Add(-time.Duration(rnd.Int64N(5e10))).UnixMilli())
		b.moduleEnd.Store(int64(b.moduleStart.Sub(polled)) + rnd.Int64N(1e8))
		if i%3 == 0 {
			b.span = sampled
			acks = append(acks, &sampledHold{batchAck: b, rows: 1})
		} else {
			acks = append(acks, b)
		}
		wantSum -= seconds(int64(b.oldest))
	}
	acks = append(acks, plainAck{}) // not a batch: no sample
	timing := clickhouse.ChunkTiming{Sealed: polled.Add(time.Second), Taken: polled.Add(1100 * time.Millisecond), Inserted: polled.Add(1500 * time.Millisecond)}
	obs.observeAcks(acks, timing)
	wantSum += 50 * 1.5

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hists := map[string]*dto.Histogram{}
	for _, f := range fams {
		for _, mt := range f.Metric {
			key := f.GetName()
			for _, l := range mt.Label {
				if l.GetName() == "stage" {
					key = l.GetValue()
				}
			}
			hists[key] = mt.Histogram
		}
	}
	total := hists["sluice_end_to_end_seconds"]
	if total.GetSampleCount() != 50 {
		t.Fatalf("end-to-end count %d, want 50", total.GetSampleCount())
	}
	if math.Abs(total.GetSampleSum()-wantSum) > lagSumTolerance*wantSum {
		t.Errorf("end-to-end sum %v, want %v", total.GetSampleSum(), wantSum)
	}
	var stageSum float64
	for _, name := range stageNames {
		h := hists[name]
		if h.GetSampleCount() != 50 {
			t.Errorf("stage %s count %d, want 50", name, h.GetSampleCount())
		}
		stageSum += h.GetSampleSum()
	}
	if d := math.Abs(stageSum - total.GetSampleSum()); d > lagSumTolerance*total.GetSampleSum() {
		t.Errorf("stage sums add up to %v, end-to-end sum %v", stageSum, total.GetSampleSum())
	}
	if q := hists["queue"].GetSampleSum(); math.Abs(q-50*0.1) > 1e-9 {
		t.Errorf("queue stage sum %v, want 50 × 100 ms", q)
	}
	if a := testing.AllocsPerRun(100, func() { obs.observeAcks(acks, timing) }); a != 0 {
		t.Errorf("observing a chunk of %d batches: %v allocations", len(acks), a)
	}
}

type plainAck struct{}

func (plainAck) Done() {}

// BenchmarkLagObserve measures the lag metrics' cost: sizing a polled
// batch of 500 records and finding its oldest timestamp, as the poll loop
// does, against sizing it alone, and the samples of a chunk
// holding the rows of 64 batches.
func BenchmarkLagObserve(b *testing.B) {
	now := time.Now()
	recs := make([]*kgo.Record, 500)
	for i := range recs {
		recs[i] = &kgo.Record{Timestamp: time.UnixMilli(now.UnixMilli() - int64(i%37)), Value: make([]byte, 100)}
	}
	b.Run("size-500-records", func(b *testing.B) {
		for b.Loop() {
			var bytes int64
			for _, r := range recs {
				bytes += recordBytes(r)
			}
			_ = bytes
		}
	})
	b.Run("size-and-oldest-500-records", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var bytes, oldest int64
			for _, r := range recs {
				bytes += recordBytes(r)
				oldest = olderMillis(oldest, r)
			}
			(&batchAck{}).stampPolled(now, oldest)
		}
	})
	b.Run("chunk-64-batches", func(b *testing.B) {
		e2e, stages := newLagHistograms()
		obs := (&metrics{endToEnd: e2e, stageSeconds: stages}).lagObservers("p", "t")
		acks := make([]clickhouse.Ack, 64)
		for i := range acks {
			ack := &batchAck{moduleStart: now.Add(time.Millisecond)}
			ack.stampPolled(now, now.Add(-time.Second).UnixMilli())
			ack.moduleEnd.Store(int64(2 * time.Millisecond))
			acks[i] = ack
		}
		timing := clickhouse.ChunkTiming{Sealed: now.Add(time.Second), Taken: now.Add(2 * time.Second), Inserted: now.Add(3 * time.Second)}
		b.ReportAllocs()
		for b.Loop() {
			obs.observeAcks(acks, timing)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/batch")
	})
}
