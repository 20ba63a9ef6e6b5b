package sensor

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost"
)

// BenchmarkModuleWasm runs the sensor-batch modules in wazero through
// wasmhost, as a partition worker does, on 1000 batches in calls of 200
// records; compare with BenchmarkModule in examples/sensor-batch and
// examples/sensor-batch-json (the same code natively). The rig's wasm arm
// measures both in one run. SENSOR_WASM_DIR builds another module
// directory in place of examples/sensor-batch (for experiments).
func BenchmarkModuleWasm(b *testing.B) {
	for _, tt := range []struct {
		name string
		dir  string
		enc  func([]byte, uint64, int64) []byte
	}{
		{"avro", "examples/sensor-batch", AppendAvro},
		{"json", "examples/sensor-batch-json", AppendJSON},
	} {
		b.Run(tt.name, func(b *testing.B) {
			dir := filepath.Join(wasmbuild.RepoRoot(), tt.dir)
			if d := os.Getenv("SENSOR_WASM_DIR"); d != "" {
				if tt.name != "avro" {
					b.Skip("SENSOR_WASM_DIR replaces the Avro module")
				}
				dir = d
			}
			wasm := filepath.Join(b.TempDir(), "m.wasm")
			if err := wasmbuild.Build(context.Background(), dir, wasm); err != nil {
				b.Fatal(err)
			}
			code, err := os.ReadFile(wasm)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close(ctx)
			m, err := rt.Load(ctx, tt.name, code)
			if err != nil {
				b.Fatal(err)
			}
			in, err := m.Instantiate(ctx, wasmhost.InitConfig{Tables: []wasmhost.TableSchema{{Name: "sensor_events", Columns: Columns}}})
			if err != nil {
				b.Fatal(err)
			}
			const batches, perCall = 1000, 200
			var calls []*wasmhost.Batch
			for i := uint64(0); i < batches; i += perCall {
				c := &wasmhost.Batch{Topic: "sensor"}
				for j := i; j < i+perCall; j++ {
					c.Records = append(c.Records, wasmhost.Record{Offset: int64(j), Value: tt.enc(nil, j, DrainSendTsUs(j))})
				}
				calls = append(calls, c)
			}
			rows := 0
			run := func(c *wasmhost.Batch) {
				out, err := in.Transform(ctx, c)
				if err != nil {
					b.Fatal(err)
				}
				for {
					res, ok := out.Next()
					if !ok {
						break
					}
					if res.Err != "" {
						b.Fatal(res.Err)
					}
					rows += res.Rows()
				}
			}
			for _, c := range calls {
				run(c)
			}
			if want := int(ExpectedRows(batches)); rows != want && os.Getenv("SENSOR_WASM_DIR") == "" {
				b.Fatalf("%d rows, want %d", rows, want)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				run(calls[i%len(calls)])
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*perCall*EventsPerBatch)/sec, "events/s")
		})
	}
}
