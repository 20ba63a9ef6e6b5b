package wasmhost

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost/internal/instrument"
	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// upperBatch is n records of 80 bytes of mixed-case text.
func upperBatch(n int) *Batch {
	val := []byte(strings.Repeat("The Quick Brown Fox jumps over the lazy dog; ", 2)[:80])
	b := &Batch{Topic: "bench", Partition: 0, Records: make([]Record, n)}
	for i := range b.Records {
		b.Records[i] = Record{Offset: int64(i), Timestamp: 1714564800000, Value: val}
	}
	return b
}

// reportPerRecord reports the time per record, wall clock and, from
// cpu0 (cpuTime before the loop), CPU time of the whole process.
func reportPerRecord(b *testing.B, records int, cpu0 time.Duration) {
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N*records)
	b.ReportMetric(ns, "ns/record")
	b.ReportMetric(1e9/ns, "records/s")
	if cpu := cpuTime() - cpu0; cpu0 > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*records), "cpu-ns/record")
	}
}

// BenchmarkDeadline compares the cost of the per-batch deadline on the
// byte-loop module (testdata/upper: upper-casing an 80-byte record, batches
// of 1000) and on examples/log-normalize (sample.jsonl, batches of 1000):
// none (the module as built, no deadline), the budget-and-flag rewrite
// sluice uses ("epoch-rewrite", package instrument), and wazero's
// WithCloseOnContextDone with a context deadline per batch.
//
// Measured on a shared 2-vCPU AMD EPYC machine, go test -run XXX -bench
// Deadline -benchtime 1s -count 1, 8 interleaved runs, median of the
// process CPU time per record (the wall clock moved with other load; its
// minima agree):
//
//	cpu-ns/record   none    epoch-rewrite   close-on-context-done
//	upper            628      745 (+19%)       4,319 (6.9×)
//	log-normalize  3,477    4,044 (+16%)      20,152 (5.8×)
//
// docs/adr/0002-batch-deadline.md explains the choice.
func BenchmarkDeadline(b *testing.B) {
	for _, mod := range []struct {
		name  string
		dir   string
		init  InitConfig
		batch func(testing.TB) *Batch
	}{
		{"upper", "wasmhost/testdata/upper", advInit, func(testing.TB) *Batch { return upperBatch(1000) }},
		{"log-normalize", "examples/log-normalize", InitConfig{Tables: []TableSchema{logsTable}},
			func(tb testing.TB) *Batch { return sampleBatch(tb, 1000) }},
	} {
		for _, mode := range []struct {
			name string
			cfg  Config
			ctx  bool // a context with a deadline per batch
		}{
			{"none", Config{uninstrumented: true}, false},
			{"epoch-rewrite", Config{}, false},
			{"close-on-context-done", Config{uninstrumented: true, closeOnContextDone: true}, true},
		} {
			b.Run(mod.name+"/"+mode.name, func(b *testing.B) {
				r := newTestRuntime(b, mode.cfg)
				m := load(b, r, mod.dir, Limits{})
				in := instantiate(b, m, mod.init)
				batch := mod.batch(b)
				run := func() {
					ctx := context.Background()
					if mode.ctx {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
						defer cancel()
					}
					out, err := in.Transform(ctx, batch)
					if err != nil {
						b.Fatal(err)
					}
					if out.Len() != len(batch.Records) {
						b.Fatal(out.Len())
					}
				}
				run()
				b.ReportAllocs()
				cpu0 := cpuTime()
				for b.Loop() {
					run()
				}
				reportPerRecord(b, len(batch.Records), cpu0)
			})
		}
	}
}

