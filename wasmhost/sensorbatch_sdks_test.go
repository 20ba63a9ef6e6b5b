package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/cnative"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The C, Rust and AssemblyScript ports of sensor-batch
// (examples/sensor-batch-c, -rust, -as) must write what the Go module
// (examples/sensor-batch) writes, in both layouts of the table (ClickHouse
// 18.16's and the modern one with DateTime64): the same rows, byte for
// byte, the same per-record errors, and refuse the same schemas. The C and
// Rust ports' native builds must too. The corpus is the
// workload's (benchmarks/sensor), generated here from its formulas: that
// package imports wasmhost, so this test cannot import it.

type sensorBatchPort struct {
	name string // module name
	wasm func(tb testing.TB) []byte
}

var sensorBatchPorts = []sensorBatchPort{
	{"sensor-batch-c", func(tb testing.TB) []byte { return cModuleWasm(tb, "examples/sensor-batch-c") }},
	{"sensor-batch-as", func(tb testing.TB) []byte {
		return readBuilt(tb, wasmbuild.BuildAST(tb, "examples/sensor-batch-as/index.ts"))
	}},
	{"sensor-batch-rust", func(tb testing.TB) []byte {
		return readBuilt(tb, wasmbuild.BuildRustT(tb, "examples/sensor-batch-rust"))
	}},
}

// sensorBatchNatives are the ports built for the build machine, loaded in
// process with the C SDK's native entry points.
var sensorBatchNatives = []struct {
	name string
	load func(tb testing.TB) *cnative.Module
}{
	{"sensor-batch-c", func(tb testing.TB) *cnative.Module { return cModuleNative(tb, "examples/sensor-batch-c") }},
	{"sensor-batch-rust", func(tb testing.TB) *cnative.Module {
		return rustModuleNative(tb, "examples/sensor-batch-rust", "sensor_batch_rust")
	}},
}

// rustNatives are the Rust modules built natively by this test binary,
// each once: a library's state is global, so each is loaded once.
var rustNatives sync.Map // repo-relative dir → *rustNative

type rustNative struct {
	once sync.Once
	mod  *cnative.Module
	err  error
}

// rustModuleNative builds the Rust cdylib crate at repoRelDir for the build
// machine with Debian's cargo (release, offline, the profile of its wasm
// build) and loads it; lib is the crate's library name. The SDK's export!
// gives a native build the C SDK's entry points.
func rustModuleNative(tb testing.TB, repoRelDir, lib string) *cnative.Module {
	tb.Helper()
	wasmbuild.SkipShort(tb)
	v, _ := rustNatives.LoadOrStore(repoRelDir, &rustNative{})
	n := v.(*rustNative)
	n.once.Do(func() {
		ctx := context.Background()
		if n.err = wasmbuild.CheckRust(ctx); n.err != nil {
			return
		}
		target, err := wasmbuild.RustTargetDir()
		if err != nil {
			n.err = err
			return
		}
		args := []string{"build", "--release", "--offline", "--manifest-path", filepath.Join(wasmbuild.RepoRoot(), repoRelDir, "Cargo.toml"),
			"--target-dir", target, "--message-format", "short", "--quiet"}
		cmd := exec.CommandContext(ctx, wasmbuild.DebianCargo, args...)
		cmd.Env = wasmbuild.RustEnv()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			n.err = fmt.Errorf("build %s natively: cargo %s: %w\n%s", repoRelDir, strings.Join(args, " "), err, stderr.String())
			return
		}
		// A copy of its own: a later build may replace the target's file.
		b, err := os.ReadFile(filepath.Join(target, "release", "lib"+lib+".so"))
		if err != nil {
			n.err = err
			return
		}
		path := filepath.Join(buildDir, "lib"+lib+".so")
		if n.err = os.WriteFile(path, b, 0o755); n.err != nil {
			return
		}
		n.mod, n.err = cnative.Load(path)
	})
	if n.err != nil {
		tb.Fatal(n.err)
	}
	return n.mod
}

