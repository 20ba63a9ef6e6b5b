package sensor

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/wasmhost"
)

// DDL is the ClickHouse 18.16 variant of the workload's target table: no
// DateTime64 and no non_replicated_deduplication_window on 18.16, so
// batch_ts is a DateTime plus batch_ts_ms UInt16 (the millisecond part),
// send_ts_us an Int64 and ingest_ts a DateTime MATERIALIZED now(); the
// column order and ORDER BY are otherwise the reference's.
func DDL(table string) string {
	return "CREATE TABLE " + table + " (" + eventColumns + `
  batch_ts DateTime, batch_ts_ms UInt16, send_ts_us Int64,
  ingest_ts DateTime MATERIALIZED now()
) ENGINE = MergeTree ` + orderBy
}

// eventColumns are the columns before the timestamps, the same in DDL and
// ModernDDL; orderBy is their sort key.
const (
	eventColumns = `
  batch_id UInt64, event_seq UInt16,
  sensor LowCardinality(String), region LowCardinality(String),
  name_upper LowCardinality(String), unit LowCardinality(String),
  value Int64, value_scaled Int64, quality Nullable(Float64),
  tags Array(LowCardinality(String)),`
	orderBy = "ORDER BY (sensor, batch_ts, batch_id, event_seq)"
)

// Columns are DDL's columns as the host hands them to the module at init
// (ingest_ts, which ClickHouse fills, left out).
var Columns = []wasmhost.ColumnSchema{
	{Name: "batch_id", Type: "UInt64"}, {Name: "event_seq", Type: "UInt16"},
	{Name: "sensor", Type: "LowCardinality(String)"}, {Name: "region", Type: "LowCardinality(String)"},
	{Name: "name_upper", Type: "LowCardinality(String)"}, {Name: "unit", Type: "LowCardinality(String)"},
	{Name: "value", Type: "Int64"}, {Name: "value_scaled", Type: "Int64"}, {Name: "quality", Type: "Nullable(Float64)"},
	{Name: "tags", Type: "Array(LowCardinality(String))"},
	{Name: "batch_ts", Type: "DateTime"}, {Name: "batch_ts_ms", Type: "UInt16"}, {Name: "send_ts_us", Type: "Int64"},
}

// ModernDDL is the reference table of a modern ClickHouse (DateTime64),
// which the module also writes; this machine's 18.16 cannot create it.
func ModernDDL(table string) string {
	return "CREATE TABLE " + table + " (" + eventColumns + `
  batch_ts DateTime64(3), send_ts DateTime64(6),
  ingest_ts DateTime64(6) MATERIALIZED now64(6)
) ENGINE = MergeTree ` + orderBy + `
SETTINGS non_replicated_deduplication_window = 1000`
}

// gateColumns are the aggregates GateSQL selects, in Landed's field order
// after count and distinct.
const gateColumns = `sum(batch_id), sum(toUInt64(event_seq)), sum(value), sum(value_scaled),
  sum(cityHash64(sensor)), sum(cityHash64(region)), sum(cityHash64(name_upper)), sum(cityHash64(unit)),
  sum(length(tags)), sum(arraySum(arrayMap(x -> cityHash64(x), tags))),
  countIf(isNull(quality)), sumIf(batch_id*100+event_seq, isNull(quality)),
  sumIf(cityHash64(reinterpretAsString(assumeNotNull(quality))), isNotNull(quality)),
  sum(toUInt64(batch_ts)), sum(toUInt64(batch_ts_ms)), sum(send_ts_us)`

// CountSQL counts the rows and the distinct (batch_id, event_seq) of table.
func CountSQL(table string) string { return CountPartSQL(table, 1, 0) }

// CountPartSQL is CountSQL over the rows whose batch_id is part modulo
// parts: the parts' counts add up to the table's, distinct ones too, as
// a batch_id falls in one part. uniqExact keeps every distinct key, so a
// large table is counted in parts to bound the server's memory (a 69M-row
// table needs more than the 4 GB a query may use in one). The key is one
// UInt64 (event_seq is a UInt16), half the state of the pair's hash.
func CountPartSQL(table string, parts, part int) string {
	where := ""
	if parts > 1 {
		where = fmt.Sprintf(" WHERE batch_id %% %d = %d", parts, part)
	}
	return "SELECT count(), uniqExact(batch_id * 65536 + event_seq) FROM " + table + where + " FORMAT TSV"
}

