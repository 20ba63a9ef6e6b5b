package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// cluster is a cluster of system.clusters as routing shards uses it.
type cluster struct {
	name   string
	shards []*shard // in shard_num order
}

// Table discovers a table's schema from the server (once per name; see
// Rediscover for a later change). A missing table or a column sluice cannot
// encode is a *PermanentError naming the table, column and type. With
// routing shards the table must be Distributed: Table also reads its
// cluster from system.clusters, parses its sharding key, checks each
// shard's local table and starts a queue per shard; with routing
// distributed it checks the table is Distributed.
func (s *Sink) Table(ctx context.Context, name string) (*Table, error) {
	s.tablesMu.Lock()
	defer s.tablesMu.Unlock()
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	t, err := s.discover(ctx, name, false)
	if err != nil {
		return nil, err
	}
	s.register(t, nil)
	return t, nil
}

// Rediscover reads the table's schema again (and, with routing shards, its
// cluster from system.clusters) and returns the table as it is now: the
// same *Table if nothing changed, else a new version, which Table returns
// from then on. Blocks of an older version stay valid: they are inserted
// with their own column list, adapted to what the server has then (see
// insertPlan). A table Table never returned is discovered as by Table.
func (s *Sink) Rediscover(ctx context.Context, name string) (*Table, bool, error) {
	s.tablesMu.Lock()
	defer s.tablesMu.Unlock()
	old, ok := s.tables[name]
	if !ok {
		t, err := s.discover(ctx, name, false)
		if err != nil {
			return nil, false, err
		}
		t.stats = &tableStats{}
		s.register(t, nil)
		return t, true, nil
	}
	t, err := s.discover(ctx, name, true)
	if err != nil {
		return old, false, err
	}
	if old.sameAs(t) {
		return old, false, nil
	}
	t.stats = old.stats
	t.version = old.version + 1
	s.register(t, old)
	// The old version's queued blocks are adapted before their next
	// insert: a server that does not convert a block's types checks them
	// only over the native protocol (18.16's HTTP interface can crash on a
	// Native body whose types are not the table's).
	plan, err := adaptPlan(old, t.Columns, s.serverSettings(ctx, s.endpoint)&settingNativeConversion != 0)
	if err != nil {
		plan = &insertPlan{err: err}
	}
	for _, sh := range old.shards {
		old.plans.Store(sh, plan)
	}
	s.log.Info("table changed; new blocks use its new schema", "table", t.FullName(), "version", t.version,
		"columns", columnList(t.Insert), "previous", columnList(old.Insert), "shards", len(t.shards))
	return t, true, nil
}

// register makes t the table's current version, replacing old (nil for a
// new name).
func (s *Sink) register(t, old *Table) {
	s.tables[t.Name] = t
	s.mu.Lock()
	if i := slices.Index(s.tableList, old); old != nil && i >= 0 {
		s.tableList[i] = t
	} else {
		s.tableList = append(s.tableList, t)
	}
	s.mu.Unlock()
	s.pools.Store(t, &sync.Pool{New: func() any { return t.newReservedBlock() }})
}

// discover builds the table from the server's schema; reread reads the
// cluster of routing shards again rather than use the one already known.
func (s *Sink) discover(ctx context.Context, name string, reread bool) (*Table, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	full := s.cfg.Database + "." + name
	cols, err := s.describe(ctx, s.endpoint, s.cfg.Database, name)
	if err != nil {
		return nil, fmt.Errorf("table %s: %w", full, err)
	}
	t, err := NewTable(s.cfg.Database, name, cols)
	if err != nil {
		return nil, &PermanentError{Err: err}
	}
	if s.cfg.Transport == TransportHTTP {
		for _, c := range t.Insert {
			err := httpLowCardinality(c.Type)
			if err != nil && s.serverSettings(ctx, s.endpoint)&settingNativeConversion != 0 {
				err = nil // the server converts the inner type's column
			}
			if err != nil {
				return nil, &PermanentError{Err: fmt.Errorf("table %s column %s: %w", full, c.Name, err)}
			}
		}
	}
	switch s.cfg.Routing {
	case RoutingEndpoint:
		t.shards = []*shard{s.single}
		if s.cfg.SortRows == "key" && s.cfg.Transport == TransportNative {
			// Only the native transport sorts (sortable).
			t.sortKey = s.tableSortKey(ctx, t)
		}
	case RoutingDistributed:
		engine, _, err := s.tableEngine(ctx, s.endpoint, s.cfg.Database, name)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", full, err)
		}
		if engine != "Distributed" {
			return nil, &PermanentError{Err: fmt.Errorf("table %s: routing distributed needs a Distributed table, not %s", full, engine)}
		}
		t.shards = []*shard{s.single}
	case RoutingShards:
		if err := s.routeToShards(ctx, t, reread); err != nil {
			return nil, fmt.Errorf("table %s: %w", full, err)
		}
	}
	return t, nil
}

