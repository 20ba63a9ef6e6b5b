// Command panic-every-1000 is an adversarial sluice module:
//
//   - every record whose offset is 999 modulo 1000 panics in Transform; the
//     SDK recovers the panic and the record fails alone, with the message
//     "panic: …" (a record error, not an instance failure);
//   - a record whose value is "crash" panics on another goroutine, which no
//     recover can catch: the Go runtime prints the panic and aborts (on
//     wasm, runtime.abort is an unreachable: the instance traps);
//   - a record whose value is "trap" executes the wasm instruction
//     unreachable (trap_wasm.s), a real trap;
//   - any other record becomes a row of the adv table.
package main

import (
	"fmt"
	"runtime"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

func init() { sluice.Run(&module{}) }

func main() {}

// unreachable executes the wasm unreachable instruction (trap_wasm.s).
func unreachable()

type module struct{ adv *sluice.Table }

func (m *module) Init(cfg *sluice.Config) (err error) {
	if m.adv, err = cfg.Table("adv"); err != nil {
		return err
	}
	return m.adv.Expect(sluice.Col("offset", "UInt64"), sluice.Col("value", "String"))
}

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	switch string(rec.Value) {
	case "crash":
		go func() {
			panic(fmt.Sprintf("panic-every-1000: unrecoverable panic at offset %d", rec.Offset))
		}()
		for {
			runtime.Gosched() // the panic ends the program before this returns
		}
	case "trap":
		unreachable()
	}
	if rec.Offset%1000 == 999 {
		panic(fmt.Sprintf("panic-every-1000: offset %d", rec.Offset))
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(rec.Value).End()
}
