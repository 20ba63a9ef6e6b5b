package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// Pipeline is one configured Kafka → module → ClickHouse pipeline.
type Pipeline struct {
	cfg Config
	log *slog.Logger
	rt  *wasmhost.Runtime
	// rtConfig makes throwaway runtimes for checking uploads and
	// activations, so that modules never run do not stay loaded in rt.
	rtConfig wasmhost.Config
	routes   []*route
	byTopic  map[string]*route
	// schemaKick asks watchSchemas to check the tables now.
	schemaKick chan struct{}
	store      *tenancy.Store // nil without tenants
	sink       *clickhouse.Sink
	client     *kgo.Client
	dlq        *deadLetter
	stats      stats
	// slots share the CPU module calls run on among tenants.
	slots *callSlots

	tracer  trace.Tracer
	metrics *metrics

	// polling is true while the poll loop runs; ping caches the last
	// ClickHouse reachability check for readiness.
	polling atomic.Bool
	// drained is set once Run has stopped every worker and the sink and
	// made its final commit: the revoke that leaving the group causes has
	// nothing left to wait for.
	drained atomic.Bool
	// missingTopics are consumed topics the brokers do not know, nil when
	// all exist (see watchTopics).
	missingTopics atomic.Pointer[[]string]
	ping          pingCache

	pausedMu sync.Mutex
	paused   map[topicPartition]bool // partitions paused for a failing module

	mu      sync.Mutex
	workers map[topicPartition]*partitionWorker
	acks    map[topicPartition]*partitionAcks
	// workerGroup counts running partition workers; Run waits for it.
	workerGroup sync.WaitGroup

	// workCtx bounds the partition workers; it ends when the drain gives up
	// or the pipeline fails.
	workCtx    context.Context
	cancelWork context.CancelFunc

	// failed carries the first fatal error of a worker or the sink.
	failOnce sync.Once
	failErr  error
	failed   chan struct{}
}

type topicPartition struct {
	topic     string
	partition int32
}

func (tp topicPartition) String() string { return fmt.Sprintf("%s/%d", tp.topic, tp.partition) }

// New loads the module, connects to ClickHouse and Kafka and checks that the
// module accepts the target tables. Every failure names what failed.
func New(ctx context.Context, cfg Config, log *slog.Logger, opts ...Option) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.tracerProvider == nil {
		o.tracerProvider = otel.GetTracerProvider()
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Pipeline{
		cfg: cfg, log: log,
		workers:    map[topicPartition]*partitionWorker{},
		acks:       map[topicPartition]*partitionAcks{},
		paused:     map[topicPartition]bool{},
		byTopic:    map[string]*route{},
		schemaKick: make(chan struct{}, 1),
		failed:     make(chan struct{}),
		tracer:     o.tracerProvider.Tracer(tracerName),
	}
	p.metrics = newMetrics(p)
	p.workCtx, p.cancelWork = context.WithCancel(context.Background())
	if cfg.MemoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.MemoryLimit)
	}
	ok := false
	defer func() {
		if !ok {
			p.close(context.Background())
		}
	}()

	// Cheap checks first, then ClickHouse, the modules (a large module
	// compiles for a while on a cold cache), then Kafka.
	if len(cfg.Tenants) == 0 {
		wasm, err := os.ReadFile(cfg.Module.Path)
		if err != nil {
			return nil, fmt.Errorf("module.path: %w", err)
		}
		if !wasmhost.IsWasm(wasm) {
			return nil, fmt.Errorf("module.path %s: not a WebAssembly binary", cfg.Module.Path)
		}
	} else {
		var err error
		if p.store, err = tenancy.OpenStore(cfg.Admin.StoreDir); err != nil {
			return nil, fmt.Errorf("admin.store_dir: %w", err)
		}
	}

	var err error
	if p.sink, err = clickhouse.New(ctx, cfg.ClickHouse, log); err != nil {
		return nil, err
	}
	p.sink.OnInsert(p.observeInsert)
	p.sink.OnChunkInserted(p.observeChunk)
	p.sink.OnSchemaChange(p.kickSchemaCheck)
	if err := p.buildRoutes(ctx); err != nil {
		return nil, err
	}
	// Kafka before the modules: compiling a large module on a cold cache
	// takes a while, and an unreachable broker should be reported within
	// kafka.connect_timeout.
	if err := pingKafka(ctx, cfg.Kafka); err != nil {
		return nil, err
	}
	cacheDir := cfg.Module.CacheDir
	if cacheDir == "off" {
		cacheDir = ""
	}
	p.rtConfig = wasmhost.Config{CacheDir: cacheDir, Logger: log}
	p.slots = newCallSlots(cfg.Module.CallSlots)
	if p.rt, err = wasmhost.NewRuntime(ctx, p.rtConfig); err != nil {
		return nil, err
	}
	// A module that refuses its tables fails startup, not the first batch.
	if err := p.loadModules(ctx); err != nil {
		return nil, err
	}
	if p.client, err = p.newClient(); err != nil {
		return nil, err
	}
	if p.dlq, err = newDeadLetter(cfg); err != nil {
		return nil, err
	}

	ok = true
	return p, nil
}

