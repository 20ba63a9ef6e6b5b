package wasmhost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/cnative"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// BenchmarkSensorBatchSDKs runs the sensor-batch module of every SDK on
// the same 1000 batches of the workload's corpus (100,000 events), in
// calls of 200 records, as sluice runs them (wasm with the deadline
// instrumentation), and the Go, C and Rust modules natively, on the same
// payloads: the wasm-vs-native ratio and rows per core-second of each, in
// one run.
//
//	go test -run '^$' -bench SensorBatchSDKs -benchtime 3s ./wasmhost/
//
// rows/s is per wall second; cpu-ns/row is the process's CPU time per row
// (host and guest), rows/core-s its inverse. The native builds are compiled
// as their wasm builds are (clang -O2; cargo's release profile; the Go
// toolchain's defaults). C and Rust are shared libraries called in process,
// one cgo call per batch; the Go module, which cannot share this process's
// Go runtime, is its own native build (examples/sensor-batch/native.go)
// running the same handler in process on the same payloads, in a child
// process whose CPU time for the calls alone it reports. Every native arm
// checks each output's framing and counts its rows, as the host does.
func BenchmarkSensorBatchSDKs(b *testing.B) {
	const batches, perCall = 1000, 200
	calls := sensorCalls(batches, perCall)
	cfg := InitConfig{Tables: []TableSchema{sensorTable}}
	check := rowsChecker(batches)
	wasmArms := []sensorBatchPort{{"sensor-batch-go", func(tb testing.TB) []byte { return moduleWasm(tb, "examples/sensor-batch") }}}
	wasmArms = append(wasmArms, sensorBatchPorts...)
	for _, arm := range wasmArms {
		b.Run(arm.name+"/wasm", func(b *testing.B) { benchSensorWasm(b, arm, cfg, calls, check) })
	}
	payloads := encodeCalls(calls)
	for _, arm := range sensorBatchNatives {
		b.Run(arm.name+"/native", func(b *testing.B) { benchSensorNative(b, arm.load(b), cfg, payloads, perCall, check) })
	}
	b.Run("sensor-batch-go/native", func(b *testing.B) {
		d := startGoNative(b, "examples/sensor-batch", encodeInit(cfg), payloads)
		check(b, d.rows)
		b.ResetTimer()
		rows, cpu, wall := d.run(b, b.N)
		b.StopTimer()
		if want := b.N * d.rows / len(payloads); b.N%len(payloads) == 0 && rows != want {
			b.Fatalf("%d calls wrote %d rows, want %d", b.N, rows, want)
		}
		reportSensorRows(b, float64(rows), cpu, wall)
	})
}

// BenchmarkSensorBatchJSON runs the sensor-batch modules that read the
// JSON form of the corpus, the Go SDK's (examples/sensor-batch-json) and
// the C module with format=json, on the same 1000 batches in calls of 200
// records, as BenchmarkSensorBatchSDKs does, and the C module natively.
//
//	go test -run '^$' -bench SensorBatchJSON -benchtime 3s ./wasmhost/
func BenchmarkSensorBatchJSON(b *testing.B) {
	const batches, perCall = 1000, 200
	calls := sensorJSONCalls(batches, perCall)
	check := rowsChecker(batches)
	goCfg := InitConfig{Tables: []TableSchema{sensorTable}}
	cCfg := InitConfig{Params: map[string]string{"format": "json"}, Tables: []TableSchema{sensorTable}}
	b.Run("sensor-batch-json-go/wasm", func(b *testing.B) {
		benchSensorWasm(b, sensorBatchPort{"sensor-batch-json", func(tb testing.TB) []byte { return moduleWasm(tb, "examples/sensor-batch-json") }},
			goCfg, calls, check)
	})
	c := sensorBatchPort{"sensor-batch-c", func(tb testing.TB) []byte { return cModuleWasm(tb, "examples/sensor-batch-c") }}
	b.Run("sensor-batch-c-json/wasm", func(b *testing.B) { benchSensorWasm(b, c, cCfg, calls, check) })
	b.Run("sensor-batch-c-json/native", func(b *testing.B) {
		benchSensorNative(b, cModuleNative(b, "examples/sensor-batch-c"), cCfg, encodeCalls(calls), perCall, check)
	})
}