func columnList(cols []Column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c.Name + " " + c.Type
	}
	return strings.Join(parts, ", ")
}

// routeToShards points t at its Distributed table's local table on each
// shard of its cluster, with the Distributed table's sharding key.
func (s *Sink) routeToShards(ctx context.Context, t *Table, reread bool) error {
	engine, engineFull, err := s.tableEngine(ctx, s.endpoint, t.Database, t.Name)
	if err != nil {
		return err
	}
	if engine != "Distributed" {
		return &PermanentError{Err: fmt.Errorf("routing shards needs a Distributed table, not %s", engine)}
	}
	d, err := parseDistributed(engineFull, t.Database)
	if err != nil {
		return &PermanentError{Err: err}
	}
	cl, err := s.loadCluster(ctx, d.Cluster, reread)
	if err != nil {
		return err
	}
	weights := make([]int, len(cl.shards))
	for i, sh := range cl.shards {
		weights[i] = sh.weight
	}
	r, err := newRoute(t.FullName(), t.Insert, d.ShardingKey, weights)
	t.shardingKey = d.ShardingKey
	if err != nil {
		return &PermanentError{Err: err}
	}
	t.route = r
	t.target = newTarget(d.Database, d.Table, t.Insert)
	t.plan = identityPlan(t)
	t.shards = cl.shards
	if err := s.checkLocalTables(ctx, t, cl); err != nil {
		return err
	}
	if reread {
		return nil
	}
	s.log.Info("routing rows to shards", "table", t.FullName(), "local", t.target.fullName(),
		"cluster", cl.name, "shards", len(cl.shards), "weights", weights, "sharding_key", d.ShardingKey)
	return nil
}

// loadCluster reads a cluster's shards and replicas from system.clusters
// (once per name, or again with reread) and registers a queue per shard. A
// shard read again with the same replicas is the one already known, with
// its queue; a new or changed shard gets a queue of its own.
func (s *Sink) loadCluster(ctx context.Context, name string, reread bool) (*cluster, error) {
	s.mu.Lock()
	known, ok := s.clusters[name]
	s.mu.Unlock()
	if ok && !reread {
		return known, nil
	}
	rows, err := s.queryRetry(ctx, s.endpoint, fmt.Sprintf(
		"SELECT toString(shard_num), toString(shard_weight), toString(replica_num), host_name, host_address, toString(port) "+
			"FROM system.clusters WHERE cluster = %s ORDER BY shard_num, replica_num", quoteString(name)))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	if len(rows) == 0 {
		return nil, &PermanentError{Err: fmt.Errorf("cluster %s is not in system.clusters of %s", name, s.endpoint.addr)}
	}
	cl := &cluster{name: name}
	for _, row := range rows {
		if len(row) != 6 {
			return nil, fmt.Errorf("cluster %s: system.clusters returned %d columns", name, len(row))
		}
		num, err1 := strconv.Atoi(row[0])
		weight, err2 := strconv.Atoi(row[1])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("cluster %s: %w", name, err)
		}
		host := row[3]
		if host == "" {
			host = row[4]
		}
		rep, err := s.tr.newReplica(net.JoinHostPort(host, row[5]))
		if err != nil {
			return nil, &PermanentError{Err: fmt.Errorf("cluster %s shard %d: %w", name, num, err)}
		}
		if n := len(cl.shards); n == 0 || cl.shards[n-1].num != num {
			cl.shards = append(cl.shards, s.newShard(fmt.Sprintf("shard %d of cluster %s", num, name), num, weight, nil))
		}
		sh := cl.shards[len(cl.shards)-1]
		sh.replicas = append(sh.replicas, rep)
	}
	for i, sh := range cl.shards {
		if sh.num != i+1 {
			return nil, fmt.Errorf("cluster %s: shard numbers are not 1..%d", name, len(cl.shards))
		}
	}
	var added []*shard
	for i, sh := range cl.shards {
		if known != nil {
			if j := slices.IndexFunc(known.shards, sh.sameAs); j >= 0 {
				cl.shards[i] = known.shards[j]
				continue
			}
		}
		added = append(added, sh)
	}
	if known != nil && slices.Equal(known.shards, cl.shards) {
		return known, nil
	}
	if err := s.addShards(added); err != nil {
		return nil, err
	}
	if known != nil {
		s.log.Info("cluster changed", "cluster", name, "shards", len(cl.shards), "previously", len(known.shards))
	}
	s.mu.Lock()
	s.clusters[name] = cl
	s.mu.Unlock()
	return cl, nil
}