// BenchmarkABIOverhead is the cost per record of the ABI alone: a module
// that filters every record out (testdata/noop), 80-byte values. Measured
// (median, as for BenchmarkDeadline): 593, 85 and 79 cpu-ns/record at
// batches of 1, 100 and 1000, from 151 at 1000 before the guest SDK's
// reader inlined on wasm and its recover moved from per record to per batch.
func BenchmarkABIOverhead(b *testing.B) {
	r := newTestRuntime(b, Config{})
	m := load(b, r, "wasmhost/testdata/noop", Limits{})
	in := instantiate(b, m, advInit)
	for _, n := range []int{1, 100, 1000} {
		b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
			batch := upperBatch(n)
			if _, err := in.Transform(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				out, err := in.Transform(context.Background(), batch)
				if err != nil {
					b.Fatal(err)
				}
				for {
					if _, ok := out.Next(); !ok {
						break
					}
				}
			}
			reportPerRecord(b, n, cpu0)
		})
	}
}

// logsTable is examples/log-normalize/schema.sql as the host passes it.
var logsTable = TableSchema{Name: "logs", Columns: []ColumnSchema{
	{Name: "ts", Type: "DateTime"},
	{Name: "service", Type: "LowCardinality(String)"},
	{Name: "level", Type: "LowCardinality(String)"},
	{Name: "template", Type: "String"},
	{Name: "fingerprint", Type: "UInt64"},
	{Name: "msg", Type: "String"},
	{Name: "attrs.key", Type: "Array(String)"},
	{Name: "attrs.value", Type: "Array(String)"},
}}

