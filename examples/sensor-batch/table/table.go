// Package table finds the sensor_events table among a sluice module's
// target tables and applies the transform to each event, writing the rows
// it keeps. It is shared by the Avro module (examples/sensor-batch) and the
// JSON one (examples/sensor-batch-json), which differ only in how they
// decode: each keeps its own loop over its decoder's events, so that the
// per-event Next is a direct call rather than one through an interface.
package table

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/sluicehq/sluice/examples/sensor-batch/sensor"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

// Columns18 is the ClickHouse 18.16 variant of sensor_events, as the host
// passes it (ingest_ts, MATERIALIZED, is not written by the module).
var Columns18 = []sluice.Column{
	sluice.Col("batch_id", "UInt64"),
	sluice.Col("event_seq", "UInt16"),
	sluice.Col("sensor", "LowCardinality(String)"),
	sluice.Col("region", "LowCardinality(String)"),
	sluice.Col("name_upper", "LowCardinality(String)"),
	sluice.Col("unit", "LowCardinality(String)"),
	sluice.Col("value", "Int64"),
	sluice.Col("value_scaled", "Int64"),
	sluice.Col("quality", "Nullable(Float64)"),
	sluice.Col("tags", "Array(LowCardinality(String))"),
	sluice.Col("batch_ts", "DateTime"),
	sluice.Col("batch_ts_ms", "UInt16"),
	sluice.Col("send_ts_us", "Int64"),
}

// ColumnsModern is the reference table of a modern ClickHouse: batch_ts
// DateTime64(3) and send_ts DateTime64(6) instead of the last three
// columns of Columns18.
var ColumnsModern = append(append([]sluice.Column(nil), Columns18[:10]...),
	sluice.Col("batch_ts", "DateTime64(3)"),
	sluice.Col("send_ts", "DateTime64(6)"),
)

// Layout says which variant of the table the host's schema is.
type Layout int

const (
	// Layout18 is the ClickHouse 18.16 variant (Columns18).
	Layout18 Layout = iota
	// LayoutModern is the reference variant with DateTime64 (ColumnsModern).
	LayoutModern
)

// Target is the table the module writes.
type Target struct {
	T       *sluice.Table
	Layout  Layout
	Row     bool     // write with Output.Row instead of Output.Flat
	upper   []byte   // name_upper, reused by WriteEvent
	tags    []string // reused by writeRow
	records int      // records seen, for Yield
}

// Find looks up the target table, "sensor_events" unless the module
// parameter "table" names another, and tells its layout from its column
// types: a DateTime64 batch_ts is the modern layout. It refuses any other
// schema, naming every difference. The parameter "writer" chooses the
// SDK's row writer: "flat" (the default, Output.Flat) or "row"
// (Output.Row), which write the same rows; the second is there to measure
// the first against (wasmhost's BenchmarkSensorBatchGoWriters).
func Find(cfg *sluice.Config, module string) (*Target, error) {
	name, ok := cfg.Param("table")
	if !ok {
		name = "sensor_events"
	}
	tg := &Target{}
	switch w, _ := cfg.Param("writer"); w {
	case "", "flat":
	case "row":
		tg.Row = true
	default:
		return nil, fmt.Errorf("%s: parameter writer is %q, want flat or row", module, w)
	}
	t, err := cfg.Table(name)
	if err != nil {
		return nil, err
	}
	tg.T = t
	if isModern(t) {
		if err := t.Expect(ColumnsModern...); err != nil {
			return nil, fmt.Errorf("%s needs the sensor_events table of examples/sensor-batch/schema.sql (modern layout, DateTime64): %w", module, err)
		}
		tg.Layout = LayoutModern
		return tg, nil
	}
	if err := t.Expect(Columns18...); err != nil {
		return nil, fmt.Errorf("%s needs the sensor_events table of examples/sensor-batch/schema.sql: %w", module, err)
	}
	tg.Layout = Layout18
	return tg, nil
}

// The range of DateTime64 that ClickHouse documents, 1900-01-01 00:00:00
// to 2299-12-31 23:59:59.999999 UTC, in milliseconds and microseconds.
const (
	minTs64Ms = -2208988800000
	maxTs64Ms = 10413791999999
	minTs64Us = minTs64Ms * 1000
	maxTs64Us = maxTs64Ms*1000 + 999
)

