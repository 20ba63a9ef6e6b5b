package wasmhost

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The Rust port of log-normalize (examples/log-normalize-rust, with
// guest-sdk/rust) must write what the Go module writes: the same rows, byte
// for byte, and the same error messages, on the same records.

const logNormalizeRust = "examples/log-normalize-rust"

func rustModuleWasm(tb testing.TB, repoRelDir string) []byte {
	tb.Helper()
	b, err := os.ReadFile(wasmbuild.BuildRustT(tb, repoRelDir))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestLogNormalizeRustMatchesGo(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	rustMod := loadBytes(t, r, "log-normalize-rust", rustModuleWasm(t, logNormalizeRust), Limits{})
	cfg := InitConfig{Tables: []TableSchema{logsTable}}
	goIn, rustIn := instantiate(t, goMod, cfg), instantiate(t, rustMod, cfg)
	cases := logLineCases(t)
	for name, lines := range map[string][][]byte{
		"cases": cases, "mutated": mutate(cases, 3000), "generated": generated(3000),
	} {
		batch := linesBatch(lines)
		goOut, err := goIn.Transform(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		want := collect(goOut)
		rustOut, err := rustIn.Transform(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(rustOut)
		ok, errs := 0, 0
		for i := range want {
			if !equalResult(want[i], got[i]) {
				t.Errorf("%s: record %d %q:\n\tGo module:   %+v\n\tRust module: %+v", name, i, lines[i], want[i], got[i])
			}
			if want[i].err == "" {
				ok++
			} else {
				errs++
			}
		}
		if ok < len(want)/20 || errs < len(want)/20 {
			t.Errorf("%s: %d rows and %d errors of %d records: the cases lost their variety", name, ok, errs, len(want))
		}
		t.Logf("%s: %d records (%d rows, %d errors) identical", name, len(want), ok, errs)
	}
}

// TestLogNormalizeRustInit: the Rust module refuses the schemas the Go
// module refuses, with the same message.
func TestLogNormalizeRustInit(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	rustMod := loadBytes(t, r, "log-normalize-rust", rustModuleWasm(t, logNormalizeRust), Limits{})
	other := logsTable
	other.Columns = append([]ColumnSchema{}, logsTable.Columns...)
	other.Columns[2] = ColumnSchema{Name: "level", Type: "String"}
	for _, tt := range []struct {
		name   string
		cfg    InitConfig
		refuse bool
	}{
		{"logs", InitConfig{Tables: []TableSchema{logsTable}}, false},
		{"table param", InitConfig{Params: map[string]string{"table": "logs2"}, Tables: []TableSchema{advTable, {Name: "logs2", Columns: logsTable.Columns}}}, false},
		{"no table", InitConfig{Tables: []TableSchema{advTable}}, true},
		{"other columns", InitConfig{Tables: []TableSchema{other}}, true},
		{"fewer columns", InitConfig{Tables: []TableSchema{{Name: "logs", Columns: logsTable.Columns[:6]}}}, true},
	} {
		_, goErr := goMod.Instantiate(context.Background(), tt.cfg)
		_, rustErr := rustMod.Instantiate(context.Background(), tt.cfg)
		if (goErr != nil) != tt.refuse || (rustErr != nil) != tt.refuse {
			t.Errorf("%s: Go module: %v; Rust module: %v; want refused = %v", tt.name, goErr, rustErr, tt.refuse)
			continue
		}
		if goErr != nil && strings.Replace(goErr.Error(), "log-normalize-rust", "log-normalize", 1) != strings.Replace(rustErr.Error(), "log-normalize-rust", "log-normalize", 1) {
			t.Errorf("%s:\n\tGo module:   %v\n\tRust module: %v", tt.name, goErr, rustErr)
		}
	}
}