// pingKafka checks that a broker answers within k.ConnectTimeout.
func pingKafka(ctx context.Context, k KafkaConfig) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ClientID(k.ClientID))
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, k.ConnectTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka brokers %v unreachable after %s: %w", k.Brokers, k.ConnectTimeout, err)
	}
	return nil
}

func (p *Pipeline) newClient() (*kgo.Client, error) {
	k := p.cfg.Kafka
	start := kgo.NewOffset().AtStart()
	if k.StartOffset == "latest" {
		start = kgo.NewOffset().AtEnd()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(k.ClientID),
		kgo.ConsumerGroup(k.Group),
		kgo.ConsumeTopics(p.activeTopics()...),
		kgo.ConsumeResetOffset(start),
		kgo.DisableAutoCommit(),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.FetchMaxBytes(k.FetchMaxBytes),
		kgo.FetchMaxPartitionBytes(min(k.FetchMaxBytes, 8<<20)),
		// Resumed partitions are fetched at the next fetch, after the one
		// in flight: keep the wait for an empty fetch short so that a
		// resume takes effect quickly even beside idle topics.
		kgo.FetchMaxWait(k.FetchMaxWait),
		kgo.SessionTimeout(k.SessionTimeout),
	}
	if k.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(k.InstanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return cl, nil
}

// fail records the first fatal error and wakes Run.
func (p *Pipeline) fail(err error) {
	p.failOnce.Do(func() {
		p.failErr = err
		close(p.failed)
	})
}

// failure returns the first fatal error, if there was one.
func (p *Pipeline) failure() error {
	select {
	case <-p.failed:
		return p.failErr
	default:
		return nil
	}
}

// Run consumes until ctx ends (a graceful drain: everything polled is
// inserted and committed within ShutdownTimeout) or a fatal error.
//
// Shutdown order: stop polling (and the commit and flow loops); stop every
// partition worker, which seals and sends what it holds; close the sink,
// whose workers insert what is queued; flush the dead-letter producer; commit
// the watermarks, which only ever cover records that were inserted, filtered
// or dead-lettered. When the drain's share of ShutdownTimeout runs out, the
// workers and the sink are cancelled and waited for, and the final commit
// still runs in the time kept for it. Run returns only after every goroutine
// it started has ended.
func (p *Pipeline) Run(ctx context.Context) error {
	defer p.close(context.Background())

	sinkCtx, cancelSink := context.WithCancel(context.Background())
	defer cancelSink()
	sinkDone := make(chan error, 1)
	go func() { sinkDone <- p.sink.Run(sinkCtx) }()

	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		p.pollLoop(pollCtx)
	}()
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		p.commitLoop(pollCtx)
	}()
	flowDone := make(chan struct{})
	go func() {
		defer close(flowDone)
		// The poll loop also checks after every poll.
		every(pollCtx, 10*time.Millisecond, p.checkFlow)
	}()
	topicsDone := make(chan struct{})
	go func() {
		defer close(topicsDone)
		p.watchTopics(pollCtx)
	}()
	schemasDone := make(chan struct{})
	go func() {
		defer close(schemasDone)
		p.watchSchemas(pollCtx)
	}()

	var (
		runErr      error
		sinkStopped bool
	)
	select {
	case <-ctx.Done():
		p.log.Info("draining: stopping fetches, flushing and committing")
	case <-p.failed:
		runErr = p.failErr
	case err := <-sinkDone:
		sinkStopped = true
		if err == nil {
			err = errors.New("sink stopped unexpectedly")
		}
		runErr = err
	}
	stopPoll()
	<-pollDone
	<-commitDone
	<-flowDone
	<-topicsDone
	<-schemasDone

	start := time.Now()
	commitReserve := min(p.cfg.ShutdownTimeout/5, 5*time.Second)
	drainCtx, cancelDrain := context.WithDeadline(context.Background(), start.Add(p.cfg.ShutdownTimeout-commitReserve))
	defer cancelDrain()
	if runErr == nil {
		// Stop the workers: each seals its chunks and sends them. Then
		// the sink inserts what is queued.
		p.stopWorkers(drainCtx, p.allPartitions())
		p.sink.Close()
		select {
		case err := <-sinkDone:
			sinkStopped = true
			if err != nil {
				runErr = err
			}
		case <-drainCtx.Done():
			runErr = fmt.Errorf("drain did not finish within %s; uncommitted records will be consumed again", p.cfg.ShutdownTimeout)
		}
	}
	// Whatever is still running is abandoned: what it holds stays
	// uncommitted. Wait for it, so that nothing outlives Run.
	p.cancelWork()
	p.stopWorkers(drainCtx, p.allPartitions())
	p.workerGroup.Wait()
	cancelSink()
	if !sinkStopped {
		<-sinkDone
	}
	if err := p.failure(); err != nil && runErr == nil {
		runErr = err
	}

	// Commit what landed, even after a failure: a watermark covers only
	// records inserted, filtered or dead-lettered. The commit gets the
	// time kept for it even when the drain ran out.
	commitCtx, cancelCommit := context.WithDeadline(context.Background(), start.Add(p.cfg.ShutdownTimeout))
	defer cancelCommit()
	if p.dlq != nil {
		// Records in flight to the dead-letter topic hold their batches.
		flushCtx := drainCtx
		if flushCtx.Err() != nil {
			flushCtx = commitCtx
		}
		if err := p.dlq.flush(flushCtx); err != nil && runErr == nil {
			runErr = fmt.Errorf("dead-letter flush: %w", err)
		}
	}
	if err := p.commitSync(commitCtx, nil); err != nil && runErr == nil {
		runErr = err
	}
	p.drained.Store(true)
	p.client.AllowRebalance()
	return runErr
}

