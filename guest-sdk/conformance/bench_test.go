package conformance

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cnative"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost"
)

// The benchmark's table and batch: sensor-shaped rows (a timestamp, two
// strings, a float, a counter, two tags), ten per record, 200 records per
// batch, written by each SDK's conformance module from the record's script.
// The script interpretation is the same small loop in every language, so
// the figures compare SDK, ABI and compiler cost, not a module's parsing.
const (
	benchRowsPerRecord = 10
	benchRecords       = 200
)

var benchTable = wasmhost.TableSchema{Name: "sensor", Columns: []wasmhost.ColumnSchema{
	{Name: "ts", Type: "DateTime"}, {Name: "device", Type: "LowCardinality(String)"}, {Name: "metric", Type: "String"},
	{Name: "value", Type: "Float64"}, {Name: "seq", Type: "UInt64"}, {Name: "tags", Type: "Array(String)"},
}}

// benchScript is the script of one benchmark record (README.md, "The
// script"); guest-sdk/conformance/go/bench_test.go builds the same for its
// native run.
func benchScript(rec int) []byte {
	le := binary.LittleEndian
	var b []byte
	str := func(s string) { b = le.AppendUint32(b, uint32(len(s))); b = append(b, s...) }
	for i := 0; i < benchRowsPerRecord; i++ {
		b = le.AppendUint16(append(b, 'R'), 0)
		b = le.AppendUint32(append(b, 'T'), uint32(1700000000+rec))
		b = append(b, 's')
		str("device-" + strconv.Itoa(rec%64))
		b = append(b, 's')
		str("temperature")
		b = le.AppendUint64(append(b, 'j'), math.Float64bits(20+float64(i)/8))
		b = le.AppendUint64(append(b, 'd'), uint64(rec*benchRowsPerRecord+i))
		b = le.AppendUint32(append(b, 'A'), 2)
		b = append(b, 's')
		str("site=ams")
		b = append(b, 's')
		str("rack=" + strconv.Itoa(i))
		b = append(b, 'E')
	}
	return b
}

func benchBatch() *wasmhost.Batch {
	b := &wasmhost.Batch{Topic: "sensor"}
	for i := 0; i < benchRecords; i++ {
		b.Records = append(b.Records, wasmhost.Record{Offset: int64(i), Timestamp: 1700000000000, Value: benchScript(i)})
	}
	return b
}

// BenchmarkSDKs runs the batch through each SDK's module in the host (one
// instance, one goroutine), and the C module's native build, and reports
// rows per second.
func BenchmarkSDKs(b *testing.B) {
	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(ctx)
	batch := benchBatch()
	for _, s := range sdks {
		b.Run(s.name+"/wasm", func(b *testing.B) {
			mod, err := rt.Load(ctx, "bench-"+s.name, s.build(b))
			if err != nil {
				b.Fatal(err)
			}
			in, err := mod.Instantiate(ctx, wasmhost.InitConfig{Tables: []wasmhost.TableSchema{benchTable}})
			if err != nil {
				b.Fatal(err)
			}
			defer in.Close(ctx)
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				out, err := in.Transform(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					checkBenchOutput(b, out)
				}
			}
			b.ReportMetric(float64(b.N*benchRecords*benchRowsPerRecord)/time.Since(start).Seconds(), "rows/s")
		})
	}
	b.Run("c/native", func(b *testing.B) {
		lib, err := cnative.Load(wasmbuild.BuildCT(b, wasmbuild.Native, "guest-sdk/conformance/c"))
		if err != nil {
			b.Fatal(err)
		}
		if msg := lib.Init(initPayload(benchTable)); msg != "" {
			b.Fatal(msg)
		}
		payload := batchPayload(batch)
		if n := countRows(lib.Transform(payload)); n != benchRecords*benchRowsPerRecord {
			b.Fatalf("native: %d rows, want %d", n, benchRecords*benchRowsPerRecord)
		}
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < b.N; i++ {
			lib.Transform(payload)
		}
		b.ReportMetric(float64(b.N*benchRecords*benchRowsPerRecord)/time.Since(start).Seconds(), "rows/s")
	})
}

func checkBenchOutput(b *testing.B, out wasmhost.Output) {
	rows := 0
	for {
		r, ok := out.Next()
		if !ok {
			break
		}
		if r.Err != "" {
			b.Fatalf("record error: %s", r.Err)
		}
		rows += r.Rows()
	}
	if rows != benchRecords*benchRowsPerRecord {
		b.Fatalf("%d rows, want %d", rows, benchRecords*benchRowsPerRecord)
	}
}

func appendStr(b []byte, s []byte) []byte {
	return append(binary.LittleEndian.AppendUint32(b, uint32(len(s))), s...)
}

// initPayload and batchPayload encode the ABI's payloads for the native
// build (guest-sdk/ABI.md), as the host does for the wasm one.
func initPayload(t wasmhost.TableSchema) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 1) // the C module's "tables" parameter
	b = appendStr(appendStr(b, []byte("tables")), []byte(t.Name))
	b = le.AppendUint32(b, 1)
	b = appendStr(b, []byte(t.Name))
	b = le.AppendUint32(b, uint32(len(t.Columns)))
	for _, c := range t.Columns {
		b = appendStr(appendStr(b, []byte(c.Name)), []byte(c.Type))
	}
	return b
}

func batchPayload(batch *wasmhost.Batch) []byte {
	le := binary.LittleEndian
	b := appendStr(nil, []byte(batch.Topic))
	b = le.AppendUint32(b, uint32(batch.Partition))
	b = le.AppendUint32(b, uint32(len(batch.Records)))
	for _, r := range batch.Records {
		b = le.AppendUint64(b, uint64(r.Offset))
		b = le.AppendUint64(b, uint64(r.Timestamp))
		b = appendStr(appendStr(b, r.Key), r.Value)
		b = le.AppendUint32(b, 0)
	}
	return b
}

// countRows counts the rows of an output payload, or -1 if a record failed.
func countRows(p []byte) int {
	le := binary.LittleEndian
	if len(p) < 4 {
		return -1
	}
	n, off, rows := int(le.Uint32(p)), 4, 0
	for i := 0; i < n; i++ {
		if p[off] != 0 {
			return -1
		}
		nr := int(le.Uint32(p[off+1:]))
		off += 5
		for j := 0; j < nr; j++ {
			off += 2
			off += 4 + int(le.Uint32(p[off:]))
		}
		rows += nr
	}
	if off != len(p) {
		return -1
	}
	return rows
}
