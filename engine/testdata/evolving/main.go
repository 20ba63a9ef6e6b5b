// Command evolving is a test module for schema changes while running. Each
// record's value is a decimal id; it writes one row per record into the
// table named by the "table" parameter (default "evolving"), taking up the
// columns the table has when the instance starts:
//
//	id Int64, value String   required
//	amount Int32 or Int64    optional: id % 1000
//	note String              optional: "noted"
//
// Any other column refuses the schema, naming it.
package main

import (
	"fmt"
	"strconv"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

func main() {}

type module struct {
	t     *sluice.Table
	write []func(r *sluice.Row, id int64, rec *sluice.Record)
}

func (m *module) Init(cfg *sluice.Config) (err error) {
	name, ok := cfg.Param("table")
	if !ok {
		name = "evolving"
	}
	if m.t, err = cfg.Table(name); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, c := range m.t.Columns {
		seen[c.Name] = true
		switch {
		case c.Name == "id" && c.Type == "Int64":
			m.write = append(m.write, func(r *sluice.Row, id int64, _ *sluice.Record) { r.Int64(id) })
		case c.Name == "value" && c.Type == "String":
			m.write = append(m.write, func(r *sluice.Row, _ int64, rec *sluice.Record) { r.Bytes(rec.Value) })
		case c.Name == "amount" && c.Type == "Int32":
			m.write = append(m.write, func(r *sluice.Row, id int64, _ *sluice.Record) { r.Int32(int32(id % 1000)) })
		case c.Name == "amount" && c.Type == "Int64":
			m.write = append(m.write, func(r *sluice.Row, id int64, _ *sluice.Record) { r.Int64(id % 1000) })
		case c.Name == "note" && c.Type == "String":
			m.write = append(m.write, func(r *sluice.Row, _ int64, _ *sluice.Record) { r.String("noted") })
		default:
			return fmt.Errorf("table %s: column %s %s is not one this module writes", name, c.Name, c.Type)
		}
	}
	if !seen["id"] || !seen["value"] {
		return fmt.Errorf("table %s needs id Int64 and value String", name)
	}
	return nil
}

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	id, err := strconv.ParseInt(string(rec.Value), 10, 64)
	if err != nil {
		return fmt.Errorf("value %q is not an id", rec.Value)
	}
	r := out.Row(m.t)
	for _, w := range m.write {
		w(r, id, rec)
	}
	return r.End()
}