func (p *Pipeline) close(ctx context.Context) {
	p.cancelWork()
	if p.client != nil {
		p.client.CloseAllowingRebalance()
	}
	p.dlq.close()
	if p.rt != nil {
		_ = p.rt.Close(ctx)
	}
}

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
			var bytes, oldest int64
			for _, r := range fp.Records {
				bytes += recordBytes(r)
				oldest = olderMillis(oldest, r)
			}
			last := fp.Records[len(fp.Records)-1]
			w := p.worker(topicPartition{fp.Topic, fp.Partition})
			w.acks.hwm.Store(fp.HighWatermark)
			ack := w.acks.track(fp.Records[0].Offset, kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset}, bytes)
			ack.stampPolled(polled, oldest)
			spanCtx, span := p.startConsume(fp)
			ack.span = span.SpanContext()
			w.submit(polledBatch{recs: fp.Records, ack: ack, ctx: spanCtx, span: span})
		})
		p.checkFlow()
		p.client.AllowRebalance()
	}
}

// recordBytes is what a record counts against the in-flight budget when it
// is polled: an estimate of the memory it holds until it is committed. Its
// key, value and headers count twice (the fetched response and the
// decompressed batch) plus 256 bytes of bookkeeping; the rows the module
// makes of it are counted as they are made (batchAck.addBytes), so that a
// module whose output dwarfs its input is bounded by the budget too.
func recordBytes(r *kgo.Record) int64 {
	n := int64(len(r.Key) + len(r.Value))
	for _, h := range r.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	return 2*n + 256
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

// commitLoop commits acknowledged offsets every CommitInterval.
func (p *Pipeline) commitLoop(ctx context.Context) {
	every(ctx, p.cfg.Kafka.CommitInterval, func() {
		if err := p.commitSync(ctx, nil); err != nil && ctx.Err() == nil {
			p.log.Warn("offset commit failed; will retry", "err", err)
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// commitSync commits the watermark of every partition of tps (all tracked
// partitions when tps is nil) that has one, moved since the last commit or
// not: committing an offset again is harmless, and a commit after a
// rebalance or a broker restart must not rely on what an earlier one did.
func (p *Pipeline) commitSync(ctx context.Context, tps []topicPartition) error {
	offsets := map[string]map[int32]kgo.EpochOffset{}
	p.mu.Lock()
	for tp, a := range p.acks {
		if tps != nil && !containsTP(tps, tp) {
			continue
		}
		if eo, ok := a.watermark(); ok {
			if offsets[tp.topic] == nil {
				offsets[tp.topic] = map[int32]kgo.EpochOffset{}
			}
			offsets[tp.topic][tp.partition] = eo
		}
	}
	p.mu.Unlock()
	if len(offsets) == 0 {
		return nil
	}
	var commitErr error
	p.client.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, pr := range t.Partitions {
				if e := kerr.ErrorForCode(pr.ErrorCode); e != nil && commitErr == nil {
					commitErr = fmt.Errorf("commit %s/%d: %w", t.Topic, pr.Partition, e)
				}
			}
		}
	})
	return commitErr
}

func containsTP(tps []topicPartition, tp topicPartition) bool {
	for _, x := range tps {
		if x == tp {
			return true
		}
	}
	return false
}

// onRevoked finishes the revoked partitions' in-flight work within
// RevokeTimeout and commits what was inserted before giving them up.
func (p *Pipeline) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	var tps []topicPartition
	for topic, parts := range revoked {
		for _, part := range parts {
			tps = append(tps, topicPartition{topic, part})
		}
	}
	if p.drained.Load() {
		// Leaving the group after Run's drain and final commit: nothing
		// in flight can land any more.
		p.forget(tps)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Kafka.RevokeTimeout)
	defer cancel()
	p.stopWorkers(ctx, tps)
	for _, tp := range tps {
		p.mu.Lock()
		a := p.acks[tp]
		p.mu.Unlock()
		if a != nil && !a.waitIdle(ctx) {
			p.log.Warn("revoked partition still had rows in flight; they may be consumed again", "partition", tp)
		}
	}
	if err := p.commitSync(ctx, tps); err != nil {
		p.log.Warn("commit on revoke failed", "err", err)
	}
	p.forget(tps)
	p.log.Info("partitions revoked", "partitions", fmt.Sprint(tps))
}

// onLost drops lost partitions without committing: another member owns
// them now.
func (p *Pipeline) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	var tps []topicPartition
	for topic, parts := range lost {
		for _, part := range parts {
			tps = append(tps, topicPartition{topic, part})
		}
	}
	// Another member owns them now: stop at once rather than finish.
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	p.stopWorkers(ctx, tps)
	p.forget(tps)
	p.log.Warn("partitions lost", "partitions", fmt.Sprint(tps))
}

