package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
	// eo is the exactly-once delivery state; nil for at least once.
	eo    *exactlyOnce
	stats stats
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
	cfg, err := validated(cfg)
	if err != nil {
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
	if cfg.Delivery == DeliveryExactlyOnce {
		p.eo = newExactlyOnce()
	}
	p.metrics = newMetrics(p)
	p.workCtx, p.cancelWork = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			p.close(context.Background())
		}
	}()

	// Cheap checks first, then ClickHouse, the modules (a large module
	// compiles for a while on a cold cache), then Kafka.
	// A module version the stuck-call watcher named before this start is
	// quarantined (tenants) or refused (module.path) before anything runs.
	if len(cfg.Tenants) == 0 {
		wasm, err := os.ReadFile(cfg.Module.Path)
		if err != nil {
			return nil, fmt.Errorf("module.path: %w", err)
		}
		if !wasmhost.IsWasm(wasm) {
			return nil, fmt.Errorf("module.path %s: not a WebAssembly binary", cfg.Module.Path)
		}
		sum := sha256.Sum256(wasm)
		if err := p.applyStuckCalls(hex.EncodeToString(sum[:])); err != nil {
			return nil, err
		}
	} else {
		var err error
		if p.store, err = tenancy.OpenStore(cfg.Admin.StoreDir); err != nil {
			return nil, fmt.Errorf("admin.store_dir: %w", err)
		}
		if err := p.applyStuckCalls(""); err != nil {
			return nil, err
		}
		p.metrics.registry.MustRegister(quarantineCollector{p.store})
	}

	if p.sink, err = clickhouse.New(ctx, cfg.ClickHouse, log); err != nil {
		return nil, err
	}
	p.sink.OnInsert(p.observeInsert)
	p.sink.OnChunkInserted(p.observeChunk)
	p.sink.OnSchemaChange(p.kickSchemaCheck)
	if err := p.buildRoutes(ctx); err != nil {
		return nil, err
	}
	if p.eo != nil {
		if err := p.checkExactlyOnce(ctx); err != nil {
			return nil, err
		}
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
	p.rtConfig = wasmhost.Config{CacheDir: cacheDir, Logger: log, Journal: o.journal}
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
