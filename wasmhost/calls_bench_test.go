package wasmhost

import (
	"context"
	"testing"
)

// BenchmarkCallOverhead is one call of a trivial export
// (sluice_abi_version): the fixed cost of entering and leaving a Go guest.
func BenchmarkCallOverhead(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{{"instrumented", Config{}}, {"uninstrumented", Config{uninstrumented: true}}} {
		b.Run(mode.name, func(b *testing.B) {
			r := newTestRuntime(b, mode.cfg)
			m := load(b, r, "wasmhost/testdata/noop", Limits{})
			in := instantiate(b, m, advInit)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := in.call(ctx, in.fnVersion, "v"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