// transformNative runs msgs through a native build in one call and returns
// its results, with the host's check of the output.
func transformNative(tb testing.TB, native *cnative.Module, msgs [][]byte) []recordResult {
	tb.Helper()
	lim, err := Limits{}.withDefaults()
	if err != nil {
		tb.Fatal(err)
	}
	batch := recordsBatch(msgs)
	payload := make([]byte, batch.encodedSize())
	batch.encode(payload)
	out := Output{total: len(msgs)}
	if err := parseOutput(&out, native.Transform(payload), len(msgs), lim); err != nil {
		tb.Fatalf("native output: %v", err)
	}
	return collect(out)
}

func readBuilt(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// sensorColumns18 is sensor_events of ClickHouse 18.16, as the host passes it.
var sensorColumns18 = []ColumnSchema{
	{Name: "batch_id", Type: "UInt64"}, {Name: "event_seq", Type: "UInt16"},
	{Name: "sensor", Type: "LowCardinality(String)"}, {Name: "region", Type: "LowCardinality(String)"},
	{Name: "name_upper", Type: "LowCardinality(String)"}, {Name: "unit", Type: "LowCardinality(String)"},
	{Name: "value", Type: "Int64"}, {Name: "value_scaled", Type: "Int64"},
	{Name: "quality", Type: "Nullable(Float64)"}, {Name: "tags", Type: "Array(LowCardinality(String))"},
	{Name: "batch_ts", Type: "DateTime"}, {Name: "batch_ts_ms", Type: "UInt16"}, {Name: "send_ts_us", Type: "Int64"},
}

var sensorTable = TableSchema{Name: "sensor_events", Columns: sensorColumns18}

// sensorColumnsModern is the reference layout of a modern ClickHouse
// (batch_ts DateTime64(3), send_ts DateTime64(6)).
var sensorColumnsModern = append(append([]ColumnSchema{}, sensorColumns18[:10]...),
	ColumnSchema{Name: "batch_ts", Type: "DateTime64(3)"}, ColumnSchema{Name: "send_ts", Type: "DateTime64(6)"})

var sensorTableModern = TableSchema{Name: "sensor_events", Columns: sensorColumnsModern}

// sensorLayouts are the tables the modules write, each layout's.
var sensorLayouts = []struct {
	name  string
	table TableSchema
}{{"18.16", sensorTable}, {"modern", sensorTableModern}}

const sensorBaseTsMs = 1772000000000

func avroLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func avroString(dst []byte, s string) []byte {
	return append(avroLong(dst, int64(len(s))), s...)
}

// sensorAvro appends batch b of the workload's corpus, Confluent-framed
// Avro, in drain mode (send_ts_us = base*1000 + b).
func sensorAvro(dst []byte, b uint64) []byte {
	units := [8]string{"count", "bytes", "ms", "drop", "ratio", "celsius", "volts", "rpm"}
	dst = append(dst, 0, 0, 0, 0, 1)
	dst = avroLong(dst, int64(b))
	dst = avroString(dst, "sensor-"+strconv.FormatUint(b%1024, 10))
	if b%10 == 0 {
		dst = avroLong(dst, 0)
	} else {
		dst = avroString(avroLong(dst, 1), "region-"+strconv.FormatUint(b%7, 10))
	}
	dst = avroLong(dst, sensorBaseTsMs+int64(b))
	dst = avroLong(dst, sensorBaseTsMs*1000+int64(b))
	dst = avroLong(dst, 100)
	for s := uint64(0); s < 100; s++ {
		dst = avroLong(dst, int64(s))
		dst = avroString(dst, "metric_"+strconv.FormatUint((b*31+s)%32, 10))
		dst = avroString(dst, units[(b*7+s)%8])
		dst = avroLong(dst, int64((b*1000003+s*97)%2147483647))
		if (b+s)%5 == 0 {
			dst = avroLong(dst, 0)
		} else {
			dst = avroLong(dst, 1)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64((b*13+s*7)%100)/100.0))
		}
		if n := (b + s) % 4; n > 0 {
			dst = avroLong(dst, int64(n))
			for j := uint64(0); j < n; j++ {
				dst = avroString(dst, "tag-"+strconv.FormatUint((b+s+j)%16, 10))
			}
		}
		dst = avroLong(dst, 0)
	}
	return avroLong(dst, 0)
}

func sensorCorpus(from, n uint64) [][]byte {
	msgs := make([][]byte, 0, n)
	for b := from; b < from+n; b++ {
		msgs = append(msgs, sensorAvro(nil, b))
	}
	return msgs
}

