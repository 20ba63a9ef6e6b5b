package wasmhost

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// buildDir holds the modules built by this test binary, each once.
var (
	buildDir string
	builds   sync.Map // repo-relative dir → *build
)

type build struct {
	once sync.Once
	wasm []byte
	err  error
}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		os.Exit(runChildScenario(name))
	}
	dir, err := os.MkdirTemp("", "wasmhost-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// moduleWasm builds the Go guest module at repoRelDir once per test binary
// and returns its bytes. Under -short it skips tb: see skipGoCompile.
func moduleWasm(tb testing.TB, repoRelDir string) []byte {
	tb.Helper()
	skipGoCompile(tb)
	v, _ := builds.LoadOrStore(repoRelDir, &build{})
	b := v.(*build)
	b.once.Do(func() {
		out := filepath.Join(buildDir, filepath.Base(repoRelDir)+".wasm")
		if b.err = wasmbuild.Build(context.Background(), filepath.Join(wasmbuild.RepoRoot(), repoRelDir), out); b.err != nil {
			return
		}
		b.wasm, b.err = os.ReadFile(out)
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.wasm
}

// advTable is the table of the adversarial modules (examples/adversarial).
var advTable = TableSchema{Name: "adv", Columns: []ColumnSchema{{Name: "offset", Type: "UInt64"}, {Name: "value", Type: "String"}}}

var advInit = InitConfig{Tables: []TableSchema{advTable}}

// quietLogger drops module log lines (the adversarial modules are noisy).
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTestRuntime(tb testing.TB, cfg Config) *Runtime {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	r, err := NewRuntime(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// load loads the Go guest module at the repo-relative dir.
func load(tb testing.TB, r *Runtime, dir string, lim Limits) *Module {
	tb.Helper()
	return loadBytes(tb, r, filepath.Base(dir), moduleWasm(tb, dir), lim)
}

// skipGoCompile skips tb under go test -short: compiling a Go guest module
// (a few MB of wasm) takes wazero seconds, and the tests that do it make
// most of this package's run time. Without -short they all run.
func skipGoCompile(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("compiles a Go guest module, seconds each; -short runs only the fast tests")
	}
}

func loadBytes(tb testing.TB, r *Runtime, name string, wasm []byte, lim Limits) *Module {
	tb.Helper()
	m, err := r.LoadWithLimits(context.Background(), name, wasm, lim)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func instantiate(tb testing.TB, m *Module, cfg InitConfig) *Instance {
	tb.Helper()
	in, err := m.Instantiate(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { in.Close(context.Background()) })
	return in
}

// values is a batch of the adv table's records with the given values, at
// offsets 0, 1, ….
func values(vals ...string) *Batch {
	b := &Batch{Topic: "t", Partition: 0}
	for i, v := range vals {
		b.Records = append(b.Records, Record{Offset: int64(i), Timestamp: 1714564800000, Value: []byte(v)})
	}
	return b
}

// result is one record's outcome in a comparable form.
type result struct {
	err  string
	rows []string // "table:offset=…,value=…" for adv rows
}

// results decodes an Output whose rows are adv rows.
func results(tb testing.TB, out Output) []result {
	tb.Helper()
	var res []result
	for {
		r, ok := out.Next()
		if !ok {
			return res
		}
		if r.Err != "" {
			res = append(res, result{err: r.Err})
			continue
		}
		var rr result
		for {
			table, row, ok := r.NextRow()
			if !ok {
				break
			}
			rr.rows = append(rr.rows, fmt.Sprintf("%d:%s", table, advRow(row)))
		}
		res = append(res, rr)
	}
}

// advRow renders an adv row (UInt64, String) or says why it does not decode.
func advRow(row []byte) string {
	if len(row) < 8 {
		return fmt.Sprintf("short row %x", row)
	}
	off := binary.LittleEndian.Uint64(row)
	rest := row[8:]
	n, k := binary.Uvarint(rest) // a String's length is a uvarint
	if k <= 0 || uint64(len(rest)-k) != n {
		return fmt.Sprintf("offset=%d bad value %x", off, rest)
	}
	return fmt.Sprintf("offset=%d,value=%s", off, rest[k:])
}