// checkLocalTables checks, on the first replica of each shard that
// answers, that the local table exists with every insert column and type.
// A shard none of whose replicas answers is only logged: inserts retry.
func (s *Sink) checkLocalTables(ctx context.Context, t *Table, cl *cluster) error {
	for _, sh := range cl.shards {
		checked := false
		for _, rep := range sh.replicas {
			qctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
			cols, err := s.describe(qctx, rep, t.target.database, t.target.table)
			var engine string
			if err == nil {
				engine, _, err = s.tableEngine(qctx, rep, t.target.database, t.target.table)
			}
			cancel()
			if err != nil {
				if errors.As(classify(err), new(*PermanentError)) {
					return fmt.Errorf("local table %s on %s replica %s: %w", t.target.fullName(), sh.name, rep.addr, err)
				}
				s.log.Warn("replica not reachable to check the local table", "shard", sh.name,
					"replica", rep.addr, "table", t.target.fullName(), "err", err)
				continue
			}
			have := map[string]string{}
			for _, c := range cols {
				have[c.Name] = strings.TrimSpace(c.Type)
			}
			for _, c := range t.Insert {
				typ, ok := have[c.Name]
				switch {
				case !ok:
					return &PermanentError{Err: fmt.Errorf("local table %s on %s replica %s has no column %s",
						t.target.fullName(), sh.name, rep.addr, c.Name)}
				case typ != strings.TrimSpace(c.Type):
					return &PermanentError{Err: fmt.Errorf("local table %s on %s replica %s: column %s is %s, the Distributed table's is %s",
						t.target.fullName(), sh.name, rep.addr, c.Name, typ, c.Type)}
				}
			}
			if len(sh.replicas) > 1 && !strings.HasPrefix(engine, "Replicated") {
				s.log.Warn("local table is not Replicated: rows reach only the replica they are inserted into",
					"shard", sh.name, "table", t.target.fullName(), "engine", engine)
			}
			checked = true
			break
		}
		if !checked {
			s.log.Warn("no replica of the shard answered; its local table is not checked", "shard", sh.name)
		}
	}
	return nil
}

// describe reads a table's columns (DESCRIBE TABLE keeps table order on
// every server version; 18.16's system.columns has no position).
func (s *Sink) describe(ctx context.Context, rep *replica, database, table string) ([]Column, error) {
	rows, err := s.queryRetry(ctx, rep, fmt.Sprintf("DESCRIBE TABLE %s.%s", quoteIdent(database), quoteIdent(table)))
	if err != nil {
		return nil, err
	}
	var cols []Column
	for _, r := range rows {
		if len(r) < 3 {
			return nil, fmt.Errorf("DESCRIBE returned %d columns", len(r))
		}
		cols = append(cols, Column{Name: r[0], Type: r[1], DefaultKind: r[2]})
	}
	if len(cols) == 0 {
		return nil, &PermanentError{Err: fmt.Errorf("table %s.%s has no columns", database, table)}
	}
	return cols, nil
}

// tableEngine returns a table's engine and engine_full.
func (s *Sink) tableEngine(ctx context.Context, rep *replica, database, table string) (string, string, error) {
	rows, err := s.queryRetry(ctx, rep, fmt.Sprintf(
		"SELECT engine, engine_full FROM system.tables WHERE database = %s AND name = %s",
		quoteString(database), quoteString(table)))
	if err != nil {
		return "", "", err
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return "", "", &PermanentError{Err: fmt.Errorf("table %s.%s is not in system.tables", database, table)}
	}
	return rows[0][0], rows[0][1], nil
}

// tableSortKey is the sorting key of t, a MergeTree-family table, as block
// columns; nil when it is none, is not one sluice can order by, or the
// server could not be asked (then the server sorts, as it would anyway).
func (s *Sink) tableSortKey(ctx context.Context, t *Table) *sortKey {
	rows, err := s.queryRetry(ctx, s.endpoint, fmt.Sprintf(
		"SELECT engine, sorting_key FROM system.tables WHERE database = %s AND name = %s",
		quoteString(t.Database), quoteString(t.Name)))
	if err != nil || len(rows) != 1 || len(rows[0]) != 2 {
		s.log.Debug("table's sorting key not read; its inserts go in arrival order", "table", t.FullName(), "err", err)
		return nil
	}
	engine, expr := rows[0][0], rows[0][1]
	if !strings.HasSuffix(engine, "MergeTree") || strings.TrimSpace(expr) == "" {
		return nil
	}
	k, why := parseSortKey(expr, t)
	if k == nil {
		s.log.Debug("inserts go in arrival order", "table", t.FullName(), "reason", why)
	}
	return k
}

func quoteString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
