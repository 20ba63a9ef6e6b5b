package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
)

// serverLogConfig turns on the server logs the rig reads its counters from:
// system.part_log on both servers, and on 18.16 system.query_log (26.9's
// configuration has it already).
func serverLogConfig(server testinfra.Server) (extraConfig, profileSettings string) {
	queryLog, profileSettings := testinfra.QueryLogConfig(server, time.Second)
	return `<part_log><database>system</database><table>part_log</table><flush_interval_milliseconds>1000</flush_interval_milliseconds></part_log>` + queryLog,
		profileSettings
}

// serverCounters are the server's own account of an arm's table, read from
// system.query_log and system.part_log once the arm is over: what the
// inserts cost and how much merging the parts they made caused so far.
type serverCounters struct {
	// Inserts are the INSERT queries into the table (sluice's; the Kafka
	// engine's view writes without one), their rows and the CPU the
	// server's threads spent on them (UserTimeMicroseconds +
	// SystemTimeMicroseconds).
	Inserts          int64   `json:"inserts"`
	InsertedRows     int64   `json:"inserted_rows"`
	InsertCPUSeconds float64 `json:"insert_cpu_s"`
	// InsertRows are the rows of each insert, in the order they started
	// (on 18.16, whose query_log has it to the second, within a second in
	// any order).
	InsertRows []int64 `json:"insert_rows,omitempty"`
	// InsertEvents are the inserts' ProfileEvents, summed, to tell
	// where two arms' inserts of the same rows differ.
	InsertEvents map[string]int64 `json:"insert_profile_events,omitempty"`
	// NewParts are the parts the writes created, and their rows.
	NewParts    int64 `json:"new_parts"`
	NewPartRows int64 `json:"new_part_rows"`
	// Merges are the merges of the table's parts finished by the time of
	// reading, the rows they read, their wall time, and (26.9, whose
	// part_log has ProfileEvents) their CPU.
	Merges           int64   `json:"merges"`
	MergedRows       int64   `json:"merged_rows"`
	MergeSeconds     float64 `json:"merge_s"`
	MergeCPUSeconds  float64 `json:"merge_cpu_s,omitempty"`
	RowsPerNewPart   float64 `json:"rows_per_new_part"`
	MergedPerWritten float64 `json:"merged_rows_per_written_row"`
	Error            string  `json:"error,omitempty"`
}

// serverCounters reads the counters of table after flushing the logs.
func (e *env) serverCounters(ctx context.Context, table string) *serverCounters {
	c := &serverCounters{}
	if err := e.ch.Exec(ctx, "SYSTEM FLUSH LOGS"); err != nil {
		c.Error = "flush logs: " + err.Error()
		return c
	}
	cpu := e.ch.EventSum("UserTimeMicroseconds", "SystemTimeMicroseconds")
	inserts := e.ch.InsertsInto(table)
	out, err := e.query(ctx, fmt.Sprintf("SELECT count(), sum(written_rows), sum(%s) FROM system.query_log WHERE %s FORMAT TSV", cpu, inserts))
	if err != nil {
		c.Error = "query_log: " + err.Error()
		return c
	}
	var insertCPUus int64
	if err := scanTSV(out, &c.Inserts, &c.InsertedRows, &insertCPUus); err != nil {
		c.Error = "query_log: " + err.Error()
		return c
	}
	c.InsertCPUSeconds = float64(insertCPUus) / 1e6
	start := "query_start_time_microseconds"
	if e.server == testinfra.Legacy {
		start = "query_start_time"
	}
	out, err = e.query(ctx, fmt.Sprintf("SELECT written_rows FROM system.query_log WHERE %s ORDER BY %s FORMAT TSV", inserts, start))
	if err == nil {
		c.InsertRows, err = parseInts(out)
	}
	if err != nil {
		c.Error = "query_log: " + err.Error()
		return c
	}
	{
		events := "mapKeys(ProfileEvents) AS k, mapValues(ProfileEvents) AS v"
		if e.server == testinfra.Legacy {
			events = "ProfileEvents.Names AS k, ProfileEvents.Values AS v"
		}
		out, err := e.query(ctx, fmt.Sprintf(`SELECT k, sum(v) FROM system.query_log
ARRAY JOIN %s WHERE %s GROUP BY k FORMAT TSV`, events, inserts))
		if err != nil {
			c.Error = "query_log ProfileEvents: " + err.Error()
			return c
		}
		if c.InsertEvents, err = parseEvents(out); err != nil {
			c.Error = "query_log ProfileEvents: " + err.Error()
			return c
		}
	}
	mergeCPU := "0"
	if e.server == testinfra.Modern {
		mergeCPU = "sumIf(" + cpu + ", toInt8(event_type) = 2)"
	}
	out, err = e.query(ctx, fmt.Sprintf(`SELECT countIf(toInt8(event_type) = 1), sumIf(rows, toInt8(event_type) = 1),
  countIf(toInt8(event_type) = 2), sumIf(rows, toInt8(event_type) = 2), sumIf(duration_ms, toInt8(event_type) = 2), %s
FROM system.part_log WHERE database = currentDatabase() AND table = '%s' FORMAT TSV`, mergeCPU, table))
	if err != nil {
		c.Error = "part_log: " + err.Error()
		return c
	}
	var mergeMs, mergeCPUus int64
	if err := scanTSV(out, &c.NewParts, &c.NewPartRows, &c.Merges, &c.MergedRows, &mergeMs, &mergeCPUus); err != nil {
		c.Error = "part_log: " + err.Error()
		return c
	}
	c.MergeSeconds, c.MergeCPUSeconds = float64(mergeMs)/1e3, float64(mergeCPUus)/1e6
	if c.NewParts > 0 {
		c.RowsPerNewPart = float64(c.NewPartRows) / float64(c.NewParts)
	}
	if c.NewPartRows > 0 {
		c.MergedPerWritten = float64(c.MergedRows) / float64(c.NewPartRows)
	}
	return c
}

