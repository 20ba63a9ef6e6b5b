package engine

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

var (
	logNormalizeOnce sync.Once
	logNormalizeWasm []byte
	logNormalizeErr  error
)

// logNormalize builds examples/log-normalize once per test binary.
func logNormalize(t *testing.T) []byte {
	t.Helper()
	logNormalizeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-engine-test")
		if err != nil {
			logNormalizeErr = err
			return
		}
		defer os.RemoveAll(dir)
		out := dir + "/log-normalize.wasm"
		if logNormalizeErr = wasmbuild.Build(context.Background(), wasmbuild.RepoRoot()+"/examples/log-normalize", out); logNormalizeErr == nil {
			logNormalizeWasm, logNormalizeErr = os.ReadFile(out)
		}
	})
	if logNormalizeErr != nil {
		t.Fatal(logNormalizeErr)
	}
	return logNormalizeWasm
}

var (
	workerRuntimeOnce sync.Once
	workerRuntime     *wasmhost.Runtime
	workerRuntimeErr  error
)

// sharedWorkerRuntime is the module host of every workerTestPipeline in
// this test binary, never closed: compiling log-normalize takes wazero
// seconds, and one runtime compiles a module once for all the tests.
func sharedWorkerRuntime(t *testing.T) *wasmhost.Runtime {
	t.Helper()
	workerRuntimeOnce.Do(func() {
		workerRuntime, workerRuntimeErr = wasmhost.NewRuntime(context.Background(),
			wasmhost.Config{Logger: slog.New(slog.DiscardHandler)})
	})
	if workerRuntimeErr != nil {
		t.Fatal(workerRuntimeErr)
	}
	return workerRuntime
}

// versionOnlyServer answers what clickhouse.New asks over HTTP, so that a
// sink exists for tests that never insert.
func versionOnlyServer(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "24.8.1.1\n")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// workerTestPipeline is a pipeline with one route of log-normalize and no
// tables (so that every instance refuses its init), a sink that never
// inserts and a Kafka client that never dials: enough to run partition
// workers without servers.
func workerTestPipeline(t *testing.T, maxTraps int, cooldown time.Duration) (*Pipeline, *route) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	p := &Pipeline{
		log: log, byTopic: map[string]*route{}, paused: map[topicPartition]bool{},
		workers: map[topicPartition]*partitionWorker{}, acks: map[topicPartition]*partitionAcks{},
		failed: make(chan struct{}), tracer: noop.NewTracerProvider().Tracer(""), slots: newCallSlots(2),
	}
	p.metrics = newMetrics(p)
	p.workCtx, p.cancelWork = context.WithCancel(ctx)
	t.Cleanup(p.cancelWork)
	var err error
	if p.sink, err = clickhouse.New(ctx, clickhouse.Config{Transport: "http", HTTPAddr: versionOnlyServer(t)}, log); err != nil {
		t.Fatal(err)
	}
	if p.client, err = kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.client.Close)
	p.rt = sharedWorkerRuntime(t)
	m, err := p.rt.Load(ctx, "log-normalize", logNormalize(t))
	if err != nil {
		t.Fatal(err)
	}
	r := &route{name: "log-normalize", topics: []string{"logs"}, maxTraps: maxTraps, trapCooldown: cooldown,
		flow: &flowControl{high: 1 << 30}}
	r.setSchema(newRouteSchema(nil, nil))
	r.activate(&moduleVersion{module: m})
	p.routes = append(p.routes, r)
	p.byTopic["logs"] = r
	return p, r
}

func testBatch(a *partitionAcks, first, n int64) polledBatch {
	var recs []*kgo.Record
	for off := first; off < first+n; off++ {
		recs = append(recs, &kgo.Record{Topic: a.topic, Partition: a.partition, Offset: off, Value: []byte(`{"msg":"x"}`)})
	}
	return polledBatch{recs: recs, ack: a.track(first, eo(first+n-1), 100*n), ctx: context.Background(),
		span: trace.SpanFromContext(context.Background())}
}

