package wasmhost

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// BenchmarkCallOverhead is one call of a trivial export
// (sluice_abi_version): the fixed cost of entering and leaving a Go guest.
func BenchmarkCallOverhead(b *testing.B) {
	for _, mode := range []struct {
		name    string
		cfg     Config
		journal bool
	}{{"instrumented", Config{}, false}, {"journal", Config{}, true}, {"uninstrumented", Config{uninstrumented: true}, false}} {
		b.Run(mode.name, func(b *testing.B) {
			if mode.journal {
				// Every call recorded in a call journal (journal.go).
				j, err := OpenCallJournal(filepath.Join(b.TempDir(), "calls.journal"))
				if err != nil {
					b.Skip(err)
				}
				b.Cleanup(func() { j.Close() })
				mode.cfg.Journal = j
			}
			r := newTestRuntime(b, mode.cfg)
			m := load(b, r, "wasmhost/testdata/noop", Limits{})
			in := instantiate(b, m, advInit)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				if _, err := in.call(ctx, in.fnVersion, "v"); err != nil {
					b.Fatal(err)
				}
			}
			reportPerRecord(b, 1, cpu0)
		})
	}
}

// BenchmarkArmDisarm is the host's bookkeeping of one call alone: arming
// and disarming the deadline's watch, without and with the call journal
// (one store each way), on a hand-assembled module. It reports the
// process's CPU time per call too (cpu-ns/record), which other load on a
// shared machine moves less than the wall clock.
func BenchmarkArmDisarm(b *testing.B) {
	for _, journal := range []bool{false, true} {
		name := "watch"
		if journal {
			name = "watch+journal"
		}
		b.Run(name, func(b *testing.B) {
			var cfg Config
			if journal {
				j, err := OpenCallJournal(filepath.Join(b.TempDir(), "calls.journal"))
				if err != nil {
					b.Skip(err)
				}
				b.Cleanup(func() { j.Close() })
				cfg.Journal = j
			}
			r := newTestRuntime(b, cfg)
			m := loadBytes(b, r, "m", wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}.Build(), Limits{})
			in := instantiate(b, m, InitConfig{})
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				in.watch.arm(ctx, time.Second)
				in.watch.disarm(true)
			}
			reportPerRecord(b, 1, cpu0)
		})
	}
}
