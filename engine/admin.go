package engine

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/records"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// adminGlue is the pipeline as the admin API's tenancy.Validator and
// tenancy.Activator, which need exported methods the Pipeline itself does
// not offer.
type adminGlue struct{ p *Pipeline }

// tenants maps each tenant to its pipelines' names, for the admin API.
func (p *Pipeline) tenants() map[string][]string {
	out := map[string][]string{}
	for _, r := range p.routes {
		if r.tenant != "" {
			out[r.tenant] = append(out[r.tenant], r.pipeline)
		}
	}
	return out
}

// CheckUpload implements tenancy.Validator: the binary must be WebAssembly
// for a supported ABI version, importing nothing forbidden, and load with
// the tenant's limits.
func (a adminGlue) CheckUpload(ctx context.Context, tenant, pipeline string, wasm []byte) error {
	p := a.p
	r, err := p.findRoute(tenant, pipeline)
	if err != nil {
		return err
	}
	cfg := p.rtConfig
	cfg.Limits = r.limits
	// Named after the pipeline, so that a call the check gets stuck in is
	// put down to it (the call journal records the name).
	return tenancy.CheckWasmAs(ctx, cfg, r.name, wasm)
}

// CheckActivation implements tenancy.Validator: the module compiles with
// the tenant's limits, accepts the pipeline's allowed tables with their
// schemas as the server has them, and, given sample records, transforms
// every one of them into rows those tables accept.
func (a adminGlue) CheckActivation(ctx context.Context, tenant, pipeline string, wasm, sample []byte) error {
	p := a.p
	r, err := p.findRoute(tenant, pipeline)
	if err != nil {
		return err
	}
	// A throwaway runtime: a refused module must not stay loaded. The
	// compilation lands in the cache directory, so Activate reuses it.
	rt, err := wasmhost.NewRuntime(ctx, p.rtConfig)
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	m, err := rt.LoadWithLimits(ctx, r.name, wasm, r.limits)
	if err != nil {
		return err
	}
	sch := r.schema.Load()
	inst, err := m.Instantiate(ctx, sch.init)
	if err != nil {
		return fmt.Errorf("%w (the pipeline's allowed tables: %v)", err, tableNames(sch.tables))
	}
	defer inst.Close(context.Background())
	if len(bytes.TrimSpace(sample)) == 0 {
		return nil
	}
	recs, lines, err := records.ReadJSONL(bytes.NewReader(sample), time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	batch := wasmhost.Batch{Topic: r.topics[0], Records: recs}
	out, err := inst.Transform(ctx, &batch)
	if err != nil {
		return fmt.Errorf("dry run on %d sample records: %w", len(recs), err)
	}
	blocks := make([]*clickhouse.Block, len(sch.tables))
	for i, t := range sch.tables {
		blocks[i] = p.sink.NewBlock(t)
	}
	for i := 0; ; i++ {
		res, ok := out.Next()
		if !ok {
			break
		}
		if res.Err != "" {
			return fmt.Errorf("dry run: sample line %d: the module refused the record: %s", lines[i], res.Err)
		}
		for {
			table, row, ok := res.NextRow()
			if !ok {
				break
			}
			if table >= len(blocks) {
				return fmt.Errorf("dry run: sample line %d: row for table index %d; the pipeline has %d tables", lines[i], table, len(blocks))
			}
			if err := blocks[table].AppendRow(row); err != nil {
				return fmt.Errorf("dry run: sample line %d: row for %s does not fit: %w", lines[i], sch.tables[table].FullName(), err)
			}
		}
	}
	return nil
}

func tableNames(ts []*clickhouse.Table) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.FullName()
	}
	return out
}

// Activate implements tenancy.Activator: it loads the version and swaps it
// in; each of the pipeline's partition workers changes over at its next
// batch, so no record is transformed by both versions. A pipeline that had
// no module starts consuming its topics.
func (a adminGlue) Activate(ctx context.Context, tenant, pipeline string, v tenancy.Version, wasm []byte) error {
	p := a.p
	r, err := p.findRoute(tenant, pipeline)
	if err != nil {
		return err
	}
	mv, err := p.loadVersion(ctx, r, wasm)
	if err != nil {
		return fmt.Errorf("%w: %w", tenancy.ErrModuleRejected, err)
	}
	old := r.activate(mv)
	r.loadErr.Store(nil)
	if sch := r.schema.Load(); sch.refused != "" {
		// The new version accepts the tables the old one refused.
		next := newRouteSchema(sch.tables, sch.init.Params)
		r.setSchema(next)
		p.log.Info("the new module version accepts the tables' schema; the pipeline resumes", "tenant", tenant, "pipeline", pipeline)
	}
	if old == nil {
		p.client.AddConsumeTopics(r.topics...)
	}
	from := ""
	if old != nil {
		from = old.module.SHA256
	}
	p.log.Info("module activated", "tenant", tenant, "pipeline", pipeline, "sha256", mv.module.SHA256, "previous", from)
	return nil
}

// AdminHandler is the module admin API for the configured tenants, nil
// without tenants. audit receives one record per change and per refused
// request.
func (p *Pipeline) AdminHandler(audit *slog.Logger) (http.Handler, error) {
	if p.store == nil {
		return nil, nil
	}
	tokens := map[string][]string{}
	for _, t := range p.cfg.Tenants {
		tokens[t.ID] = t.Tokens
	}
	auth, err := tenancy.NewAuth(p.cfg.Admin.AdminTokens, tokens)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	return tenancy.NewServer(tenancy.ServerOptions{
		Store: p.store, Auth: auth, Tenants: p.tenants(),
		Validator: adminGlue{p}, Activator: adminGlue{p}, Audit: audit,
		MaxModuleBytes: p.cfg.Admin.MaxModuleBytes,
		CheckTimeout:   p.cfg.Admin.CheckTimeout,
		CacheDir:       p.rtConfig.CacheDir,
		// The modules configured from files are loaded by now (New).
		InUse: p.rt.Loaded,
	})
}
