package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
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

func TestModuleInspect(t *testing.T) {
	wasm := moduleT(t, "examples/log-normalize")
	code, out, stderr := runModuleCLI(t, "inspect", wasm)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"abi version: 1\n", "sha256:      ", "  sluice.log(i32, i32, i32)\n", "  wasi_snapshot_preview1.fd_write(i32, i32, i32, i32) -> i32\n",
		"  sluice_transform(i32, i32) -> i64\n", "  memory (memory)\n", "tables:      not in the binary", "load:        ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	forbidden := moduleT(t, "examples/adversarial/forbidden-import")
	code, out, _ = runModuleCLI(t, "inspect", forbidden)
	if code != 1 || !strings.Contains(out, "  env.whatever(i32) -> i32\n") ||
		!strings.Contains(out, "load:        refused: module "+forbidden+": imports env.whatever") {
		t.Errorf("forbidden-import: exit %d:\n%s", code, out)
	}
	if code, _, stderr := runModuleCLI(t, "inspect", filepath.Join(wasmbuild.RepoRoot(), "go.mod")); code != 1 || !strings.Contains(stderr, "not a WebAssembly binary") {
		t.Errorf("go.mod: exit %d, %s", code, stderr)
	}
}

func TestParseCreateTable(t *testing.T) {
	tests := []struct {
		ddl    string
		name   string
		insert []clickhouse.Column // the insertable columns
	}{
		{ddl: "CREATE TABLE adv (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset", name: "adv",
			insert: []clickhouse.Column{{Name: "offset", Type: "UInt64"}, {Name: "value", Type: "String"}}},
		{ddl: `create table if not exists db."t" (
			` + "`odd, name`" + ` LowCardinality( String ),
			e Enum8('a(' = 1,'b''c'=2, 'd,e' = -3) DEFAULT 'a(',
			n Nested(k String, v Nullable(Decimal(10,2))),
			m String MATERIALIZED concat(e, ','),
			al UInt8 ALIAS 1,
			dt DateTime64(3,'Europe/Paris') CODEC(Delta, ZSTD(1)) COMMENT 'x, y',
			tup Tuple(a String,b UInt8),
			INDEX i e TYPE minmax GRANULARITY 1,
			CONSTRAINT c CHECK n.k != []
		) ENGINE = Memory`, name: "t",
			insert: []clickhouse.Column{
				{Name: "odd, name", Type: "LowCardinality(String)"},
				{Name: "e", Type: "Enum8('a(' = 1, 'b''c' = 2, 'd,e' = -3)", DefaultKind: "DEFAULT"},
				{Name: "n.k", Type: "Array(String)"},
				{Name: "n.v", Type: "Array(Nullable(Decimal(10, 2)))"},
				{Name: "dt", Type: "DateTime64(3, 'Europe/Paris')"},
				{Name: "tup", Type: "Tuple(a String, b UInt8)"},
			}},
	}
	for _, tt := range tests {
		name, cols, err := parseCreateTable(tt.ddl)
		if err != nil {
			t.Fatalf("%s: %v", tt.ddl, err)
		}
		var insert []clickhouse.Column
		for _, c := range cols {
			if c.DefaultKind != "MATERIALIZED" && c.DefaultKind != "ALIAS" {
				insert = append(insert, c)
			}
		}
		if name != tt.name || !reflect.DeepEqual(insert, tt.insert) {
			t.Errorf("%s:\n\tgot %s %+v\n\twant %s %+v", tt.ddl, name, insert, tt.name, tt.insert)
		}
	}
	for _, bad := range []string{"", "CREATE VIEW v AS SELECT 1", "CREATE TABLE t", "CREATE TABLE t (x String", "CREATE TABLE t (x)"} {
		if _, _, err := parseCreateTable(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestRowPrinter(t *testing.T) {
	cols := []clickhouse.Column{
		{Name: "u8", Type: "UInt8"}, {Name: "i64", Type: "Int64"}, {Name: "i16", Type: "Int16"}, {Name: "u128", Type: "UInt128"},
		{Name: "f", Type: "Float64"}, {Name: "b", Type: "Bool"}, {Name: "s", Type: "LowCardinality(String)"},
		{Name: "fs", Type: "FixedString(3)"}, {Name: "d", Type: "Date"}, {Name: "dt", Type: "DateTime"},
		{Name: "dt64", Type: "DateTime64(3)"}, {Name: "uuid", Type: "UUID"}, {Name: "ip4", Type: "IPv4"},
		{Name: "ip6", Type: "IPv6"}, {Name: "e", Type: "Enum8('a' = 1, 'b''c' = -2)"},
		{Name: "e16", Type: `Enum16('it\'s' = 1, 'x\ty' = 300)`}, {Name: "dec", Type: "Decimal(9, 2)"},
		{Name: "n", Type: "Nullable(String)"}, {Name: "nn", Type: "Nullable(UInt16)"}, {Name: "arr", Type: "Array(Array(Int8))"},
	}
	p, err := newRowPrinter("t", cols)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	var row []byte
	row = append(row, 7)
	row = le.AppendUint64(row, uint64(1<<63)) // -2^63
	i16 := int16(-300)
	row = le.AppendUint16(row, uint16(i16))
	row = append(row, bytes.Repeat([]byte{0xff}, 16)...)
	row = le.AppendUint64(row, 0x400921FB54442D18) // pi
	row = append(row, 1)
	row = append(row, 2, 'h', 'i')
	row = append(row, 'a', 'b', 'c')
	row = le.AppendUint16(row, 19844)      // 2024-05-01
	row = le.AppendUint32(row, 1714564800) // 2024-05-01 12:00:00
	row = le.AppendUint64(row, 1714564800123)
	row = le.AppendUint64(row, 0x3f2504e04f8911d3)
	row = le.AppendUint64(row, 0x9a0c0305e82c3301)
	row = append(row, 4, 3, 2, 1)
	row = append(row, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)
	row = append(row, 0xfe) // -2
	row = le.AppendUint16(row, 300)
	dec := int32(-1234)
	row = le.AppendUint32(row, uint32(dec)) // -12.34
	row = append(row, 1)                    // NULL
	row = append(row, 0)
	row = le.AppendUint16(row, 65535)
	row = append(row, 2, 1, 0xff, 0) // [[-1], []]
	got, err := p.format(row)
	if err != nil {
		t.Fatal(err)
	}
	want := `t {"u8": 7, "i64": -9223372036854775808, "i16": -300, "u128": "340282366920938463463374607431768211455", "f": 3.141592653589793, ` +
		`"b": true, "s": "hi", "fs": "abc", "d": "2024-05-01", "dt": "2024-05-01 12:00:00", "dt64": "2024-05-01 12:00:00.123", ` +
		`"uuid": "3f2504e0-4f89-11d3-9a0c-0305e82c3301", "ip4": "1.2.3.4", "ip6": "2001:db8::1", "e": "b'c", "e16": "x\ty", "dec": "-12.34", ` +
		`"n": null, "nn": 65535, "arr": [[-1],[]]}`
	if got != want {
		t.Errorf("got\n\t%s\nwant\n\t%s", got, want)
	}
	for n := 0; n < len(row); n++ {
		if _, err := p.format(row[:n]); err == nil {
			t.Fatalf("a row cut at %d bytes printed", n)
		}
	}
	if _, err := p.format(append(row, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
}