// parseEvents parses TSV lines of a name and an integer.
func parseEvents(out string) (map[string]int64, error) {
	m := map[string]int64{}
	for line := range strings.Lines(strings.TrimSpace(out)) {
		name, num, ok := strings.Cut(strings.TrimSpace(line), "\t")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("line %q: want a name and an integer", line)
		}
		m[name] = v
	}
	return m, nil
}

// eventDiffs lists the ProfileEvents of a's inserts that differ most from
// b's, per row of each, the largest differences first: at most n.
func eventDiffs(a, b *serverCounters, n int) []string {
	if a == nil || b == nil || a.InsertedRows == 0 || b.InsertedRows == 0 {
		return nil
	}
	type diff struct {
		name   string
		pa, pb float64
	}
	var ds []diff
	for name := range a.InsertEvents {
		ds = append(ds, diff{name, float64(a.InsertEvents[name]) / float64(a.InsertedRows), float64(b.InsertEvents[name]) / float64(b.InsertedRows)})
	}
	for name, v := range b.InsertEvents {
		if _, ok := a.InsertEvents[name]; !ok {
			ds = append(ds, diff{name, 0, float64(v) / float64(b.InsertedRows)})
		}
	}
	rel := func(d diff) float64 { return math.Abs(d.pa-d.pb) / math.Max(math.Max(d.pa, d.pb), 1e-12) }
	// Counters of time and bytes dwarf counts: rank by relative
	// difference, among the counters with at least one event per 1,000 rows.
	ds = slices.DeleteFunc(ds, func(d diff) bool { return math.Max(d.pa, d.pb) < 1e-3 || rel(d) < 0.1 })
	slices.SortFunc(ds, func(x, y diff) int { return cmp.Compare(rel(y), rel(x)) })
	var lines []string
	for _, d := range ds[:min(n, len(ds))] {
		lines = append(lines, fmt.Sprintf("%s %.4g vs %.4g per row", d.name, d.pa, d.pb))
	}
	return lines
}

// scanTSV parses one TSV line of integers into dst.
func scanTSV(out string, dst ...*int64) error {
	fields := strings.Split(strings.TrimSpace(out), "\t")
	if len(fields) != len(dst) {
		return fmt.Errorf("want %d fields, got %q", len(dst), out)
	}
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return fmt.Errorf("field %d of %q: %w", i, out, err)
		}
		*dst[i] = v
	}
	return nil
}

func (c *serverCounters) String() string {
	if c == nil {
		return "-"
	}
	if c.Error != "" {
		return "server counters: " + c.Error
	}
	return fmt.Sprintf("server: %d inserts (%.1f CPU-s), %d new parts (%.0f rows each), %d merges of %d rows (%.1f s, %.1f CPU-s; %.2f merged per written row)",
		c.Inserts, c.InsertCPUSeconds, c.NewParts, c.RowsPerNewPart, c.Merges, c.MergedRows, c.MergeSeconds, c.MergeCPUSeconds, c.MergedPerWritten)
}

// parseInts reads one integer a line.
func parseInts(tsv string) ([]int64, error) {
	var ns []int64
	for _, l := range strings.Fields(tsv) {
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", l)
		}
		ns = append(ns, n)
	}
	return ns, nil
}
