package engine

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// TestBisectedOutputIsSealedAsItComes: a batch whose output is over
// max_output_bytes is bisected into many calls, and the blocks are sealed
// after each of them, so that the open blocks never hold more than
// chunk_bytes plus one call's output. Before, a bisected batch's output all
// piled up in the open blocks until the whole poll was transformed: 64 MiB
// here, under a 4 MiB max_output_bytes and 1 MiB chunks. The sink inserts
// into a real ClickHouse, and every row lands.
func TestBisectedOutputIsSealedAsItComes(t *testing.T) {
	ctx := context.Background()
	e := malformedRowsWorker(t, ctx, false)
	p, w, a, lim, tp := e.p, e.w, e.a, e.lim, e.w.tp
	const n, rowBytes = 64, 1 << 20
	var recs []*kgo.Record
	for off := range int64(n) {
		recs = append(recs, &kgo.Record{Topic: tp.topic, Offset: off, Value: fmt.Appendf(nil, "big:%d", rowBytes)})
	}
	b := polledBatch{recs: recs, ack: a.track(0, eo(n-1), 100*n), ctx: ctx, span: trace.SpanFromContext(ctx)}
	if err := w.process(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.sealAll(ctx); err != nil {
		t.Fatal(err)
	}
	bound := p.sink.Config().ChunkBytes + lim.MaxOutputBytes
	t.Logf("peak open block bytes %d MiB, bound %d MiB, of %d MiB of output", w.peakOpen>>20, bound>>20, n*rowBytes>>20)
	if w.peakOpen > bound {
		t.Errorf("open blocks held %d bytes, over chunk_bytes + max_output_bytes = %d", w.peakOpen, bound)
	}
	for {
		wm, ok := a.watermark()
		if ok && wm.Offset == n {
			break
		}
		select {
		case err := <-e.sinkDone:
			t.Fatalf("sink stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got, err := e.ch.Query(ctx, "SELECT count(), sum(length(value)) FROM adv"); err != nil {
		t.Fatal(err)
	} else if want := fmt.Sprintf("%d\t%d", n, n*rowBytes); strings.TrimSpace(got) != want {
		t.Errorf("adv holds (rows, bytes) %q, want %q", got, want)
	}
}

// TestWorkerKeepsNoRecordBytes: once a batch is transformed, nothing the
// worker keeps points into its records' values or headers, so the buffer
// they were fetched in can be collected when the batch's fetch group gives
// their data back to the budget. Before, the batch the worker hands the
// instance kept every record of its last call until the next call
// overwrote it.
func TestWorkerKeepsNoRecordBytes(t *testing.T) {
	ctx := context.Background()
	e := malformedRowsWorker(t, ctx, false)
	w, a, tp := e.w, e.a, e.w.tp
	const n = 50
	var recs []*kgo.Record
	var bufs []weak.Pointer[[64]byte]
	for off := range int64(n) {
		buf := new([64]byte) // the fetch buffer of the record
		v := fmt.Appendf(buf[:0], "big:%d", 10)
		bufs = append(bufs, weak.Make(buf))
		recs = append(recs, &kgo.Record{Topic: tp.topic, Offset: off, Value: v,
			Headers: []kgo.RecordHeader{{Key: "h", Value: buf[60:62]}}})
	}
	b := polledBatch{recs: recs, ack: a.track(0, eo(n-1), 100*n), ctx: ctx, span: trace.SpanFromContext(ctx)}
	if err := w.process(ctx, b); err != nil {
		t.Fatal(err)
	}
	recs, b = nil, polledBatch{}
	runtime.GC()
	runtime.GC()
	for i, buf := range bufs {
		if buf.Value() != nil {
			t.Fatalf("record %d's buffer is still reachable once its batch is transformed", i)
		}
	}
	runtime.KeepAlive(w)
}

// malformedEnv is a partition worker of topic adv running malformed-rows
// ("big:N" records make N-byte rows) into table adv of a real ClickHouse,
// through a running sink.
type malformedEnv struct {
	p        *Pipeline
	w        *partitionWorker
	a        *partitionAcks
	lim      wasmhost.Limits
	ch       *testinfra.ClickHouse
	sinkDone <-chan error // the sink's Run returned, early
}

// malformedRowsWorker starts a malformedEnv; with lag, the sink's chunk
// timings feed the pipeline's lag metrics.
func malformedRowsWorker(t *testing.T, ctx context.Context, lag bool) *malformedEnv {
	t.Helper()
	ch := testinfra.ClickHouseT(t)
	if err := ch.Exec(ctx, "CREATE TABLE adv (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset"); err != nil {
		t.Fatal(err)
	}
	p, _ := workerTestPipeline(t, 100, time.Hour)
	p.cfg.Module.MaxBatchRecords, p.cfg.Module.MaxBatchBytes = 1000, 1<<20
	var err error
	if p.sink, err = clickhouse.New(ctx, clickhouse.Config{Addr: ch.Addr}, p.log); err != nil {
		t.Fatal(err)
	}
	if lag {
		p.sink.OnChunkInserted(p.observeChunk)
	}
	sinkCtx, stopSink := context.WithCancel(ctx)
	sinkDone, early := make(chan error, 1), make(chan error, 1)
	go func() {
		err := p.sink.Run(sinkCtx)
		if sinkCtx.Err() == nil {
			early <- err
		}
		sinkDone <- err
	}()
	t.Cleanup(func() { stopSink(); <-sinkDone })
	tbl, err := p.sink.Table(ctx, "adv")
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(wasmbuild.BuildT(t, "examples/adversarial/malformed-rows"))
	if err != nil {
		t.Fatal(err)
	}
	lim := wasmhost.Limits{MaxOutputBytes: 4<<20 + 64<<10}
	m, err := p.rt.LoadWithLimits(ctx, "malformed-rows", wasm, lim)
	if err != nil {
		t.Fatal(err)
	}
	r := &route{name: "malformed-rows", topics: []string{"adv"}, limits: lim,
		maxTraps: 100, trapCooldown: time.Hour, flow: &flowControl{high: 1 << 40}}
	r.setSchema(newRouteSchema([]*clickhouse.Table{tbl}, nil))
	if lag {
		r.lag = []*lagObservers{p.metrics.lagObservers(r.String(), tbl.FullName())}
	}
	r.activate(&moduleVersion{module: m})
	p.routes = append(p.routes, r)
	p.byTopic["adv"] = r
	tp := topicPartition{"adv", 0}
	a := &partitionAcks{topic: tp.topic, partition: tp.partition, route: r}
	return &malformedEnv{p: p, w: newPartitionWorker(p, tp, a), a: a, lim: lim, ch: ch, sinkDone: early}
}

// TestLagOfBatchSealedMidway: a batch whose output fills chunks while it
// is still being processed (bisected into calls whose output reaches
// chunk_bytes each, every chunk sealed before the worker is done with the
// batch) gives one sample per chunk, inserted into a real ClickHouse; the
// module stage of each ends at its chunk's seal, so their seal stage is 0
// however the inserts race with the worker, and the stage sums add up to
// the end-to-end sum.
func TestLagOfBatchSealedMidway(t *testing.T) {
	ctx := context.Background()
	e := malformedRowsWorker(t, ctx, true)
	p, w, a, tp := e.p, e.w, e.a, e.w.tp
	const n, rowBytes = 16, 1 << 20
	var recs []*kgo.Record
	polled := time.Now()
	for off := range int64(n) {
		recs = append(recs, &kgo.Record{Topic: tp.topic, Offset: off, Value: fmt.Appendf(nil, "big:%d", rowBytes),
			Timestamp: time.UnixMilli(polled.UnixMilli() - 1000 + off)})
	}
	b := polledBatch{recs: recs, ack: a.track(0, eo(n-1), 100*n), ctx: ctx, span: trace.SpanFromContext(ctx)}
	b.ack.stampPolled(polled, polled.UnixMilli()-1000)
	if err := w.process(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := w.sealAll(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if wm, ok := a.watermark(); ok && wm.Offset == n {
			break
		}
		select {
		case err := <-e.sinkDone:
			t.Fatalf("sink stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	fams, err := p.metrics.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total *dto.Histogram
	stages := map[string]*dto.Histogram{}
	for _, f := range fams {
		for _, mt := range f.Metric {
			switch f.GetName() {
			case "sluice_end_to_end_seconds":
				total = mt.Histogram
			case "sluice_stage_seconds":
				for _, l := range mt.Label {
					if l.GetName() == "stage" {
						stages[l.GetValue()] = mt.Histogram
					}
				}
			}
		}
	}
	chunks := p.sink.Stats().InsertedChunks
	if total == nil || total.GetSampleCount() != uint64(chunks) || chunks < 4 {
		t.Fatalf("end-to-end histogram %v for %d chunks of one batch, want a sample per chunk (at least 4)", total, chunks)
	}
	var sum float64
	for _, name := range stageNames {
		h := stages[name]
		if h.GetSampleCount() != total.GetSampleCount() {
			t.Errorf("stage %s: %d samples, want %d", name, h.GetSampleCount(), total.GetSampleCount())
		}
		sum += h.GetSampleSum()
	}
	if d := math.Abs(sum - total.GetSampleSum()); d > lagSumTolerance*total.GetSampleSum() {
		t.Errorf("stage sums add up to %v, end-to-end sum %v", sum, total.GetSampleSum())
	}
	if s := stages["seal"].GetSampleSum(); s != 0 {
		t.Errorf("chunks sealed mid-batch spent %vs in the seal stage, want 0", s)
	}
	// The oldest record was 1 s old at the poll, to the millisecond.
	if s := stages["broker"].GetSampleSum(); s < float64(chunks) || s > float64(chunks)*1.001 {
		t.Errorf("broker stage sum %vs, want 1 s per chunk", s)
	}
	if stages["module"].GetSampleSum() <= 0 || stages["insert"].GetSampleSum() <= 0 {
		t.Errorf("module stage sum %v, insert stage sum %v", stages["module"].GetSampleSum(), stages["insert"].GetSampleSum())
	}
}