// TestFailedBatchIsNeverCommitted: a batch whose processing ends in an
// error (here: the pipeline is stopping while its instance starts) keeps
// its ack, so its offsets never reach the watermark that the final commit
// writes. Before, process released the ack on every path.
func TestFailedBatchIsNeverCommitted(t *testing.T) {
	p, _ := workerTestPipeline(t, 100, time.Hour)
	tp := topicPartition{"logs", 0}
	a := &partitionAcks{topic: tp.topic, partition: tp.partition}
	w := newPartitionWorker(p, tp, a)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.process(ctx, testBatch(a, 0, 5)); err == nil {
		t.Fatal("process succeeded with a cancelled context")
	}
	if wm, ok := a.watermark(); ok {
		t.Fatalf("watermark moved to %d past a batch that was never transformed", wm.Offset)
	}
}

// TestInitFailureCoolsDownWithoutFailing: an instance that fails to start
// is a failure of the module, like a trap: it is counted, the partition
// pauses for the cool-down once the module keeps failing, the start is
// tried again, and nothing fails the pipeline; a worker told to stop while
// paused stops cleanly, its batch uncommitted. Before, the first failed
// start stopped the whole process, and a stop during a cool-down failed it.
func TestInitFailureCoolsDownWithoutFailing(t *testing.T) {
	p, r := workerTestPipeline(t, 2, time.Hour)
	tp := topicPartition{"logs", 0}
	w := p.worker(tp)
	a := w.acks
	w.submit(testBatch(a, 0, 5))

	for {
		if p.modulePaused() != "" {
			break
		}
		select {
		case <-p.failed:
			t.Fatalf("pipeline failed: %v", p.failErr)
		case <-w.stopped:
			t.Fatal("worker stopped on its own")
		case <-time.After(5 * time.Millisecond):
		}
	}
	r.mu.Lock()
	inits := r.failures["init"]
	r.mu.Unlock()
	if inits != 3 {
		t.Errorf("%d init failures counted before the pause, want max_traps_per_minute+1 = 3", inits)
	}
	// A revoke while paused.
	p.stopWorkers(context.Background(), []topicPartition{tp})
	if err := p.failure(); err != nil {
		t.Fatalf("stopping a paused worker failed the pipeline: %v", err)
	}
	if p.modulePaused() != "" {
		t.Errorf("partition still paused after its worker stopped: %s", p.modulePaused())
	}
	if wm, ok := a.watermark(); ok {
		t.Errorf("watermark %d: the untransformed batch was committed", wm.Offset)
	}
	if len(p.allPartitions()) != 0 {
		t.Errorf("worker still registered after it stopped")
	}
	p.workerGroup.Wait()
}

