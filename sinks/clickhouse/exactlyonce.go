package clickhouse

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MinDedupWindow is the deduplication window exactly-once delivery needs
// of every target table: the number of inserts into the table that may
// happen between a segment's first insert and its replay, after a crash,
// with the server still remembering the first one's token.
const MinDedupWindow = 1000

// CheckExactlyOnce reports whether every server t's rows go to drops an
// insert whose insert_deduplication_token it has seen: it takes the token
// (ClickHouse 22.2 and later), and the table it inserts into is a
// MergeTree with non_replicated_deduplication_window, or a Replicated one
// with replicated_deduplication_window, of at least MinDedupWindow. The
// error names the table, the server and the setting to change.
func (s *Sink) CheckExactlyOnce(ctx context.Context, t *Table) error {
	if s.cfg.DedupToken == "off" {
		return fmt.Errorf("clickhouse.dedup_token: off: exactly-once delivery needs the deduplication token")
	}
	if s.cfg.Routing == RoutingDistributed {
		return fmt.Errorf("clickhouse.routing: distributed: a Distributed table forwards inserts on its own and does not keep their tokens; use routing shards (or endpoint) for exactly-once delivery")
	}
	if t.route != nil && t.route.kind == keyRand {
		return fmt.Errorf("table %s: sharding key %s is random: a replay would send a row to another shard; exactly-once delivery needs a deterministic sharding key", t.FullName(), t.route.keyExpr)
	}
	for _, sh := range t.shards {
		if sh == nil {
			continue
		}
		rep := sh.current()
		where := rep.addr + sh.where(rep)
		v, err := s.askSettings(ctx, rep)
		if err != nil {
			return fmt.Errorf("exactly-once delivery: asking the ClickHouse server at %s which settings it takes: %w", where, err)
		}
		if v&settingDedupToken == 0 {
			return fmt.Errorf("exactly-once delivery: the ClickHouse server at %s does not take insert_deduplication_token (ClickHouse 22.2 and later do); use delivery: at_least_once with it", where)
		}
		if err := s.checkDedupWindow(ctx, rep, t.target.database, t.target.table, where); err != nil {
			return err
		}
	}
	return nil
}

// dedupWindowSetting matches a deduplication window setting in a table's
// engine_full.
var dedupWindowSetting = regexp.MustCompile(`\b(non_replicated_deduplication_window|replicated_deduplication_window|replicated_deduplication_window_seconds)\s*=\s*'?(\d+)`)

func (s *Sink) checkDedupWindow(ctx context.Context, rep *replica, database, table, where string) error {
	engine, full, err := s.tableEngine(ctx, rep, database, table)
	if err != nil {
		return err
	}
	name := database + "." + table
	replicated := strings.HasPrefix(engine, "Replicated")
	if !strings.HasSuffix(engine, "MergeTree") {
		return fmt.Errorf("table %s on %s: engine %s does not deduplicate inserts; exactly-once delivery needs a MergeTree-family table", name, where, engine)
	}
	setting := "non_replicated_deduplication_window"
	if replicated {
		setting = "replicated_deduplication_window"
	}
	window, err := s.tableSetting(ctx, rep, full, setting)
	if err != nil {
		return err
	}
	if window < MinDedupWindow {
		return fmt.Errorf("table %s on %s: %s is %d; exactly-once delivery needs at least %d (ALTER TABLE %s MODIFY SETTING %s = %d)",
			name, where, setting, window, MinDedupWindow, name, setting, MinDedupWindow)
	}
	if replicated {
		secs, err := s.tableSetting(ctx, rep, full, "replicated_deduplication_window_seconds")
		if err != nil {
			return err
		}
		if secs < 3600 {
			return fmt.Errorf("table %s on %s: replicated_deduplication_window_seconds is %d; exactly-once delivery needs at least 3600 (ALTER TABLE %s MODIFY SETTING replicated_deduplication_window_seconds = 3600)",
				name, where, secs, name)
		}
	}
	return nil
}

// tableSetting is a MergeTree setting's value for a table: from its own
// SETTINGS clause (engine_full) when it sets it, else the server's default
// from system.merge_tree_settings.
func (s *Sink) tableSetting(ctx context.Context, rep *replica, engineFull, setting string) (int64, error) {
	for _, m := range dedupWindowSetting.FindAllStringSubmatch(engineFull, -1) {
		if m[1] == setting {
			return strconv.ParseInt(m[2], 10, 64)
		}
	}
	rows, err := s.queryRetry(ctx, rep, "SELECT value FROM system.merge_tree_settings WHERE name = "+quoteString(setting))
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("the server at %s has no MergeTree setting %s", rep.addr, setting)
	}
	v, err := strconv.ParseInt(rows[0][0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("MergeTree setting %s on %s: %q is not a number", setting, rep.addr, rows[0][0])
	}
	return v, nil
}