func (p *Pipeline) forget(tps []topicPartition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tp := range tps {
		if a := p.acks[tp]; a != nil {
			a.abandon()
		}
		delete(p.acks, tp)
	}
}

// setModulePaused pauses or resumes fetching a partition whose module keeps
// failing; readiness is false while any partition is paused.
func (p *Pipeline) setModulePaused(tp topicPartition, paused bool) {
	p.pausedMu.Lock()
	defer p.pausedMu.Unlock()
	parts := map[string][]int32{tp.topic: {tp.partition}}
	if paused {
		p.paused[tp] = true
		p.client.PauseFetchPartitions(parts)
	} else {
		delete(p.paused, tp)
		p.client.ResumeFetchPartitions(parts)
	}
}

// Ready reports whether the pipeline is consuming, ClickHouse answers and
// every shard's last insert succeeded, and no partition is paused for a
// failing module; and why not.
func (p *Pipeline) Ready() (bool, string) {
	if !p.polling.Load() {
		return false, "not consuming: starting, draining or stopped"
	}
	if why := p.modulePaused(); why != "" {
		return false, why
	}
	if why := p.topicsMissing(); why != "" {
		return false, why
	}
	for _, r := range p.routes {
		if msg := r.loadErr.Load(); msg != nil {
			return false, *msg
		}
		if why := r.schema.Load().refused; why != "" {
			return false, why
		}
	}
	if msg := p.sink.Failing(); msg != "" {
		return false, "ClickHouse: " + msg
	}
	if err := p.ping.check(func() error { return p.sink.Ping(context.Background(), 2*time.Second) }); err != nil {
		return false, "ClickHouse unreachable: " + err.Error()
	}
	return true, ""
}