// rowsChecker returns a check that every arm wrote the rows the first one
// did from the batches, and some.
func rowsChecker(batches int) func(b *testing.B, rows int) {
	want := -1
	return func(b *testing.B, rows int) {
		if want < 0 {
			want = rows
		}
		if rows != want || rows == 0 {
			b.Fatalf("%d rows from %d batches, want %d (the first module's)", rows, batches, want)
		}
	}
}

func countSensorRows(b *testing.B, out Output) int {
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

func reportSensorRows(b *testing.B, total float64, cpu, wall time.Duration) {
	b.ReportMetric(total/wall.Seconds(), "rows/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/total, "cpu-ns/row")
	b.ReportMetric(total/float64(cpu.Nanoseconds())*1e9, "rows/core-s")
}

func encodeCalls(calls []*Batch) [][]byte {
	payloads := make([][]byte, len(calls))
	for i, c := range calls {
		payloads[i] = make([]byte, c.encodedSize())
		c.encode(payloads[i])
	}
	return payloads
}

// benchSensorWasm runs calls through the wasm module of arm, instantiated
// with cfg, one call per iteration.
func benchSensorWasm(b *testing.B, arm sensorBatchPort, cfg InitConfig, calls []*Batch, check func(*testing.B, int)) {
	r := newTestRuntime(b, Config{})
	in := instantiate(b, loadBytes(b, r, arm.name, arm.wasm(b), Limits{}), cfg)
	run := func(c *Batch) int {
		out, err := in.Transform(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		return countSensorRows(b, out)
	}
	rows := 0
	for _, c := range calls {
		rows += run(c)
	}
	check(b, rows)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		run(calls[i%len(calls)])
	}
	reportSensorRows(b, float64(b.N)*float64(rows/len(calls)), cpuTime()-cpu0, b.Elapsed())
}

// benchSensorNative runs the payloads through a native build, initialised
// with cfg, one call per iteration, checking each output as the host does.
func benchSensorNative(b *testing.B, native *cnative.Module, cfg InitConfig, payloads [][]byte, perCall int, check func(*testing.B, int)) {
	if msg := native.Init(encodeInit(cfg)); msg != "" {
		b.Fatalf("native init: %s", msg)
	}
	lim, err := Limits{}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	run := func(i int) int {
		out := Output{total: perCall}
		if err := parseOutput(&out, native.Transform(payloads[i]), perCall, lim); err != nil {
			b.Fatal(err)
		}
		return countSensorRows(b, out)
	}
	rows := 0
	for i := range payloads {
		rows += run(i)
	}
	check(b, rows)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; b.Loop(); i++ {
		run(i % len(payloads))
	}
	reportSensorRows(b, float64(b.N)*float64(rows/len(payloads)), cpuTime()-cpu0, b.Elapsed())
}

// goNatives are the Go modules built natively by this test binary, each once.
var goNatives sync.Map // repo-relative dir → *goNative

type goNative struct {
	once sync.Once
	path string
	err  error
}

// goNativeDriver is a running native build of a Go module's driver: it
// runs the module's handler on the payloads it was given (see
// examples/sensor-batch/native.go).
type goNativeDriver struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	rows int // the rows of one pass over the payloads
}

// startGoNative builds the Go module at repoRelDir for the build machine
// (once per test binary), writes the init payload and the batch payloads
// for it, and starts it; it is stopped when tb ends.
func startGoNative(tb testing.TB, repoRelDir string, init []byte, batches [][]byte) *goNativeDriver {
	tb.Helper()
	v, _ := goNatives.LoadOrStore(repoRelDir, &goNative{})
	n := v.(*goNative)
	n.once.Do(func() {
		n.path = filepath.Join(buildDir, filepath.Base(repoRelDir)+"-native")
		cmd := exec.Command("go", "build", "-trimpath", "-o", n.path, ".")
		cmd.Dir = filepath.Join(wasmbuild.RepoRoot(), repoRelDir)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			n.err = fmt.Errorf("build %s natively: %w\n%s", repoRelDir, err, stderr.String())
		}
	})
	if n.err != nil {
		tb.Fatal(n.err)
	}
	var file []byte
	for _, p := range append([][]byte{init}, batches...) {
		file = binary.LittleEndian.AppendUint32(file, uint32(len(p)))
		file = append(file, p...)
	}
	payloads := filepath.Join(tb.TempDir(), "payloads")
	if err := os.WriteFile(payloads, file, 0o644); err != nil {
		tb.Fatal(err)
	}
	d := &goNativeDriver{cmd: exec.Command(n.path, payloads)}
	d.cmd.Stderr = os.Stderr
	var err error
	if d.in, err = d.cmd.StdinPipe(); err != nil {
		tb.Fatal(err)
	}
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		d.in.Close()
		if err := d.cmd.Wait(); err != nil {
			tb.Errorf("%s: %v", n.path, err)
		}
	})
	d.out = bufio.NewScanner(stdout)
	var calls int
	line := d.line(tb)
	if _, err := fmt.Sscanf(line, "ready %d %d", &d.rows, &calls); err != nil || calls != len(batches) {
		tb.Fatalf("%s: %q, want ready ROWS %d", n.path, line, len(batches))
	}
	return d
}