// sensorMalformed are records each rule of the decoder and of the row
// checks refuses, and edge cases it accepts: the framing (bad magic byte,
// wrong schema id), every truncation of a batch, hand-made datums with
// negative blocks, bad unions, overflowing varints, values out of the
// table's range.
func sensorMalformed() [][]byte {
	good := sensorAvro(nil, 7)
	out := [][]byte{nil, {1}, {0, 0, 0, 0}, {1, 0, 0, 0, 1}, {0xff, 0, 0, 0, 1, 2}, {0, 0, 0, 0, 2}, {0, 0, 0, 1, 0}, {0, 0xff, 0xff, 0xff, 0xff}}
	bad := append([]byte{}, good...)
	bad[0] = 0x7f
	out = append(out, bad)
	bad = append([]byte{}, good...)
	bad[4] = 9
	out = append(out, bad)
	for i := 5; i < len(good); i += 3 { // truncated datums
		out = append(out, good[:i])
	}
	out = append(out, append(append([]byte{}, good...), 0, 1)) // trailing bytes
	hdrSend := func(id, ts int64, region []byte, send int64) []byte {
		d := avroLong([]byte{0, 0, 0, 0, 1}, id)
		d = avroString(d, "s")
		d = append(d, region...)
		d = avroLong(d, ts)
		return avroLong(d, send)
	}
	hdr := func(id, ts int64, region []byte) []byte { return hdrSend(id, ts, region, 5) }
	ok := hdr(3, sensorBaseTsMs, []byte{2, 4, 'r', 'x'})
	ev := func(seq int64, name, unit string, value int64, quality []byte, tags []byte) []byte {
		d := avroLong(nil, seq)
		d = avroString(d, name)
		d = avroString(d, unit)
		d = avroLong(d, value)
		d = append(d, quality...)
		return append(d, tags...)
	}
	q := func(f float64) []byte { return binary.LittleEndian.AppendUint64([]byte{2}, math.Float64bits(f)) }
	cat := func(parts ...[]byte) []byte {
		var d []byte
		for _, p := range parts {
			d = append(d, p...)
		}
		return d
	}
	overflow := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}
	minLong := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	tags2 := cat(avroLong(nil, 2), avroString(nil, "a"), avroString(nil, "Bé"), []byte{0})
	negTags := cat(avroLong(nil, -2), avroLong(nil, 6), avroString(nil, "x"), avroString(nil, "y"), avroLong(nil, 1), avroString(nil, "z"), []byte{0})
	e1 := ev(0, "metric_zé", "ms", math.MaxInt64, []byte{0}, tags2)
	e2 := ev(65535, "m", "rpm", math.MinInt64, q(math.NaN()), negTags)
	out = append(out,
		cat(ok, []byte{2}, e1, []byte{0}),                                // one event
		cat(ok, avroLong(nil, -2), avroLong(nil, 99), e1, e2, []byte{0}), // negative events block
		cat(ok, []byte{2}, e1, []byte{2}, e2, []byte{0}),                 // two blocks
		cat(ok, []byte{2}, ev(0, "m", "drop", 1, q(1), []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(0, "m", "u", 1, q(0.19999), []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(0, "m", "u", 1, q(0.2), []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(0, "m", "u", 1, q(math.Inf(-1)), []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(65536, "m", "u", 1, []byte{0}, []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(-1, "m", "u", 1, []byte{0}, []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(1<<31, "m", "u", 1, []byte{0}, []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(-1<<31-1, "m", "u", 1, []byte{0}, []byte{0}), []byte{0}),
		cat(ok, []byte{4}, e1, ev(70000, "m", "drop", 1, []byte{0}, []byte{0}), []byte{0}),
		cat(ok, []byte{4}, e1, ev(1, "m", "u", 1, []byte{4}, []byte{0}), []byte{0}),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{2, 0, 0}, nil)),
		cat(ok, []byte{2}, avroLong(nil, 1), avroLong(nil, -3), []byte("abc")),
		cat(ok, []byte{2}, avroLong(nil, 1), avroLong(nil, 300), []byte("abc")),
		cat(ok, []byte{2}, avroLong(nil, 1), overflow),
		cat(ok, []byte{2}, avroLong(nil, 1), avroString(nil, "n"), avroLong(nil, -1)),
		cat(ok, []byte{2}, avroLong(nil, 1), avroString(nil, "n"), avroString(nil, "u"), overflow),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, overflow, nil)),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, minLong)),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, avroLong(avroLong(nil, -1), -4))),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, cat(avroLong(nil, -1), overflow))),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, avroLong(nil, -1))),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, cat(avroLong(nil, 1), avroLong(nil, -2)))),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, cat(avroLong(nil, 1), avroLong(nil, 9), []byte("ab")))),
		cat(ok, []byte{2}, ev(1, "m", "u", 1, []byte{0}, overflow)),
		cat(ok, minLong),
		cat(ok, avroLong(avroLong(nil, -1), -5)),
		cat(ok, avroLong(nil, -1)),
		cat(ok, overflow),
		cat(ok, []byte{0}, []byte{0}),
		cat(hdr(-1, sensorBaseTsMs, []byte{0}), []byte{0}),
		cat(hdr(1, -1, []byte{0}), []byte{0}),
		cat(hdr(1, (math.MaxUint32+1)*1000, []byte{0}), []byte{0}),
		cat(hdr(1, math.MaxUint32*1000+999, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, 0, []byte{0}), []byte{2}, e1, []byte{0}),
		// DateTime64's range, 1900 to 2299, in the modern layout; before
		// 1970 and after 2106 in the 18.16 one.
		cat(hdr(1, -1, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, -2208988800000, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, -2208988800001, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, 10413791999999, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, 10413792000000, []byte{0}), []byte{2}, e1, []byte{0}),
		cat(hdr(1, math.MinInt64, []byte{0}), []byte{0}),
		cat(hdrSend(1, sensorBaseTsMs, []byte{0}, -2208988800000000), []byte{2}, e1, []byte{0}),
		cat(hdrSend(1, sensorBaseTsMs, []byte{0}, -2208988800000001), []byte{2}, e1, []byte{0}),
		cat(hdrSend(1, sensorBaseTsMs, []byte{0}, 10413791999999999), []byte{2}, e1, []byte{0}),
		cat(hdrSend(1, sensorBaseTsMs, []byte{0}, 10413792000000000), []byte{2}, e1, []byte{0}),
		cat(hdrSend(1, sensorBaseTsMs, []byte{0}, math.MaxInt64), []byte{2}, e1, []byte{0}),
		cat(hdrSend(-1, -2208988800001, []byte{0}, math.MaxInt64), []byte{0}),
		cat(hdr(1, 1, []byte{4}), []byte{0}),
		cat(hdr(1, 1, []byte{2, 0x81}), []byte{0}),
		cat(hdr(1, 1, overflow), []byte{0}),
		cat(avroLong([]byte{0, 0, 0, 0, 1}, 1), overflow),
		cat(avroLong([]byte{0, 0, 0, 0, 1}, 1), avroLong(nil, -1)),
		cat(avroLong([]byte{0, 0, 0, 0, 1}, 1), avroLong(nil, 5), []byte("ab")),
		cat(avroLong([]byte{0, 0, 0, 0, 1}, 1), []byte{0x80}),
		append([]byte{0, 0, 0, 0, 1}, overflow...),
	)
	return out
}

