package wasmhost

import (
	"context"
	"testing"
	"time"
)

// BenchmarkSensorBatchSDKs runs the sensor-batch module of every SDK on
// the same 1000 batches of the workload's corpus (100,000 events), in
// calls of 200 records, as sluice runs them (wasm with the deadline
// instrumentation), and the C port natively (clang -O2 both ways): the
// wasm-vs-native ratio and rows per core-second of each, in one run.
//
//	go test -run '^$' -bench SensorBatchSDKs -benchtime 3s ./wasmhost/
//
// rows/s is per wall second; cpu-ns/row is the process's CPU time per row
// (host and guest), rows/core-s its inverse.
func BenchmarkSensorBatchSDKs(b *testing.B) {
	const batches, perCall = 1000, 200
	msgs := sensorCorpus(0, batches)
	var calls []*Batch
	for i := 0; i < batches; i += perCall {
		calls = append(calls, recordsBatch(msgs[i:i+perCall]))
	}
	cfg := InitConfig{Tables: []TableSchema{sensorTable}}
	wantRows := -1
	checkRows := func(b *testing.B, rows int) {
		if wantRows < 0 {
			wantRows = rows
		}
		if rows != wantRows || rows == 0 {
			b.Fatalf("%d rows from %d batches, want %d (the first module's)", rows, batches, wantRows)
		}
	}
	countRows := func(b *testing.B, out Output) int {
		n := 0
		for {
			r, ok := out.Next()
			if !ok {
				return n
			}
			if r.Err != "" {
				b.Fatal(r.Err)
			}
			n += r.Rows()
		}
	}
	report := func(b *testing.B, rows int, cpu0 time.Duration) {
		total := float64(b.N) * float64(rows)
		b.ReportMetric(total/b.Elapsed().Seconds(), "rows/s")
		cpu := float64((cpuTime() - cpu0).Nanoseconds())
		b.ReportMetric(cpu/total, "cpu-ns/row")
		b.ReportMetric(total/cpu*1e9, "rows/core-s")
	}
	wasmArms := []sensorBatchPort{{"sensor-batch-go", func(tb testing.TB) []byte { return moduleWasm(tb, "examples/sensor-batch") }}}
	wasmArms = append(wasmArms, sensorBatchPorts...)
	for _, arm := range wasmArms {
		b.Run(arm.name+"/wasm", func(b *testing.B) {
			r := newTestRuntime(b, Config{})
			in := instantiate(b, loadBytes(b, r, arm.name, arm.wasm(b), Limits{}), cfg)
			run := func(c *Batch) int {
				out, err := in.Transform(context.Background(), c)
				if err != nil {
					b.Fatal(err)
				}
				return countRows(b, out)
			}
			rows := 0
			for _, c := range calls {
				rows += run(c)
			}
			checkRows(b, rows)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				run(calls[i%len(calls)])
			}
			report(b, rows/len(calls), cpu0)
		})
	}
	b.Run("sensor-batch-c/native", func(b *testing.B) {
		native := cModuleNative(b, "examples/sensor-batch-c")
		if msg := native.Init(encodeInit(cfg)); msg != "" {
			b.Fatalf("native init: %s", msg)
		}
		lim, err := Limits{}.withDefaults()
		if err != nil {
			b.Fatal(err)
		}
		payloads := make([][]byte, len(calls))
		for i, c := range calls {
			payloads[i] = make([]byte, c.encodedSize())
			c.encode(payloads[i])
		}
		run := func(i int) int {
			out := Output{total: perCall}
			if err := parseOutput(&out, native.Transform(payloads[i]), perCall, lim); err != nil {
				b.Fatal(err)
			}
			return countRows(b, out)
		}
		rows := 0
		for i := range payloads {
			rows += run(i)
		}
		checkRows(b, rows)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		for i := 0; b.Loop(); i++ {
			run(i % len(payloads))
		}
		report(b, rows/len(calls), cpu0)
	})
}
