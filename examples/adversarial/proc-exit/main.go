// Command proc-exit is an adversarial sluice module: a record whose value is
// "exit" makes it call os.Exit(3) (WASI proc_exit); any other record becomes
// a row of the adv table. The host must fail the instance with a
// *wasmhost.TrapError whose message says "proc_exit(3)".
package main

import (
	"os"

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

func (m *module) Transform(rec *sluice.Record, out *sluice.Output) error {
	if string(rec.Value) == "exit" {
		os.Exit(3)
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(rec.Value).End()
}