// transformInCalls runs msgs through in in calls of 200 records (as
// sluice's batches are, and well within the call deadline under -race on a
// loaded machine).
func transformInCalls(tb testing.TB, in *Instance, msgs [][]byte) []recordResult {
	tb.Helper()
	var res []recordResult
	for i := 0; i < len(msgs); i += 200 {
		out, err := in.Transform(context.Background(), recordsBatch(msgs[i:min(i+200, len(msgs))]))
		if err != nil {
			tb.Fatal(err)
		}
		res = append(res, collect(out)...)
	}
	return res
}

func recordsBatch(msgs [][]byte) *Batch {
	b := &Batch{Topic: "sensor", Records: make([]Record, len(msgs))}
	for i, m := range msgs {
		b.Records[i] = Record{Offset: int64(i), Timestamp: sensorBaseTsMs, Value: m}
	}
	return b
}

// TestSensorBatchPortsMatchGo runs the Go module and every port on the
// corpus (2000 batches) and on the malformed records, into each layout of
// the table, and compares every record's rows, byte for byte, and error
// message; the C and Rust ports natively too. Its subtest init compares
// what the modules accept and refuse at init.
func TestSensorBatchPortsMatchGo(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/sensor-batch", Limits{})
	t.Run("init", func(t *testing.T) { checkSensorBatchInit(t, r, goMod) })
	inputs := map[string][][]byte{"corpus": sensorCorpus(0, 2000), "malformed": sensorMalformed()}
	want := map[string]map[string][]recordResult{} // layout → input → results
	for _, layout := range sensorLayouts {
		goIn := instantiate(t, goMod, InitConfig{Tables: []TableSchema{layout.table}})
		want[layout.name] = map[string][]recordResult{}
		for name, msgs := range inputs {
			want[layout.name][name] = transformInCalls(t, goIn, msgs)
		}
		// The corpus must be the workload's: 73.5% of events kept, no error.
		rows := 0
		for _, w := range want[layout.name]["corpus"] {
			if w.err != "" {
				t.Fatalf("Go module, %s layout: corpus record fails: %s", layout.name, w.err)
			}
			rows += len(w.rows)
		}
		if rows < 2000*100*70/100 || rows > 2000*100*77/100 {
			t.Fatalf("Go module, %s layout: %d rows of 200000 events, want about 73.5%%", layout.name, rows)
		}
		malformed := want[layout.name]["malformed"]
		errs, distinct := 0, map[string]bool{}
		for _, w := range malformed {
			if w.err != "" {
				errs++
				distinct[strings.TrimRightFunc(w.err, func(r rune) bool { return '0' <= r && r <= '9' })] = true
			}
		}
		if errs < len(malformed)*3/4 || len(distinct) < 20 {
			t.Fatalf("malformed, %s layout: %d of %d records fail in the Go module, %d distinct messages", layout.name, errs, len(malformed), len(distinct))
		}
		t.Logf("Go module, %s layout: corpus %d rows; malformed: %d of %d records fail, %d distinct messages (offsets aside)",
			layout.name, rows, errs, len(malformed), len(distinct))
	}
	// The layouts must differ where they should: the same rows but for the
	// timestamps, and the records whose timestamps only one layout holds.
	if w18, wm := want["18.16"]["corpus"][0], want["modern"]["corpus"][0]; len(w18.rows) == 0 || len(w18.rows) != len(wm.rows) || w18.rows[0] == wm.rows[0] {
		t.Fatalf("corpus record 0: 18.16 layout %s, modern %s: want as many rows, not the same bytes", summary(w18), summary(wm))
	}
	differ := 0
	for i, w := range want["18.16"]["malformed"] {
		if (w.err == "") != (want["modern"]["malformed"][i].err == "") {
			differ++
		}
	}
	if differ < 6 {
		t.Fatalf("malformed: %d records fail in one layout only, want the range cases (at least 6)", differ)
	}
	compare := func(t *testing.T, layout, portName string, got map[string][]recordResult) {
		for name, msgs := range inputs {
			g, w := got[name], want[layout][name]
			if len(g) != len(w) {
				t.Errorf("%s: %d records out, want %d", name, len(g), len(w))
				continue
			}
			bad := 0
			for i := range w {
				if !equalResult(w[i], g[i]) {
					if bad++; bad <= 10 {
						t.Errorf("%s: record %d (%x):\n\tGo module: %s\n\t%s: %s", name, i, head(msgs[i]), summary(w[i]), portName, summary(g[i]))
					}
				}
			}
			if bad > 10 {
				t.Errorf("%s: %d records differ in all", name, bad)
			}
			t.Logf("%s layout, %s: %d records, %d differ", layout, name, len(w), bad)
		}
	}
	for _, port := range sensorBatchPorts {
		t.Run(port.name, func(t *testing.T) {
			mod := loadBytes(t, r, port.name, port.wasm(t), Limits{})
			for _, layout := range sensorLayouts {
				in := instantiate(t, mod, InitConfig{Tables: []TableSchema{layout.table}})
				got := map[string][]recordResult{}
				for name, msgs := range inputs {
					got[name] = transformInCalls(t, in, msgs)
				}
				compare(t, layout.name, port.name, got)
			}
		})
	}
	for _, port := range sensorBatchNatives {
		t.Run(port.name+"-native", func(t *testing.T) {
			native := port.load(t)
			for _, layout := range sensorLayouts {
				if msg := native.Init(encodeInit(InitConfig{Tables: []TableSchema{layout.table}})); msg != "" {
					t.Fatalf("native init, %s layout: %s", layout.name, msg)
				}
				got := map[string][]recordResult{}
				for name, msgs := range inputs {
					got[name] = transformNative(t, native, msgs)
				}
				compare(t, layout.name, port.name+" native", got)
			}
		})
	}
}