// GateSQL computes the gate's aggregates over the distinct rows of table:
// when the table has duplicates, over one row per (batch_id, event_seq).
func GateSQL(table string, duplicates bool) string {
	from := table
	if duplicates {
		from = "(SELECT * FROM " + table + " LIMIT 1 BY batch_id, event_seq)"
	}
	return "SELECT " + gateColumns + " FROM " + from + " FORMAT TSV"
}

// Landed is what a table holds, as CountSQL and GateSQL measure it.
type Landed struct {
	Count, Distinct uint64
	Expectation     // over distinct rows; Batches unused
}

// ParseCount parses CountSQL's answer.
func ParseCount(out string) (count, distinct uint64, err error) {
	f := strings.Fields(out)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("count: unexpected answer %q", out)
	}
	if count, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		distinct, err = strconv.ParseUint(f[1], 10, 64)
	}
	return count, distinct, err
}

// ParseGate parses GateSQL's answer into l's Expectation fields.
func ParseGate(out string, l *Landed) error {
	f := strings.Fields(out)
	x := &l.Expectation
	u := []*uint64{&x.SumBatchID, &x.SumEventSeq, nil, nil,
		&x.HashSensor, &x.HashRegion, &x.HashNameUpper, &x.HashUnit,
		&x.TagCount, &x.HashTags, &x.NullQuality, &x.NullQualityKey, &x.HashQuality,
		&x.SumBatchTs, &x.SumBatchTsMs, nil}
	s := map[int]*int64{2: &x.SumValue, 3: &x.SumValueScaled, 15: &x.SumSendTsUs}
	if len(f) != len(u) {
		return fmt.Errorf("gate: %d values in %q, want %d", len(f), out, len(u))
	}
	for i, v := range f {
		var err error
		if u[i] != nil {
			*u[i], err = strconv.ParseUint(v, 10, 64)
		} else {
			*s[i], err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return fmt.Errorf("gate: value %d: %w", i, err)
		}
	}
	x.Rows = l.Distinct
	return nil
}

// Gate is one correctness gate's outcome.
type Gate struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// Check compares what landed with the expectation. The duplicates gate
// reports count - distinct and passes when it is at most maxDup (0 in
// drain mode); every other gate is over distinct rows.
func Check(want Expectation, got Landed, maxDup uint64) []Gate {
	var gates []Gate
	add := func(name string, w, g any) {
		ws, gs := fmt.Sprint(w), fmt.Sprint(g)
		gates = append(gates, Gate{Name: name, Want: ws, Got: gs, Pass: ws == gs})
	}
	add("no_loss: uniqExact((batch_id, event_seq))", want.Rows, got.Distinct)
	dups := got.Count - got.Distinct
	gates = append(gates, Gate{Name: "duplicates: count() - uniqExact", Want: fmt.Sprintf("<= %d", maxDup),
		Got: strconv.FormatUint(dups, 10), Pass: got.Count >= got.Distinct && dups <= maxDup})
	g := got.Expectation
	add("sum(batch_id)", want.SumBatchID, g.SumBatchID)
	add("sum(event_seq)", want.SumEventSeq, g.SumEventSeq)
	add("sum(value)", want.SumValue, g.SumValue)
	add("sum(value_scaled)", want.SumValueScaled, g.SumValueScaled)
	add("sum(cityHash64(sensor))", want.HashSensor, g.HashSensor)
	add("sum(cityHash64(region))", want.HashRegion, g.HashRegion)
	add("sum(cityHash64(name_upper))", want.HashNameUpper, g.HashNameUpper)
	add("sum(cityHash64(unit))", want.HashUnit, g.HashUnit)
	add("sum(length(tags))", want.TagCount, g.TagCount)
	add("sum(cityHash64 of each tag)", want.HashTags, g.HashTags)
	add("countIf(quality IS NULL)", want.NullQuality, g.NullQuality)
	add("sumIf(batch_id*100+event_seq, quality IS NULL)", want.NullQualityKey, g.NullQualityKey)
	add("sumIf(cityHash64(reinterpretAsString(quality)))", want.HashQuality, g.HashQuality)
	add("sum(batch_ts)", want.SumBatchTs, g.SumBatchTs)
	add("sum(batch_ts_ms)", want.SumBatchTsMs, g.SumBatchTsMs)
	add("sum(send_ts_us)", want.SumSendTsUs, g.SumSendTsUs)
	return gates
}

// AllPass reports whether every gate passed.
func AllPass(gates []Gate) bool {
	for _, g := range gates {
		if !g.Pass {
			return false
		}
	}
	return len(gates) > 0
}