// CheckHeader checks what the table can hold of a header: for the 18.16
// layout, sensor.CheckHeader; for the modern one, a batch_id that is not
// negative and batch_ts_ms and send_ts_us within DateTime64's range, so
// that a timestamp in the wrong unit is dead-lettered rather than landing
// as another date.
func (t *Target) CheckHeader(h *sensor.Header) error {
	if t.Layout == Layout18 {
		return sensor.CheckHeader(h)
	}
	if h.BatchID < 0 {
		return fmt.Errorf("batch_id %d is negative", h.BatchID)
	}
	if h.BatchTsMs < minTs64Ms || h.BatchTsMs > maxTs64Ms {
		return fmt.Errorf("batch_ts_ms %d is outside the range of DateTime64 (1900 to 2299)", h.BatchTsMs)
	}
	if h.SendTsUs < minTs64Us || h.SendTsUs > maxTs64Us {
		return fmt.Errorf("send_ts_us %d is outside the range of DateTime64 (1900 to 2299)", h.SendTsUs)
	}
	return nil
}

func isModern(t *sluice.Table) bool {
	for _, c := range t.Columns {
		if c.Name == "batch_ts" {
			return len(c.Type) >= 10 && c.Type[:10] == "DateTime64"
		}
	}
	return false
}

// Yield is called once per record, at the start of Transform; every 16th
// call it lets the Go runtime's other goroutines run. A reactor module's
// exports never block, so its background GC worker runs only when the
// module yields: a GC cycle started by a buffer's growth would otherwise
// never finish, and the write barrier it turns on would stay on for good,
// making every pointer store dear (3x slower end to end here; see
// benchmarks/README.md). Yielding when no GC is running costs nothing
// measurable. This belongs in the guest SDK; until it is there, the
// modules do it.
func (t *Target) Yield() {
	if t.records++; t.records%16 == 0 {
		runtime.Gosched()
	}
}

// WriteEvent applies the transform to event e of batch h: it refuses a seq
// that event_seq cannot hold, drops the events sensor.Keep drops, and
// writes the row of the others: region NULL becomes "", value_scaled and
// name_upper are derived; in the 18.16 layout batch_ts_ms is split into
// seconds and milliseconds, in the modern one batch_ts and send_ts are
// DateTime64 ticks (sensor.ModernTicks). h must have passed t.CheckHeader.
func (t *Target) WriteEvent(out *sluice.Output, h *sensor.Header, e *sensor.Event) error {
	if err := sensor.CheckSeq(e); err != nil {
		return err
	}
	if !sensor.Keep(e) {
		return nil
	}
	t.upper = sensor.AppendUpper(t.upper[:0], e.Name)
	if t.Row {
		return t.writeRow(out, h, e)
	}
	// FlatRow rather than Row: its writes inline, and calls are what
	// costs on wasm.
	w := out.Flat(t.T).
		UInt64(uint64(h.BatchID)).
		UInt16(uint16(e.Seq)).
		Bytes(h.Sensor).
		Bytes(h.Region). // empty when NULL
		Bytes(t.upper).
		Bytes(e.Unit).
		Int64(e.Value).
		Int64(sensor.ValueScaled(e))
	if e.QualityNull {
		w.Null()
	} else {
		w.NotNull().Float64(e.Quality)
	}
	w.ArrayBytes(e.Tags)
	if t.Layout == LayoutModern {
		batchTs, sendTs := sensor.ModernTicks(h)
		return w.DateTime64(batchTs).DateTime64(sendTs).End()
	}
	sec, ms := sensor.SplitTs(h)
	return w.DateTime(sec).UInt16(ms).Int64(h.SendTsUs).End()
}

// writeRow is WriteEvent's row with Output.Row.
func (t *Target) writeRow(out *sluice.Output, h *sensor.Header, e *sensor.Event) error {
	w := out.Row(t.T).
		UInt64(uint64(h.BatchID)).
		UInt16(uint16(e.Seq)).
		Bytes(h.Sensor).
		Bytes(h.Region).
		Bytes(t.upper).
		Bytes(e.Unit).
		Int64(e.Value).
		Int64(sensor.ValueScaled(e))
	if e.QualityNull {
		w.Null()
	} else {
		w.Float64(e.Quality)
	}
	// One ArrayString call rather than BeginArray and a Bytes per tag.
	// The strings alias the tags.
	t.tags = t.tags[:0]
	for _, tag := range e.Tags {
		t.tags = append(t.tags, unsafe.String(unsafe.SliceData(tag), len(tag)))
	}
	w.ArrayString(t.tags)
	clear(t.tags) // keep no reference to the record
	if t.Layout == LayoutModern {
		batchTs, sendTs := sensor.ModernTicks(h)
		return w.DateTime64(batchTs).DateTime64(sendTs).End()
	}
	sec, ms := sensor.SplitTs(h)
	return w.DateTime(sec).UInt16(ms).Int64(h.SendTsUs).End()
}
