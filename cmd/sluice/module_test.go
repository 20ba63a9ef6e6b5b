package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// builtModules holds each module the tests build, once per test binary.
var builtModules sync.Map // repo-relative dir → *builtModule

type builtModule struct {
	once sync.Once
	wasm []byte
	err  error
}

// moduleT builds the module at dir (once per test binary) and writes it
// into the test's temp dir. Under -short it skips t: every test that
// builds a Go module has the CLI compile it, which takes wazero seconds.
func moduleT(t *testing.T, dir string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("the CLI compiles a Go guest module, seconds each; -short runs only the fast tests")
	}
	v, _ := builtModules.LoadOrStore(dir, &builtModule{})
	m := v.(*builtModule)
	m.once.Do(func() {
		path := wasmbuild.BuildT(t, dir)
		m.wasm, m.err = os.ReadFile(path)
	})
	if m.wasm == nil {
		t.Fatalf("building %s failed: %v", dir, m.err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(dir)+".wasm")
	if err := os.WriteFile(out, m.wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func runModuleCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"module"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func logsSchema(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestModuleTestLogNormalize(t *testing.T) {
	wasm := moduleT(t, "examples/log-normalize")
	sample := filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/sample.jsonl")
	args := []string{"test", "-module", wasm, "-input", sample, "-table", logsSchema(t), "-timestamp", "1714564815000"}
	code, out, stderr := runModuleCLI(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 21 {
		t.Fatalf("%d lines, want 21:\n%s", len(lines), out)
	}
	want := map[int]string{
		0: `1: logs {"ts": "2024-05-01 12:00:00", "service": "api", "level": "info", "template": "GET /users/<num> served in <num>ms", ` +
			`"fingerprint": 12553161057150637337, "msg": "GET /users/42 served in 12ms", "attrs.key": ["path","status"], "attrs.value": ["/users/42","200"]}`,
		15: `16: logs {"ts": "2024-05-01 12:00:15", "service": "cron", "level": "info", "template": "no ts: the Kafka timestamp is used", ` +
			`"fingerprint": 16284393951749854363, "msg": "no ts: the Kafka timestamp is used", "attrs.key": [], "attrs.value": []}`,
		18: `19: error: log line has no "msg" field (or it is null)`,
		19: `20: error: value is not a JSON object`,
		20: `21: error: ts "yesterday" is neither RFC 3339 nor a number of (milli)seconds since the epoch`,
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d:\n\t got %s\n\twant %s", i, lines[i], w)
		}
	}
	// The batch size does not change the results.
	code, out2, stderr := runModuleCLI(t, append(args, "-batch", "4")...)
	if code != 0 || out2 != out {
		t.Errorf("-batch 4: exit %d, %s; output differs:\n%s", code, stderr, out2)
	}
}

func TestModuleTestEnvelopeAndParams(t *testing.T) {
	wasm := moduleT(t, "examples/log-normalize")
	input := filepath.Join(t.TempDir(), "in.jsonl")
	lines := `{"value": "{\"msg\":\"from an envelope\",\"service\":\"s\"}", "key": "k1", "headers": {"h": "v"}, "timestamp": 1714564800000, "offset": 42}

{"value": {"msg": "a value that is an object"}, "timestamp": 1714564801000}
{"msg": "a raw line", "ts": 1714564802}
`
	if err := os.WriteFile(input, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	schema := strings.Replace(logsSchema(t), "CREATE TABLE logs", "CREATE TABLE IF NOT EXISTS db.`logs_v2`", 1)
	code, out, stderr := runModuleCLI(t, "test", "-module", wasm, "-input", input, "-table", schema, "-param", "table=logs_v2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := []string{
		`1: logs_v2 {"ts": "2024-05-01 12:00:00", "service": "s", "level": "info", "template": "from an envelope", "fingerprint": 8880328156493250488, "msg": "from an envelope", "attrs.key": [], "attrs.value": []}`,
		`3: logs_v2 {"ts": "2024-05-01 12:00:01", "service": "unknown", "level": "info", "template": "a value that is an object", "fingerprint": 8090704876342797420, "msg": "a value that is an object", "attrs.key": [], "attrs.value": []}`,
		`4: logs_v2 {"ts": "2024-05-01 12:00:02", "service": "unknown", "level": "info", "template": "a raw line", "fingerprint": 9180213389589542708, "msg": "a raw line", "attrs.key": [], "attrs.value": []}`,
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

func TestModuleTestFailures(t *testing.T) {
	wasm := moduleT(t, "examples/log-normalize")
	sample := filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/sample.jsonl")
	tests := []struct {
		name string
		args []string
		code int
		want string // in stderr
	}{
		{"refused init", []string{"-module", wasm, "-input", sample, "-table", "CREATE TABLE other (x String) ENGINE = Memory"}, 1,
			`module refused its configuration: sluice: the pipeline has no target table "logs" (tables: "other")`},
		{"not a module", []string{"-module", sample, "-input", sample, "-table", logsSchema(t)}, 1,
			"not a WebAssembly binary"},
		{"no table", []string{"-module", wasm, "-input", sample}, 2, "-module, -input and at least one -table are required"},
		{"bad DDL", []string{"-module", wasm, "-input", sample, "-table", "SELECT 1"}, 1, "want CREATE TABLE"},
		{"bad param", []string{"-module", wasm, "-input", sample, "-table", logsSchema(t), "-param", "x"}, 1, `-param "x": want key=value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runModuleCLI(t, append([]string{"test"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
}

// 'sluice module test -h' says what the input is, as 'sluice module' does,
// and lists the flags.
func TestModuleTestHelp(t *testing.T) {
	code, stdout, stderr := runModuleCLI(t, "test", "-h")
	if code != 2 || stdout != "" {
		t.Errorf("exit %d, stdout %q; want exit 2 and the help on stderr", code, stdout)
	}
	for _, want := range []string{
		"Usage:\n  sluice module test -module m.wasm -input records.jsonl -table",
		"a JSON-lines file (- for standard input)", `{"value": …, "key": …,`, "is a Kafka record",
		"any other line is taken whole as a record's value", "CREATE TABLE statement of a target table",
		`"(no rows)" for a record the module filtered out`, "Flags:", "-timestamp int", "-param value",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("module test -h lacks %q:\n%s", want, stderr)
		}
	}
	if _, _, usage := runModuleCLI(t); !strings.Contains(usage, `{"value": …, "key": …,`) {
		t.Errorf("sluice module no longer describes test's input:\n%s", usage)
	}
}

// A record that crashes its instance is reported on its own line; the
// others of its batch still get their rows.
func TestModuleTestIsolatesTraps(t *testing.T) {
	wasm := moduleT(t, "examples/adversarial/proc-exit")
	input := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"value": "a"}`+"\n"+`{"value": "exit"}`+"\n"+`{"value": "b"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runModuleCLI(t, "test", "-module", wasm, "-input", input,
		"-table", "CREATE TABLE adv (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `1: adv {"offset": 0, "value": "a"}
2: error: sluice_transform: proc_exit(3)
3: adv {"offset": 2, "value": "b"}
`
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
