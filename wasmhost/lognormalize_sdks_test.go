package wasmhost

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The Rust and AssemblyScript ports of log-normalize
// (examples/log-normalize-rust, examples/log-normalize-as) must write what
// the Go module writes: the same rows, byte for byte, and the same error
// messages, on the same records, and refuse the same schemas.

type logNormalizePort struct {
	name  string // module name, log-normalize-<lang>
	build func(tb testing.TB) string
}

var logNormalizePorts = []logNormalizePort{
	{"log-normalize-rust", func(tb testing.TB) string { return wasmbuild.BuildRustT(tb, "examples/log-normalize-rust") }},
	{"log-normalize-as", func(tb testing.TB) string { return wasmbuild.BuildAST(tb, "examples/log-normalize-as/index.ts") }},
}

func (p logNormalizePort) load(t testing.TB, r *Runtime) *Module {
	t.Helper()
	b, err := os.ReadFile(p.build(t))
	if err != nil {
		t.Fatal(err)
	}
	return loadBytes(t, r, p.name, b, Limits{})
}

func TestLogNormalizePortsMatchGo(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	cfg := InitConfig{Tables: []TableSchema{logsTable}}
	goIn := instantiate(t, goMod, cfg)
	cases := logLineCases(t)
	inputs := map[string][][]byte{"cases": cases, "mutated": mutate(cases, 3000), "generated": generated(3000)}
	want := map[string][]recordResult{}
	for name, lines := range inputs {
		out, err := goIn.Transform(context.Background(), linesBatch(lines))
		if err != nil {
			t.Fatal(err)
		}
		want[name] = collect(out)
	}
	for _, port := range logNormalizePorts {
		t.Run(port.name, func(t *testing.T) {
			in := instantiate(t, port.load(t, r), cfg)
			for name, lines := range inputs {
				out, err := in.Transform(context.Background(), linesBatch(lines))
				if err != nil {
					t.Fatal(err)
				}
				got, w := collect(out), want[name]
				ok, errs, bad := 0, 0, 0
				for i := range w {
					if !equalResult(w[i], got[i]) {
						if bad++; bad <= 10 {
							t.Errorf("%s: record %d %q:\n\tGo module: %+v\n\t%s: %+v", name, i, lines[i], w[i], port.name, got[i])
						}
					}
					if w[i].err == "" {
						ok++
					} else {
						errs++
					}
				}
				if bad > 10 {
					t.Errorf("%s: %d records differ in all", name, bad)
				}
				if ok < len(w)/20 || errs < len(w)/20 {
					t.Errorf("%s: %d rows and %d errors of %d records: the cases lost their variety", name, ok, errs, len(w))
				}
				t.Logf("%s: %d records (%d rows, %d errors), %d differ", name, len(w), ok, errs, bad)
			}
		})
	}
}

// TestLogNormalizePortsInit: the ports refuse the schemas the Go module
// refuses, with the same message.
func TestLogNormalizePortsInit(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	other := logsTable
	other.Columns = append([]ColumnSchema{}, logsTable.Columns...)
	other.Columns[2] = ColumnSchema{Name: "level", Type: "String"}
	cases := []struct {
		name   string
		cfg    InitConfig
		refuse bool
	}{
		{"logs", InitConfig{Tables: []TableSchema{logsTable}}, false},
		{"table param", InitConfig{Params: map[string]string{"table": "logs2"}, Tables: []TableSchema{advTable, {Name: "logs2", Columns: logsTable.Columns}}}, false},
		{"no table", InitConfig{Tables: []TableSchema{advTable}}, true},
		{"other columns", InitConfig{Tables: []TableSchema{other}}, true},
		{"fewer columns", InitConfig{Tables: []TableSchema{{Name: "logs", Columns: logsTable.Columns[:6]}}}, true},
	}
	for _, port := range logNormalizePorts {
		t.Run(port.name, func(t *testing.T) {
			mod := port.load(t, r)
			for _, tt := range cases {
				_, goErr := goMod.Instantiate(context.Background(), tt.cfg)
				_, portErr := mod.Instantiate(context.Background(), tt.cfg)
				if (goErr != nil) != tt.refuse || (portErr != nil) != tt.refuse {
					t.Errorf("%s: Go module: %v; %s: %v; want refused = %v", tt.name, goErr, port.name, portErr, tt.refuse)
					continue
				}
				if goErr != nil && goErr.Error() != strings.Replace(portErr.Error(), port.name, "log-normalize", 1) {
					t.Errorf("%s:\n\tGo module: %v\n\t%s: %v", tt.name, goErr, port.name, portErr)
				}
			}
		})
	}
}

// BenchmarkLogNormalizePorts runs the Rust and AssemblyScript ports on the
// batches BenchmarkLogNormalize (Go) and BenchmarkLogNormalizeC use (1000
// records of sample.jsonl), as sluice runs them (with the deadline
// instrumentation). Run them in one go test for comparable figures:
//
//	go test -run '^$' -bench LogNormalize -benchtime 2s ./wasmhost/
func BenchmarkLogNormalizePorts(b *testing.B) {
	for _, port := range logNormalizePorts {
		b.Run(port.name, func(b *testing.B) {
			r := newTestRuntime(b, Config{})
			wasm, err := os.ReadFile(port.build(b))
			if err != nil {
				b.Fatal(err)
			}
			m := loadBytes(b, r, port.name, wasm, Limits{})
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
		})
	}
}
