// Command forbidden-import is an adversarial sluice module that imports a
// function the sandbox does not provide (env.whatever) and calls it for a
// record whose value is "call". The host must refuse it at load, naming the
// import, before any record reaches it.
package main

import (
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

//go:wasmimport env whatever
func whatever(x int32) int32

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
	if string(rec.Value) == "call" {
		whatever(1)
	}
	return out.Row(m.adv).UInt64(uint64(rec.Offset)).Bytes(rec.Value).End()
}
