package engine

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// route is one topics → module → tables path: the whole pipeline without
// tenants, or one tenant pipeline. Its module can be swapped while it runs;
// each partition worker picks up the new version at its next batch.
type route struct {
	tenant, pipeline string // "" without tenants
	name             string // tags the module in logs, errors and dead letters
	topics           []string
	// schema is the route's tables and its module's init config, replaced
	// when a table changes (see routeSchema).
	schema        atomic.Pointer[routeSchema]
	schemaChanges atomic.Int64
	limits        wasmhost.Limits
	// maxTraps and trapCooldown are the crash-loop policy.
	maxTraps     int
	trapCooldown time.Duration
	// flow keeps the route's in-flight bytes under its budget by pausing
	// only the route's topics.
	flow *flowControl
	// lag are the lag histograms of each of tables.
	lag []*lagObservers

	cur atomic.Pointer[moduleVersion] // nil until a module is active
	// loadErr says why the module active in the store could not be loaded
	// at startup; the route waits for another activation meanwhile.
	loadErr atomic.Pointer[string]

	mu       sync.Mutex
	versions []*moduleVersion // the latest load of every binary that ran, for metrics
	failures map[string]int64 // instance failures by cause (a limit, or "trap")
}

// failed counts an instance failure of the route's module by its cause.
func (r *route) failed(trap *wasmhost.TrapError) {
	cause := string(trap.Limit)
	if cause == "" {
		cause = "trap"
	}
	r.failedCause(cause)
}

// failedCause counts a failure of the route's module: a limit, "trap", or
// "init" for an instance that would not start.
func (r *route) failedCause(cause string) {
	r.mu.Lock()
	if r.failures == nil {
		r.failures = map[string]int64{}
	}
	r.failures[cause]++
	r.mu.Unlock()
}

// moduleVersion is one loaded module binary of a route.
type moduleVersion struct {
	module *wasmhost.Module
	*versionCounts
}

// versionCounts count what one module binary (by sha256) transformed in a
// route, over every activation of it.
type versionCounts struct {
	recordsIn, rowsOut atomic.Int64
}

func (r *route) String() string {
	if r.tenant == "" {
		return r.name
	}
	return r.tenant + "/" + r.pipeline
}

// activate makes mv the route's module and returns the one it replaces. A
// binary activated again (a rollback) keeps counting where it left off, in
// one metric series.
func (r *route) activate(mv *moduleVersion) *moduleVersion {
	r.mu.Lock()
	mv.versionCounts = &versionCounts{}
	found := false
	for i, v := range r.versions {
		if v.module.SHA256 == mv.module.SHA256 {
			mv.versionCounts = v.versionCounts
			r.versions[i] = mv
			found = true
			break
		}
	}
	if !found {
		r.versions = append(r.versions, mv)
	}
	r.mu.Unlock()
	return r.cur.Swap(mv)
}

func (r *route) allVersions() []*moduleVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*moduleVersion(nil), r.versions...)
}

// buildRoutes discovers each route's tables and sets up its flow control.
func (p *Pipeline) buildRoutes(ctx context.Context) error {
	cfg := &p.cfg
	if len(cfg.Tenants) == 0 {
		r := &route{name: cfg.Module.Name, topics: cfg.Kafka.Topics, limits: cfg.Module.Limits.wasmhost(),
			maxTraps: cfg.Module.MaxTrapsPerMinute, trapCooldown: cfg.Module.TrapCooldown}
		if err := p.routeTables(ctx, r, cfg.Module.Tables, cfg.Module.Params, "module.tables"); err != nil {
			return err
		}
		p.addRoute(r, cfg.Kafka.MaxInflightBytes)
		return nil
	}
	for _, t := range cfg.Tenants {
		budget := cfg.pipelineBudget(t)
		for _, pl := range t.Pipelines {
			r := &route{tenant: t.ID, pipeline: pl.Name, name: t.ID + "/" + pl.Name, topics: pl.Topics,
				limits:   t.Limits.or(cfg.Module.Limits).wasmhost(),
				maxTraps: cmp.Or(t.MaxTrapsPerMinute, cfg.Module.MaxTrapsPerMinute), trapCooldown: cmp.Or(t.TrapCooldown, cfg.Module.TrapCooldown)}
			key := fmt.Sprintf("tenants[%s].pipelines[%s].tables", t.ID, pl.Name)
			if err := p.routeTables(ctx, r, pl.Tables, pl.Module.Params, key); err != nil {
				return err
			}
			p.addRoute(r, budget)
		}
	}
	return nil
}

func (p *Pipeline) routeTables(ctx context.Context, r *route, names []string, params map[string]string, key string) error {
	var tables []*clickhouse.Table
	for _, name := range names {
		t, err := p.sink.Table(ctx, name)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		tables = append(tables, t)
	}
	r.setSchema(newRouteSchema(tables, params))
	return nil
}

