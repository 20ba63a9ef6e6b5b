// Command log-normalize is a sluice module that normalizes JSON log lines
// into the logs table (schema.sql). It is a WASI reactor: build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o log-normalize.wasm .
//
// The parsing and templating live in package normalize; this file only
// checks the schema and writes the rows.
package main

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice/examples/log-normalize/normalize"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

// main is never run in a reactor module; init registers the handler.
func main() {}

// columns are the columns of the logs table, in order. ClickHouse exposes
// attrs Nested(key String, value String) as the two arrays.
var columns = []sluice.Column{
	sluice.Col("ts", "DateTime"),
	sluice.Col("service", "LowCardinality(String)"),
	sluice.Col("level", "LowCardinality(String)"),
	sluice.Col("template", "String"),
	sluice.Col("fingerprint", "UInt64"),
	sluice.Col("msg", "String"),
	sluice.Col("attrs.key", "Array(String)"),
	sluice.Col("attrs.value", "Array(String)"),
}

type module struct {
	logs  *sluice.Table
	entry normalize.Entry // reused for every record
}

// Init finds the target table, "logs" unless the module parameter "table"
// names another, and refuses a schema that differs from schema.sql.
func (m *module) Init(cfg *sluice.Config) error {
	name, ok := cfg.Param("table")
	if !ok {
		name = "logs"
	}
	t, err := cfg.Table(name)
	if err != nil {
		return err
	}
	if err := t.Expect(columns...); err != nil {
		return fmt.Errorf("log-normalize needs the table of examples/log-normalize/schema.sql: %w", err)
	}
	m.logs = t
	return nil
}

// Transform writes one row per log line; a line that is not a JSON object
// with a msg, or whose ts is not valid, is dead-lettered with the reason.
func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	e := &m.entry
	if err := normalize.Normalize(rec.Value, rec.Timestamp, e); err != nil {
		return err
	}
	if e.Time < 0 || e.Time > math.MaxUint32 {
		return fmt.Errorf("ts %d is outside the range of DateTime (1970 to 2106)", e.Time)
	}
	w := out.Row(m.logs).
		DateTime(uint32(e.Time)).
		Bytes(e.Service).
		String(e.Level).
		Bytes(e.Template).
		UInt64(e.Fingerprint).
		Bytes(e.Msg).
		BeginArray(len(e.Attrs))
	for _, a := range e.Attrs {
		w.Bytes(a.Key)
	}
	w.BeginArray(len(e.Attrs))
	for _, a := range e.Attrs {
		w.Bytes(a.Value)
	}
	return w.End()
}
