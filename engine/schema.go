package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// routeSchema is the schema a route's module runs with: its tables as last
// discovered and the init config built from them. A change of a table
// makes a new routeSchema; each partition worker changes over at its next
// batch: it seals its open blocks, which are inserted with their own
// columns, and starts its module instance again with the new tables.
type routeSchema struct {
	tables []*clickhouse.Table
	init   wasmhost.InitConfig
	// refused says why the route's module refused these tables ("" if it
	// did not): the route's partitions wait, their records uncommitted,
	// for a schema or a module version that it accepts.
	refused string
	// replaced is closed when the route gets a newer schema.
	replaced chan struct{}
}

func newRouteSchema(tables []*clickhouse.Table, params map[string]string) *routeSchema {
	s := &routeSchema{tables: tables, replaced: make(chan struct{})}
	s.init.Params = params
	for _, t := range tables {
		ts := wasmhost.TableSchema{Name: t.Name}
		for _, c := range t.Insert {
			ts.Columns = append(ts.Columns, wasmhost.ColumnSchema{Name: c.Name, Type: c.Type})
		}
		s.init.Tables = append(s.init.Tables, ts)
	}
	return s
}

// setSchema makes s the route's schema and wakes the workers waiting on
// the one it replaces.
func (r *route) setSchema(s *routeSchema) {
	if old := r.schema.Swap(s); old != nil {
		close(old.replaced)
	}
}

// watchSchemas rediscovers every route's tables every
// clickhouse.schema_refresh_interval, and at once when the sink saw an
// insert fail as if a table had changed, until ctx ends (see checkSchemas).
func (p *Pipeline) watchSchemas(ctx context.Context) {
	t := time.NewTicker(p.cfg.ClickHouse.SchemaRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-p.schemaKick:
		}
		p.checkSchemas(ctx)
	}
}

// checkSchemas rediscovers the routes' tables. A route whose tables changed
// gets a new schema once its module accepts it; when the module refuses
// it, the route's partitions pause, visibly (readiness and
// sluice_schema_refused), and the other routes flow. A refused schema is
// tried again at every check, so that a module activated since, or a table
// altered back, resumes the route.
func (p *Pipeline) checkSchemas(ctx context.Context) {
	for _, r := range p.routes {
		cur := r.schema.Load()
		tables := make([]*clickhouse.Table, len(cur.tables))
		changed := false
		for i, t := range cur.tables {
			nt, ch, err := p.sink.Rediscover(ctx, t.Name)
			if err != nil {
				if ctx.Err() == nil {
					p.log.Warn("table schema check failed; trying again at the next one", "route", r.String(),
						"table", t.FullName(), "err", err)
				}
				nt = t
			}
			tables[i] = nt
			changed = changed || ch || nt != t
		}
		if !changed && cur.refused == "" {
			continue
		}
		next := newRouteSchema(tables, cur.init.Params)
		next.refused = p.schemaRefusal(ctx, r, next)
		if !changed && next.refused == cur.refused {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if next.refused != "" {
			p.log.Error("the module refuses the tables' new schema; its pipeline waits, its records uncommitted, for a module or a schema it accepts",
				"route", r.String(), "tables", tableNames(tables), "reason", next.refused)
		} else {
			p.log.Info("tables changed; the pipeline's partitions change over at their next batch", "route", r.String(),
				"tables", tableNames(tables))
		}
		r.schemaChanges.Add(1)
		r.setSchema(next)
	}
}

// schemaRefusal starts an instance of the route's module with s's tables
// and says why it refused them, "" if it did not.
func (p *Pipeline) schemaRefusal(ctx context.Context, r *route, s *routeSchema) string {
	mv := r.cur.Load()
	if mv == nil {
		return ""
	}
	inst, err := mv.module.Instantiate(ctx, s.init)
	if err != nil {
		return fmt.Sprintf("module %s refuses the tables' schema: %v", r, err)
	}
	_ = inst.Close(ctx)
	return ""
}

// kickSchemaCheck is the sink's OnSchemaChange function: the next schema
// check runs now rather than at its interval.
func (p *Pipeline) kickSchemaCheck(string) {
	select {
	case p.schemaKick <- struct{}{}:
	default:
	}
}