func (d *goNativeDriver) line(tb testing.TB) string {
	tb.Helper()
	if !d.out.Scan() {
		tb.Fatalf("%s ended: %v", d.cmd.Path, d.out.Err())
	}
	return d.out.Text()
}

// run has the driver make calls calls, cycling through its payloads (from
// the first, on a new driver), and returns the rows they wrote and the
// driver's CPU and wall time for them.
func (d *goNativeDriver) run(tb testing.TB, calls int) (rows int, cpu, wall time.Duration) {
	tb.Helper()
	if _, err := fmt.Fprintf(d.in, "run %d\n", calls); err != nil {
		tb.Fatal(err)
	}
	line := d.line(tb)
	if _, err := fmt.Sscan(line, &rows, &cpu, &wall); err != nil || strings.Count(line, " ") != 2 {
		tb.Fatalf("%s: %q, want ROWS CPU_NS WALL_NS", d.cmd.Path, line)
	}
	return rows, cpu, wall
}

// BenchmarkSensorBatchGoWriters runs the Go SDK's sensor-batch module
// twice in one process, on the same calls of 200 records: with its
// default row writer (Output.Flat, FlatRow) and with the module parameter
// writer=row (Output.Row), which writes the same rows. Each iteration runs
// one call on each, in turn; the figures are the median of the wall time
// per row of each writer's calls, and their ratio.
//
//	go test -run '^$' -bench SensorBatchGoWriters -benchtime 200x ./wasmhost/
func BenchmarkSensorBatchGoWriters(b *testing.B) {
	const batches, perCall = 1000, 200
	calls := sensorCalls(batches, perCall)
	r := newTestRuntime(b, Config{})
	m := loadBytes(b, r, "sensor-batch-go", moduleWasm(b, "examples/sensor-batch"), Limits{})
	ns := roundRobin(b, calls, []string{"Row", "FlatRow"}, []*Instance{
		instantiate(b, m, InitConfig{Params: map[string]string{"writer": "row"}, Tables: []TableSchema{sensorTable}}),
		instantiate(b, m, InitConfig{Tables: []TableSchema{sensorTable}}),
	})
	row, flat := ns[0], ns[1]
	b.ReportMetric(row, "row-ns/row")
	b.ReportMetric(flat, "flat-ns/row")
	b.ReportMetric(row/flat, "row/flat")
}

// roundRobin runs calls on each of insts in turn, rotating which goes
// first, after a pass that checks that they all write the same rows (each
// named in names for its message), and returns the median wall time per
// row of each one's calls.
func roundRobin(b *testing.B, calls []*Batch, names []string, insts []*Instance) []float64 {
	b.Helper()
	// run makes one call and counts its rows; with collect, it returns
	// their bytes too.
	run := func(in *Instance, c *Batch, collect bool) (rows int, data []byte) {
		out, err := in.Transform(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		for {
			rec, ok := out.Next()
			if !ok {
				return rows, data
			}
			if rec.Err != "" {
				b.Fatal(rec.Err)
			}
			rows += rec.Rows()
			for collect {
				_, row, ok := rec.NextRow()
				if !ok {
					break
				}
				data = append(data, row...)
			}
		}
	}
	rows := make([]int, len(calls))
	for i, c := range calls { // warm up, and check that they agree
		n, want := run(insts[0], c, true)
		for j, in := range insts[1:] {
			if m, got := run(in, c, true); m != n || n == 0 || !bytes.Equal(got, want) {
				b.Fatalf("call %d: %s wrote %d rows (%d bytes), %s %d (%d bytes)", i, names[0], n, len(want), names[j+1], m, len(got))
			}
		}
		rows[i] = n
	}
	ns := make([][]float64, len(insts))
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := calls[i%len(calls)]
		for j := range insts {
			k := (i + j) % len(insts) // alternate which goes first
			t0 := time.Now()
			run(insts[k], c, false)
			ns[k] = append(ns[k], float64(time.Since(t0).Nanoseconds())/float64(rows[i%len(calls)]))
		}
	}
	med := make([]float64, len(insts))
	for k, v := range ns {
		v = slices.Clone(v)
		slices.Sort(v)
		med[k] = v[len(v)/2]
	}
	return med
}

