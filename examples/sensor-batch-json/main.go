// Command sensor-batch-json is the sensor-batch module for the JSON form of
// the corpus (the bytes ClickHouse's own Kafka engine reads in the
// side-by-side benchmark): the same transform and table as
// examples/sensor-batch, from one JSON object per record with the events as
// parallel arrays. It is a WASI reactor: build it with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o sensor-batch-json.wasm .
package main

import (
	"github.com/sluicehq/sluice/examples/sensor-batch-json/jsonbatch"
	"github.com/sluicehq/sluice/examples/sensor-batch/sensor"
	"github.com/sluicehq/sluice/examples/sensor-batch/table"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

// main is never run in a reactor module; init registers the handler.
func main() {}

type module struct {
	target *table.Target
	dec    jsonbatch.Decoder
	hdr    sensor.Header
	ev     sensor.Event
}

// Init finds sensor_events (or the table the "table" parameter names) and
// refuses any other schema.
func (m *module) Init(cfg *sluice.Config) (err error) {
	m.target, err = table.Find(cfg, "sensor-batch-json")
	return err
}

// Transform writes a row per kept event; a record that is not a
// well-formed batch, or whose values do not fit the table, is
// dead-lettered with the reason, and none of its rows is written.
func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	m.target.Yield()
	h, e := &m.hdr, &m.ev
	if err := m.dec.Reset(rec.Value, h); err != nil {
		return err
	}
	if err := m.target.CheckHeader(h); err != nil {
		return err
	}
	for m.dec.Next(e) {
		if err := m.target.WriteEvent(out, h, e); err != nil {
			return err
		}
	}
	return m.dec.Err()
}
