package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost"
)

// wasmOverhead compares the same module logic natively and in wazero, on
// the same corpus, in the same run.
type wasmOverhead struct {
	Batches        uint64     `json:"batches"`
	RecordsPerCall int        `json:"records_per_call"`
	Avro           wasmFigure `json:"avro"`
	JSON           wasmFigure `json:"json"`
	Note           string     `json:"note"`
}

type wasmFigure struct {
	// Events (input, 100 per record) per second on one core: natively
	// (go test -bench BenchmarkModule in the example's module: the SDK's
	// framing and row writer around the decoder and transform, the very
	// code the wasm runs) and through wasmhost (sluice's host side:
	// framing, the wazero call with its deadline instrumentation, output
	// validation, walking every row).
	NativeEventsPerSec float64 `json:"native_events_per_s"`
	WasmEventsPerSec   float64 `json:"wasm_events_per_s"`
	WasmRowsPerSec     float64 `json:"wasm_rows_per_s"`
	Slowdown           float64 `json:"wasm_slowdown_x"` // native / wasm
	Error              string  `json:"error,omitempty"`
}

func (r *rig) wasmArm(ctx context.Context) *wasmOverhead {
	w := &wasmOverhead{Batches: r.prof.wasmBatches,
		Note: "one core each, sequentially, while the broker and server idle; records per call as the engine's max_batch_bytes (1 MiB) allows"}
	w.Avro = r.wasmFormat(ctx, w, "avro", sensor.AppendAvro, "examples/sensor-batch", r.env.goAvroWasm)
	w.JSON = r.wasmFormat(ctx, w, "json", sensor.AppendJSON, "examples/sensor-batch-json", r.env.jsonWasm)
	return w
}

func (r *rig) wasmFormat(ctx context.Context, w *wasmOverhead, name string, enc encoder, dir, wasm string) wasmFigure {
	var f wasmFigure
	var file []byte
	var msgs [][]byte
	size := 0
	for b := uint64(0); b < w.Batches; b++ {
		m := enc(nil, b, sensor.DrainSendTsUs(b))
		file = sensor.AppendFramed(file, m)
		msgs = append(msgs, m)
		size += len(m)
	}
	perCall := min(1000, max(1, (1<<20)/(size/len(msgs))))
	if name == "avro" {
		w.RecordsPerCall = perCall
	}
	path := filepath.Join(r.env.dir, "corpus-"+name+".bin")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		f.Error = err.Error()
		return f
	}
	var err error
	if f.NativeEventsPerSec, err = nativeBench(ctx, dir, path, perCall); err != nil {
		f.Error = err.Error()
	}
	if f.WasmEventsPerSec, f.WasmRowsPerSec, err = wasmBench(ctx, wasm, msgs, perCall); err != nil {
		f.Error = join(f.Error, err.Error())
	}
	if f.WasmEventsPerSec > 0 {
		f.Slowdown = f.NativeEventsPerSec / f.WasmEventsPerSec
	}
	r.logf("wasm overhead (%s): native %.2fM events/s, wasm %.2fM events/s (%.2fM rows/s): %.2fx%s",
		name, f.NativeEventsPerSec/1e6, f.WasmEventsPerSec/1e6, f.WasmRowsPerSec/1e6, f.Slowdown, errSuffix(f.Error))
	return f
}

// nativeBench runs the example's BenchmarkModule on the corpus file.
func nativeBench(ctx context.Context, dir, corpus string, perCall int) (float64, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkModule$", "-benchtime", "3s", "-count", "1", ".")
	cmd.Dir = filepath.Join(wasmbuild.RepoRoot(), dir)
	cmd.Env = append(os.Environ(), "SENSOR_CORPUS="+corpus, "SENSOR_BATCH_RECORDS="+strconv.Itoa(perCall), "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("native benchmark in %s: %v\n%s", dir, err, out)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i := 1; i < len(f); i++ {
			if f[i] == "events/s" {
				return strconv.ParseFloat(f[i-1], 64)
			}
		}
	}
	return 0, fmt.Errorf("native benchmark in %s: no events/s in\n%s", dir, out)
}

// wasmBench runs the module through wasmhost, as a partition worker does,
// for at least three seconds.
func wasmBench(ctx context.Context, wasm string, msgs [][]byte, perCall int) (events, rows float64, err error) {
	code, err := os.ReadFile(wasm)
	if err != nil {
		return 0, 0, err
	}
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return 0, 0, err
	}
	defer rt.Close(ctx)
	m, err := rt.Load(ctx, filepath.Base(wasm), code)
	if err != nil {
		return 0, 0, err
	}
	in, err := m.Instantiate(ctx, wasmhost.InitConfig{Tables: []wasmhost.TableSchema{{Name: "sensor_events", Columns: sensor.Columns}}})
	if err != nil {
		return 0, 0, err
	}
	defer in.Close(ctx)
	var calls []*wasmhost.Batch
	for i := 0; i < len(msgs); i += perCall {
		b := &wasmhost.Batch{Topic: "sensor"}
		for j, v := range msgs[i:min(i+perCall, len(msgs))] {
			b.Records = append(b.Records, wasmhost.Record{Offset: int64(i + j), Timestamp: sensor.BaseTsMs, Value: v})
		}
		calls = append(calls, b)
	}
	run := func(b *wasmhost.Batch) (int, error) {
		out, err := in.Transform(ctx, b)
		if err != nil {
			return 0, err
		}
		n := 0
		for {
			res, ok := out.Next()
			if !ok {
				break
			}
			if res.Err != "" {
				return 0, fmt.Errorf("record error: %s", res.Err)
			}
			for {
				if _, _, ok := res.NextRow(); !ok {
					break
				}
				n++
			}
		}
		return n, nil
	}
	for _, b := range calls { // warm up: grow the guest's buffers
		if _, err := run(b); err != nil {
			return 0, 0, err
		}
	}
	var nrec, nrows int
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		b := calls[i%len(calls)]
		n, err := run(b)
		if err != nil {
			return 0, 0, err
		}
		nrec += len(b.Records)
		nrows += n
	}
	sec := time.Since(start).Seconds()
	return float64(nrec) * sensor.EventsPerBatch / sec, float64(nrows) / sec, nil
}
