// Command versioned is a test module for hot swaps: every record becomes
// one row naming the record and the module's version, which the build sets
// with -ldflags "-X main.version=…". A record whose value is "loop" spins
// forever, for isolation tests. The table it writes is given by the
// "table" parameter (default "events").
package main

import (
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

var version = "dev"

func init() { sluice.Run(&module{}) }

func main() {}

type module struct{ events *sluice.Table }

func (m *module) Init(cfg *sluice.Config) (err error) {
	name, ok := cfg.Param("table")
	if !ok {
		name = "events"
	}
	if m.events, err = cfg.Table(name); err != nil {
		return err
	}
	return m.events.Expect(sluice.Col("topic", "String"), sluice.Col("partition", "Int32"),
		sluice.Col("offset", "Int64"), sluice.Col("version", "String"), sluice.Col("value", "String"))
}

// spins is global so that the compiler cannot drop the loop.
var spins uint64

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	if string(rec.Value) == "loop" {
		for {
			spins++
		}
	}
	return out.Row(m.events).String(rec.Topic).Int32(rec.Partition).Int64(rec.Offset).
		String(version).Bytes(rec.Value).End()
}
