// Command infinite-loop is an adversarial sluice module: a record whose
// value is "loop" makes it spin forever, one whose value is "sleep" makes it
// sleep for an hour (a WASI poll_oneoff); any other record becomes a row of
// the adv table. The host must interrupt it at the batch deadline (a
// *wasmhost.TrapError with Limit "deadline") and a fresh instance must work.
package main

import (
	"time"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

func main() {}

type module struct{ adv *sluice.Table }

func (m *module) Init(cfg *sluice.Config) (err error) {
	if m.adv, err = cfg.Table("adv"); err != nil {
		return err
	}
	return m.adv.Expect(sluice.Col("offset", "UInt64"), sluice.Col("value", "String"))
}

// spins is global so that the compiler cannot drop the loop.
var spins uint64

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	switch string(rec.Value) {
	case "loop":
		for {
			spins++
		}
	case "sleep":
		time.Sleep(time.Hour)
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(rec.Value).End()
}