func (p *Pipeline) addRoute(r *route, budget int64) {
	for _, t := range r.schema.Load().tables {
		r.lag = append(r.lag, p.metrics.lagObservers(r.String(), t.FullName()))
	}
	topics := r.topics
	r.flow = &flowControl{
		high:      budget,
		low:       budget / 2,
		queueFull: p.sink.QueueFull,
		pause: func() {
			p.client.PauseFetchTopics(topics...)
			p.log.Debug("fetching paused", "route", r.String(), "inflight_bytes", r.flow.inflight.Load(), "queue_depth", p.sink.QueueDepth())
		},
		resume: func() {
			p.client.ResumeFetchTopics(topics...)
			p.log.Debug("fetching resumed", "route", r.String(), "inflight_bytes", r.flow.inflight.Load())
		},
	}
	p.routes = append(p.routes, r)
	for _, t := range r.topics {
		p.byTopic[t] = r
	}
}

// loadModules loads each route's first module: the store's active version,
// else the configured file. A route with neither waits for an activation.
func (p *Pipeline) loadModules(ctx context.Context) error {
	cfg := &p.cfg
	for i, r := range p.routes {
		var (
			wasm []byte
			from string
			err  error
		)
		if p.store != nil {
			if v, ok := p.store.Active(r.tenant, r.pipeline); ok {
				if wasm, err = p.store.Blob(v.SHA256); err != nil {
					return fmt.Errorf("tenant %s pipeline %s: active module %s: %w", r.tenant, r.pipeline, v.SHA256, err)
				}
				from = "module store " + v.SHA256
			}
		}
		if wasm == nil {
			path, key := cfg.Module.Path, "module.path"
			if r.tenant != "" {
				path = p.tenantPipeline(r).Module.Path
				key = fmt.Sprintf("tenants[%s].pipelines[%s].module.path", r.tenant, r.pipeline)
			}
			if path == "" {
				p.log.Info("no module active yet; the pipeline's topics are consumed once one is activated",
					"tenant", r.tenant, "pipeline", r.pipeline, "topics", r.topics)
				continue
			}
			if wasm, err = os.ReadFile(path); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if !wasmhost.IsWasm(wasm) {
				return fmt.Errorf("%s %s: not a WebAssembly binary", key, path)
			}
			from = path
			if p.quarantinedFile(r, wasm, from) {
				continue
			}
		}
		if r.tenant == "" {
			mv, err := p.loadVersion(ctx, r, wasm)
			if err != nil {
				return fmt.Errorf("%s (%s): %w", r, from, err)
			}
			r.activate(mv)
			continue
		}
		// A tenant's module never stops the process: one that does not
		// compile leaves its pipeline waiting for another activation, one
		// whose instance fails to start runs, and its workers cool down
		// and retry as they do for any failing start.
		m, err := p.rt.LoadWithLimits(ctx, r.name, wasm, r.limits)
		if err != nil {
			msg := fmt.Sprintf("module %s (%s) does not load: %v", r, from, err)
			r.loadErr.Store(&msg)
			p.log.Error("tenant module does not load; its pipeline waits for another activation", "tenant", r.tenant,
				"pipeline", r.pipeline, "from", from, "err", err)
			continue
		}
		if inst, err := m.Instantiate(ctx, r.schema.Load().init); err != nil {
			p.log.Warn("tenant module failed to start; its partitions will retry and cool down", "tenant", r.tenant,
				"pipeline", r.pipeline, "from", from, "err", err)
		} else {
			_ = inst.Close(ctx)
		}
		p.routes[i].activate(&moduleVersion{module: m})
	}
	return nil
}

func (p *Pipeline) tenantPipeline(r *route) TenantPipelineConfig {
	for _, t := range p.cfg.Tenants {
		if t.ID != r.tenant {
			continue
		}
		for _, pl := range t.Pipelines {
			if pl.Name == r.pipeline {
				return pl
			}
		}
	}
	return TenantPipelineConfig{}
}

// loadVersion compiles a module with the route's limits and checks that it
// accepts the route's tables.
func (p *Pipeline) loadVersion(ctx context.Context, r *route, wasm []byte) (*moduleVersion, error) {
	m, err := p.rt.LoadWithLimits(ctx, r.name, wasm, r.limits)
	if err != nil {
		return nil, err
	}
	inst, err := m.Instantiate(ctx, r.schema.Load().init)
	if err != nil {
		return nil, err
	}
	_ = inst.Close(ctx)
	return &moduleVersion{module: m}, nil
}

// activeTopics are the topics of routes with a module.
func (p *Pipeline) activeTopics() []string {
	var out []string
	for _, r := range p.routes {
		if r.cur.Load() != nil {
			out = append(out, r.topics...)
		}
	}
	return out
}

func (p *Pipeline) findRoute(tenant, pipeline string) (*route, error) {
	for _, r := range p.routes {
		if r.tenant == tenant && r.pipeline == pipeline {
			return r, nil
		}
	}
	return nil, fmt.Errorf("tenant %s has no pipeline %s", tenant, pipeline)
}
