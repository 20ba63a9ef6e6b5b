// Command noop is the module of the ABI-overhead benchmark: it accepts any
// configuration and filters every record out (status ok, no rows), so a
// batch costs only the framing, the calls and the SDK's loop.
package main

import sluice "github.com/sluicehq/sluice/guest-sdk/go"

func init() { sluice.Run(module{}) }

func main() {}

type module struct{}

func (module) Init(*sluice.Config) error { return nil }

func (module) Transform(*sluice.Record, *sluice.Output) error { return nil }