func (p *Pipeline) modulePaused() string {
	p.pausedMu.Lock()
	defer p.pausedMu.Unlock()
	if len(p.paused) == 0 {
		return ""
	}
	var tps []string
	for tp := range p.paused {
		tps = append(tps, fmt.Sprintf("%s (module %s)", tp, p.byTopic[tp.topic]))
	}
	sort.Strings(tps)
	return fmt.Sprintf("paused after repeated module failures: %s", strings.Join(tps, ", "))
}

// pingCache runs a reachability check at most once per second; callers in
// between get the last result.
type pingCache struct {
	mu   sync.Mutex
	at   time.Time
	last error
}

func (c *pingCache) check(ping func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < time.Second {
		return c.last
	}
	c.last = ping()
	c.at = time.Now()
	return c.last
}

// stats are the pipeline's counters.
type stats struct {
	recordsIn, rowsOut, recordsErrored, deadLettered, traps, instances atomic.Int64
	modulePauses                                                       atomic.Int64
}

// Stats is a snapshot of the pipeline's counters.
type Stats struct {
	RecordsIn, RowsOut, RecordsErrored, DeadLettered, Traps, Instances int64
	// ModulePauses counts cool-downs of partitions whose module kept
	// failing.
	ModulePauses                     int64
	InflightBytes, PeakInflightBytes int64
	Pauses, Resumes                  int64
	Sink                             clickhouse.Stats
}

// Stats returns the pipeline's counters.
func (p *Pipeline) Stats() Stats {
	return Stats{
		RecordsIn: p.stats.recordsIn.Load(), RowsOut: p.stats.rowsOut.Load(),
		RecordsErrored: p.stats.recordsErrored.Load(),
		DeadLettered:   p.stats.deadLettered.Load(), Traps: p.stats.traps.Load(),
		Instances:         p.stats.instances.Load(),
		ModulePauses:      p.stats.modulePauses.Load(),
		InflightBytes:     p.sumFlow(func(f *flowControl) int64 { return f.inflight.Load() }),
		PeakInflightBytes: p.sumFlow(func(f *flowControl) int64 { return f.peak.Load() }),
		Pauses:            p.sumFlow(func(f *flowControl) int64 { return f.pauses.Load() }),
		Resumes:           p.sumFlow(func(f *flowControl) int64 { return f.resumes.Load() }),
		Sink:              p.sink.Stats(),
	}
}

// checkFlow pauses or resumes each route's topics as its budget demands.
func (p *Pipeline) checkFlow() {
	for _, r := range p.routes {
		r.flow.check()
	}
}

// sumFlow adds up a flow control figure over the routes. A sum of peaks
// bounds the peak of the sum.
func (p *Pipeline) sumFlow(f func(*flowControl) int64) int64 {
	var n int64
	for _, r := range p.routes {
		n += f(r.flow)
	}
	return n
}