// BenchmarkSensorBatchBuilds compares builds of the sensor-batch module
// (of the Go SDK or any other: the same table, the same rows) in one
// process, on the same calls of 200 records: SLUICE_BENCH_MODULES lists
// their .wasm files, comma-separated, the first the baseline. It checks
// that every build writes the same rows, then runs one call on each in
// turn, rotating which goes first; the figures are each build's median
// wall time per row and its ratio to the first's. To compare a change
// with the code before it, build the module in a worktree of each:
//
//	git worktree add /tmp/before HEAD~1
//	(cd /tmp/before/examples/sensor-batch && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o /tmp/before.wasm .)
//	(cd examples/sensor-batch && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o /tmp/after.wasm .)
//	SLUICE_BENCH_MODULES=/tmp/before.wasm,/tmp/after.wasm go test -run '^$' -bench SensorBatchBuilds -benchtime 1000x -count 3 ./wasmhost/
//
// SLUICE_BENCH_FORMAT=json runs builds of a module that reads the JSON
// form of the corpus with the module parameter format=json (the C module)
// on the same batches in that form.
func BenchmarkSensorBatchBuilds(b *testing.B) {
	list := os.Getenv("SLUICE_BENCH_MODULES")
	if list == "" {
		b.Skip("set SLUICE_BENCH_MODULES to two or more builds of the sensor-batch module, comma-separated (see the comment)")
	}
	paths := strings.Split(list, ",")
	if len(paths) < 2 {
		b.Fatalf("SLUICE_BENCH_MODULES names %d module, want two or more to compare", len(paths))
	}
	const batches, perCall = 1000, 200
	calls := sensorCalls(batches, perCall)
	cfg := InitConfig{Tables: []TableSchema{sensorTable}}
	switch f := os.Getenv("SLUICE_BENCH_FORMAT"); f {
	case "", "avro":
	case "json":
		calls = sensorJSONCalls(batches, perCall)
		cfg.Params = map[string]string{"format": "json"}
	default:
		b.Fatalf("SLUICE_BENCH_FORMAT=%q: want avro or json", f)
	}
	r := newTestRuntime(b, Config{})
	insts := make([]*Instance, len(paths))
	for i, p := range paths {
		wasm, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		m := loadBytes(b, r, fmt.Sprintf("build-%d", i), wasm, Limits{})
		insts[i] = instantiate(b, m, cfg)
	}
	ns := roundRobin(b, calls, paths, insts)
	for i, v := range ns {
		name := string(rune('a' + i))
		b.ReportMetric(v, name+"-ns/row")
		if i > 0 {
			b.ReportMetric(v/ns[0], name+"/a")
		}
	}
}

// sensorJSONCalls is the first n batches of the JSON form of the corpus in
// calls of perCall records.
func sensorJSONCalls(n, perCall int) []*Batch {
	var calls []*Batch
	for i := 0; i < n; i += perCall {
		var msgs [][]byte
		for j := i; j < i+perCall; j++ {
			msgs = append(msgs, sensorJSON(nil, uint64(j)))
		}
		calls = append(calls, recordsBatch(msgs))
	}
	return calls
}

// sensorCalls is the first n batches of the workload's corpus in calls of
// perCall records.
func sensorCalls(n, perCall int) []*Batch {
	msgs := sensorCorpus(0, uint64(n))
	var calls []*Batch
	for i := 0; i < n; i += perCall {
		calls = append(calls, recordsBatch(msgs[i:i+perCall]))
	}
	return calls
}