func head(b []byte) []byte {
	if len(b) > 48 {
		return b[:48]
	}
	return b
}

func summary(r recordResult) string {
	if r.err != "" {
		return "error " + strconv.Quote(r.err)
	}
	s := strings.Join(r.rows, ",")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return strconv.Itoa(len(r.rows)) + " rows " + s
}

// checkSensorBatchInit: the ports accept and refuse the schemas the Go
// module does, with the same message (the module's name aside). It shares
// the runtime and the Go module of TestSensorBatchPortsMatchGo: compiling
// the Go module takes most of a minute under -race.
func checkSensorBatchInit(t *testing.T, r *Runtime, goMod *Module) {
	other := append([]ColumnSchema{}, sensorColumns18...)
	other[7] = ColumnSchema{Name: "value_scaled", Type: "Float64"}
	modernOther := append([]ColumnSchema{}, sensorColumnsModern...)
	modernOther[11] = ColumnSchema{Name: "send_ts", Type: "DateTime64(3)"}
	modernZone := append([]ColumnSchema{}, sensorColumnsModern...)
	modernZone[10] = ColumnSchema{Name: "batch_ts", Type: "DateTime64(3, 'UTC')"}
	// batch_ts DateTime64(3) with the 18.16 layout's other columns.
	mixed := append(append([]ColumnSchema{}, sensorColumnsModern[:11]...), sensorColumns18[11:]...)
	cases := []struct {
		name   string
		cfg    InitConfig
		refuse bool
	}{
		{"sensor_events", InitConfig{Tables: []TableSchema{sensorTable}}, false},
		{"table param", InitConfig{Params: map[string]string{"table": "ev2"}, Tables: []TableSchema{advTable, {Name: "ev2", Columns: sensorColumns18}}}, false},
		{"no table", InitConfig{Tables: []TableSchema{advTable}}, true},
		{"other columns", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: other}}}, true},
		{"fewer columns", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: sensorColumns18[:12]}}}, true},
		{"modern layout", InitConfig{Tables: []TableSchema{sensorTableModern}}, false},
		{"modern layout, table param", InitConfig{Params: map[string]string{"table": "ev2"}, Tables: []TableSchema{sensorTable, {Name: "ev2", Columns: sensorColumnsModern}}}, false},
		{"modern layout, other columns", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: modernOther}}}, true},
		{"modern layout, fewer columns", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: sensorColumnsModern[:11]}}}, true},
		{"modern layout, a time zone", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: modernZone}}}, true},
		{"DateTime64 batch_ts, 18.16 columns", InitConfig{Tables: []TableSchema{{Name: "sensor_events", Columns: mixed}}}, true},
	}
	for _, port := range sensorBatchPorts {
		t.Run(port.name, func(t *testing.T) {
			mod := loadBytes(t, r, port.name, port.wasm(t), Limits{})
			for _, tt := range cases {
				_, goErr := goMod.Instantiate(context.Background(), tt.cfg)
				_, portErr := mod.Instantiate(context.Background(), tt.cfg)
				if (goErr != nil) != tt.refuse || (portErr != nil) != tt.refuse {
					t.Errorf("%s: Go module: %v; %s: %v; want refused = %v", tt.name, goErr, port.name, portErr, tt.refuse)
					continue
				}
				if goErr == nil {
					continue
				}
				g, p := goErr.Error(), strings.Replace(portErr.Error(), port.name, "sensor-batch", 1)
				if g != p {
					t.Errorf("%s:\n\tGo module: %v\n\t%s: %v", tt.name, goErr, port.name, portErr)
				}
			}
		})
	}
}