// TestStopWorkersWaitsForCancelledWorker: a worker that does not finish
// within the stop's context is cancelled and waited for before it leaves
// the map, so that no worker outlives its partition.
func TestStopWorkersWaitsForCancelledWorker(t *testing.T) {
	p, _ := workerTestPipeline(t, 0, time.Hour)
	tp := topicPartition{"logs", 0}
	w := p.worker(tp)
	w.submit(testBatch(w.acks, 0, 5))
	for p.modulePaused() == "" {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.stopWorkers(ctx, []topicPartition{tp})
	select {
	case <-w.stopped:
	default:
		t.Fatal("stopWorkers returned before the worker stopped")
	}
	if err := p.failure(); err != nil {
		t.Fatalf("a stopped worker failed the pipeline: %v", err)
	}
}

// TestTakePollGroups: a poll that took max_poll_records leaves its fetch
// group open for the next poll, whose records may share its buffers; a
// poll that took fewer closes the group, and the group holds the batches
// of both.
func TestTakePollGroups(t *testing.T) {
	p, _ := workerTestPipeline(t, 0, time.Hour)
	p.cfg.Kafka.MaxPollRecords = 3
	poll := func(parts map[int32]int) kgo.Fetches {
		var fps []kgo.FetchPartition
		for part, n := range parts {
			fp := kgo.FetchPartition{Partition: part}
			for i := range n {
				fp.Records = append(fp.Records, &kgo.Record{Topic: "logs", Partition: part, Offset: int64(i), Value: []byte(`{"msg":"x"}`)})
			}
			fps = append(fps, fp)
		}
		return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "logs", Partitions: fps}}}}
	}
	g := p.takePoll(poll(map[int32]int{0: 2, 1: 1}), time.Now(), nil)
	if g == nil {
		t.Fatal("a poll of max_poll_records closed its group")
	}
	g.mu.Lock()
	open, batches := g.open, len(g.acks)
	g.mu.Unlock()
	if !open || batches != 2 {
		t.Fatalf("after a poll of max_poll_records: open %v with %d batches, want open with the poll's 2", open, batches)
	}
	if next := p.takePoll(poll(map[int32]int{2: 1}), time.Now(), g); next != nil {
		t.Fatal("a poll of fewer than max_poll_records left a group open")
	}
	g.mu.Lock()
	open, batches, pending := g.open, len(g.acks), g.pending
	g.mu.Unlock()
	if open || batches != 3 || pending != 3 {
		t.Fatalf("after the short poll: open %v, %d batches, %d pending; want closed, 3, 3 (none transformed)", open, batches, pending)
	}
	if g := p.takePoll(poll(map[int32]int{0: 1}), time.Now(), nil); g != nil {
		t.Fatal("a short poll alone left its group open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.stopWorkers(ctx, p.allPartitions())
	p.workerGroup.Wait()
}

// TestMetricsAfterReactivation: activating a binary the route ran before
// (a rollback) keeps one metric series per binary, counting on; before,
// the second series of the same labels made every scrape fail with 500.
func TestMetricsAfterReactivation(t *testing.T) {
	p, r := workerTestPipeline(t, 1, time.Second)
	first := r.cur.Load()
	first.recordsIn.Add(7)
	m, err := p.rt.Load(context.Background(), "log-normalize", logNormalize(t))
	if err != nil {
		t.Fatal(err)
	}
	again := &moduleVersion{module: m}
	if old := r.activate(again); old != first {
		t.Fatal("activate did not return the version it replaced")
	}
	again.recordsIn.Add(3)
	families, err := p.metrics.registry.Gather()
	if err != nil {
		t.Fatalf("scrape after re-activation: %v", err)
	}
	series := 0
	for _, f := range families {
		if f.GetName() != "sluice_module_records_in_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			series++
			if v := m.GetCounter().GetValue(); v != 10 {
				t.Errorf("records in = %v, want 7 + 3 over both activations", v)
			}
		}
	}
	if series != 1 {
		t.Errorf("%d series of sluice_module_records_in_total, want 1", series)
	}
}

// TestQueueKeepsNoTakenBatch: a batch the worker has taken from its queue
// is not kept by the queue while later batches wait there, so that its
// records' fetch buffer is garbage once it is processed. Before, the
// worker took the whole queue and kept it until its last batch was
// processed.
func TestQueueKeepsNoTakenBatch(t *testing.T) {
	p, _ := workerTestPipeline(t, 100, time.Hour)
	tp := topicPartition{"logs", 0}
	a := &partitionAcks{topic: tp.topic, partition: tp.partition}
	w := newPartitionWorker(p, tp, a)
	batch := func(off int64) (polledBatch, weak.Pointer[[64]byte]) {
		buf := new([64]byte)
		b := testBatch(a, off, 1)
		b.recs[0].Value = append(buf[:0], `{"msg":"x"}`...)
		return b, weak.Make(buf)
	}
	first, firstBuf := batch(0)
	second, secondBuf := batch(1)
	w.submit(first)
	w.submit(second)
	first, second = polledBatch{}, polledBatch{}
	if b, ok := w.next(); !ok || b.recs[0].Offset != 0 {
		t.Fatalf("next = offset %v, %v; want the first batch", b.recs, ok)
	}
	runtime.GC()
	runtime.GC()
	if firstBuf.Value() != nil {
		t.Error("the queue still holds the batch taken from it")
	}
	if secondBuf.Value() == nil {
		t.Fatal("the batch still queued was collected")
	}
	if b, ok := w.next(); !ok || b.recs[0].Offset != 1 {
		t.Fatalf("next = %v, %v; want the second batch", b.recs, ok)
	}
	if _, ok := w.next(); ok {
		t.Error("next took a batch from an empty queue")
	}
}