// sampleBatch is examples/log-normalize/sample.jsonl repeated to n records,
// with the Kafka timestamp its tests use: the input of the native
// BenchmarkModuleBatch in examples/log-normalize.
func sampleBatch(tb testing.TB, n int) *Batch {
	data, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/sample.jsonl"))
	if err != nil {
		tb.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	b := &Batch{Topic: "logs", Records: make([]Record, n)}
	for i := range b.Records {
		b.Records[i] = Record{Offset: int64(i), Timestamp: 1714564815000, Value: lines[i%len(lines)]}
	}
	return b
}

// BenchmarkLogNormalize runs examples/log-normalize in wazero on
// sample.jsonl repeated to batches of 1000 records; compare with
// BenchmarkModuleBatch in examples/log-normalize (the same handler and
// input, natively). Measured (median, as for BenchmarkDeadline): 4,053
// cpu-ns/record here (3,477 without the deadline instrumentation) against
// 296 natively. The ABI is under 80 of them; the rest is the guest's own
// code as Go compiles it to wasm (see docs/adr/0002-batch-deadline.md).
func BenchmarkLogNormalize(b *testing.B) {
	r := newTestRuntime(b, Config{})
	m := load(b, r, "examples/log-normalize", Limits{})
	in := instantiate(b, m, InitConfig{Tables: []TableSchema{logsTable}})
	batch := sampleBatch(b, 1000)
	if _, err := in.Transform(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := in.Transform(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	reportPerRecord(b, len(batch.Records), cpu0)
}

// BenchmarkLogNormalizeC is the same source compiled two ways: the C port
// of log-normalize (examples/log-normalize-c, guest-sdk/c) built by clang
// for wasm32-wasi and run in wazero (a full Transform call: batch encoding,
// the guest, output validation), against the same C built natively by the
// same clang at the same -O2 and called through cgo once per batch on the
// same payload. Batches of 1000 records of sample.jsonl, as for
// BenchmarkLogNormalize. The two alternate within each iteration, so that
// load on a shared machine hits both alike; each is timed by the process
// CPU time around its call. Sub-benchmarks: "deadline" is the module as
// sluice runs it (with the deadline instrumentation), "no-deadline" without.
//
// Measured on the shared 2-vCPU AMD EPYC machine, go test -run '^$' -bench
// LogNormalize -benchtime 2s -count 3 ./wasmhost/, clang 14, wazero 1.12
// (its optimizing compiler); median of the 3 runs, range in brackets:
//
//	cpu-ns/record   wasm              native            wasm/native
//	deadline        871 (870–896)     181 (180–187)     4.80 (4.80–4.84)
//	no-deadline     712 (698–718)     189 (185–191)     3.77 (3.73–3.80)
//
// The Go guest (BenchmarkLogNormalize, same run) takes 4,147 (4,136–4,179),
// 4.8× the C guest. The host's share (batch encoding, output validation) is
// about 1% of the wasm figure; the rest is the guest's code as wazero
// compiles it. The module is byte-scanning loops, and those alone run 2.5×
// (a scan for '"', '\\' and control bytes) and 3.6× (a character-class
// table lookup per byte) slower in wazero than natively, in a
// micro-benchmark with the native build's vectorisation and unrolling
// turned off: wazero bounds-checks every load and its code generation is
// simpler than LLVM's. -O3, -flto and -msimd128 did not improve the wasm
// figure (within 2%);
// -mbulk-memory (memcpy as wazero's memmove) took 6% off and is in the
// build. The deadline instrumentation costs 22% here, against 16% for the
// Go guest, since C's loops are tighter.
func BenchmarkLogNormalizeC(b *testing.B) {
	for _, mode := range []struct {
		name string
		cfg  Config
	}{
		{"deadline", Config{}},
		{"no-deadline", Config{uninstrumented: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			r := newTestRuntime(b, mode.cfg)
			m := loadBytes(b, r, "log-normalize-c", cModuleWasm(b, logNormalizeC), Limits{})
			cfg := InitConfig{Tables: []TableSchema{logsTable}}
			in := instantiate(b, m, cfg)
			native := cModuleNative(b, logNormalizeC)
			if msg := native.Init(encodeInit(cfg)); msg != "" {
				b.Fatal(msg)
			}
			batch := sampleBatch(b, 1000)
			payload := make([]byte, batch.encodedSize())
			batch.encode(payload)
			runWasm := func() {
				out, err := in.Transform(context.Background(), batch)
				if err != nil {
					b.Fatal(err)
				}
				if out.Len() != len(batch.Records) {
					b.Fatal(out.Len())
				}
			}
			runNative := func() {
				if out := native.Transform(payload); len(out) < 4 {
					b.Fatal(len(out))
				}
			}
			runWasm()
			runNative()
			var wasmCPU, nativeCPU, wasmWall, nativeWall time.Duration
			b.ReportAllocs()
			for b.Loop() {
				c0, t0 := cpuTime(), time.Now()
				runWasm()
				c1, t1 := cpuTime(), time.Now()
				runNative()
				c2, t2 := cpuTime(), time.Now()
				wasmCPU += c1 - c0
				nativeCPU += c2 - c1
				wasmWall += t1.Sub(t0)
				nativeWall += t2.Sub(t1)
			}
			n := float64(b.N * len(batch.Records))
			b.ReportMetric(float64(wasmWall.Nanoseconds())/n, "wasm-ns/record")
			b.ReportMetric(float64(nativeWall.Nanoseconds())/n, "native-ns/record")
			if nativeCPU > 0 {
				b.ReportMetric(float64(wasmCPU.Nanoseconds())/n, "wasm-cpu-ns/record")
				b.ReportMetric(float64(nativeCPU.Nanoseconds())/n, "native-cpu-ns/record")
				b.ReportMetric(float64(wasmCPU)/float64(nativeCPU), "wasm/native")
			}
		})
	}
}

// BenchmarkInstantiate is the replacement of a failed instance: a fresh
// instance of a loaded (compiled) module, initialised, and closed.
// Measured: 2.9 ms for testdata/noop, 4.3 ms for log-normalize (a Go
// guest's runtime start-up is most of it).
func BenchmarkInstantiate(b *testing.B) {
	for _, mod := range []struct {
		dir  string
		init InitConfig
	}{
		{"wasmhost/testdata/noop", advInit},
		{"examples/log-normalize", InitConfig{Tables: []TableSchema{logsTable}}},
	} {
		b.Run(filepath.Base(mod.dir), func(b *testing.B) {
			r := newTestRuntime(b, Config{})
			m := load(b, r, mod.dir, Limits{})
			b.ReportAllocs()
			for b.Loop() {
				in, err := m.Instantiate(context.Background(), mod.init)
				if err != nil {
					b.Fatal(err)
				}
				in.Close(context.Background())
			}
		})
	}
}

// BenchmarkLoadWarmCache is a process restart: a new Runtime loading a
// module whose compiled code is in the on-disk cache (Config.CacheDir):
// 69 ms for log-normalize, against about 0.6 s to compile it.
func BenchmarkLoadWarmCache(b *testing.B) {
	wasm := moduleWasm(b, "examples/log-normalize")
	dir := b.TempDir()
	ctx := context.Background()
	warm := func() {
		r, err := NewRuntime(ctx, Config{CacheDir: dir, Logger: quietLogger})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Load(ctx, "log-normalize", wasm); err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
	}
	warm()
	b.ReportAllocs()
	for b.Loop() {
		warm()
	}
}

// BenchmarkRewrite is the instrumentation of a 2.9 MB Go guest, done once
// per Load, +2% size: 11–14 ms before the checks of the module before it
// and of the rewrite after it, about 20 ms more with them (see
// BenchmarkLoadChecks).
func BenchmarkRewrite(b *testing.B) {
	wasm := moduleWasm(b, "examples/log-normalize")
	b.SetBytes(int64(len(wasm)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := instrument.Rewrite(wasm); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoadChecks is what a Load spends checking a module, on the 3 MB
// Go guest and the 160 KB C one, in CPU time: the rewrite (which checks
// every index of the module before and verifies the rewritten module
// after), a load from a warm compilation cache (the rewrite and the
// cached compile, in which wazero validates the rewritten module), and,
// for comparison, what wazero's interpreter takes to validate the
// original as well, which the host does not do: see
// docs/adr/0002-batch-deadline.md.
func BenchmarkLoadChecks(b *testing.B) {
	ctx := context.Background()
	for _, mod := range []struct {
		name string
		wasm func(testing.TB) []byte
	}{
		{"go", func(tb testing.TB) []byte { return moduleWasm(tb, "examples/log-normalize") }},
		{"c", func(tb testing.TB) []byte { return cModuleWasm(tb, logNormalizeC) }},
		// Within the structure limits, 30 MB of straight code: it compiles
		// in about 9 s (204 MB peak RSS); its load is not measured here.
		{"straight-30MB", func(testing.TB) []byte { return wasmtest.Funcs(60, wasmtest.StraightCode(500<<10)) }},
	} {
		wasm := mod.wasm(b)
		cpuPerOp := func(b *testing.B, op func()) {
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				op()
			}
			if cpu := cpuTime() - cpu0; cpu0 > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
			}
		}
		b.Run(mod.name+"/rewrite", func(b *testing.B) {
			cpuPerOp(b, func() {
				if _, _, err := instrument.Rewrite(wasm); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(mod.name+"/load-warm-cache", func(b *testing.B) {
			if strings.HasPrefix(mod.name, "straight") {
				b.Skip("compiles for seconds")
			}
			dir := b.TempDir()
			load := func() {
				r, err := NewRuntime(ctx, Config{CacheDir: dir, Logger: quietLogger})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.Load(ctx, mod.name, wasm); err != nil {
					b.Fatal(err)
				}
				r.Close(ctx)
			}
			load()
			cpuPerOp(b, load)
		})
		b.Run(mod.name+"/wazero-interpreter-validates-original", func(b *testing.B) {
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
			defer rt.Close(ctx)
			cpuPerOp(b, func() {
				code, err := rt.CompileModule(ctx, wasm)
				if err != nil {
					b.Fatal(err)
				}
				code.Close(ctx)
			})
		})
	}
}
