// Command sensor-batch is a sluice module for the sensor-batch workload
// (benchmarks/README.md): each Kafka record is one Avro SensorBatch of 100
// events in Confluent framing (schema id 1); the module drops the events
// whose unit is "drop" or whose quality is below 0.2, and writes one row of
// sensor_events (schema.sql) per event kept. It is a WASI reactor: build it
// with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o sensor-batch.wasm .
//
// The decoding and the transform rules live in package sensor (plain Go,
// measured natively too); the row layout in package table. Built natively
// (go build .), the command is instead a driver that runs this module's
// handler on the host's payloads in process (native.go), to measure it
// beside its wasm build.
package main

import (
	"github.com/sluicehq/sluice/examples/sensor-batch/sensor"
	"github.com/sluicehq/sluice/examples/sensor-batch/table"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

type module struct {
	target *table.Target
	dec    sensor.AvroDecoder
	hdr    sensor.Header
	ev     sensor.Event
}

// Init finds sensor_events (or the table the "table" parameter names) and
// refuses any other schema.
func (m *module) Init(cfg *sluice.Config) (err error) {
	m.target, err = table.Find(cfg, "sensor-batch")
	return err
}

// Transform writes a row per kept event. A record that is not a
// well-formed SensorBatch, or whose values do not fit the table, is
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
