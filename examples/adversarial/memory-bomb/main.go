// Command memory-bomb is an adversarial sluice module: a record whose value
// is "bomb" makes it allocate (and touch) 1 MiB after 1 MiB until the Go
// runtime dies of "out of memory"; any other record becomes a row of the adv
// table. The host must report the memory cap (a *wasmhost.TrapError with
// Limit "memory"), not just the trap the Go runtime ends with (its abort is
// a wasm unreachable).
package main

import (
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

// hoard keeps every allocation reachable.
var hoard [][]byte

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	if string(rec.Value) == "bomb" {
		for {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hoard = append(hoard, b)
		}
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(rec.Value).End()
}
