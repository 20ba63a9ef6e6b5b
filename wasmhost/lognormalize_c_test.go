package wasmhost

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/cnative"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The C port of log-normalize (examples/log-normalize-c, with guest-sdk/c)
// must write what the Go module writes: the same rows, byte for byte, and
// the same error messages, on the same records.

const logNormalizeC = "examples/log-normalize-c"

// cModuleWasm builds a C module for wasm (cached by source hash) and returns
// its bytes.
func cModuleWasm(tb testing.TB, repoRelDir string, extraFlags ...string) []byte {
	tb.Helper()
	b, err := os.ReadFile(wasmbuild.BuildCT(tb, wasmbuild.Wasm, repoRelDir, extraFlags...))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// nativeModules are the native builds loaded by this test binary: a
// library's state is global, so each is loaded once.
var nativeModules sync.Map // path → *cnative.Module

// cModuleNative builds a C module natively (cached) and loads it.
func cModuleNative(tb testing.TB, repoRelDir string) *cnative.Module {
	tb.Helper()
	path := wasmbuild.BuildCT(tb, wasmbuild.Native, repoRelDir)
	if m, ok := nativeModules.Load(path); ok {
		return m.(*cnative.Module)
	}
	m, err := cnative.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	nativeModules.Store(path, m)
	return m
}

// recordResult is one record's outcome, comparable.
type recordResult struct {
	err  string
	rows []string // "table:hex of the RowBinary"
}

func collect(out Output) []recordResult {
	var res []recordResult
	for {
		r, ok := out.Next()
		if !ok {
			return res
		}
		rr := recordResult{err: r.Err}
		for {
			t, row, ok := r.NextRow()
			if !ok {
				break
			}
			rr.rows = append(rr.rows, fmt.Sprintf("%d:%x", t, row))
		}
		res = append(res, rr)
	}
}

// logLineCases are log lines that exercise every rule of normalize and every
// error it reports: sample.jsonl, the Go package's test inputs, and more.
func logLineCases(tb testing.TB) [][]byte {
	var lines [][]byte
	for _, r := range sampleBatch(tb, 21).Records {
		lines = append(lines, r.Value)
	}
	add := func(format string, args ...any) { lines = append(lines, []byte(fmt.Sprintf(format, args...))) }
	quote := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	for _, s := range []string{
		"", "plain text line", "[1,2]", `"msg"`, "{}", `{"level":"info"}`, `{"msg":null}`,
		`{"msg":"x"`, `{"msg":"x",}`, `{"msg":"x"} trailing`, `{"msg":"x" "a":1}`, `{"msg" "x"}`,
		`{msg:"x"}`, "{\"msg\":\"a\nb\"}", `{"msg":"\x"}`, `{"msg":"\u12G4"}`, `{"msg":"x","a":[1,2}`,
		`{"msg":"x","a":01}`, `{"msg":"x","a":-}`, `{"msg":"x","a":tru}`, `{"msg":"x","a":fals}`,
		`{"msg":"x","a":nul}`, `{"msg":"x","a":{"b":"\q"}}`, `{"msg":"x","a":{"b" 1}}`, `{"msg":"x","a":{1:1}}`,
		`{"msg":"x","a":[1 2]}`, `{"msg":"x","a":1.}`, `{"msg":"x","a":1e}`, `{"msg":"x","a":@}`,
		`{"msg":"x","a":"\u12`, `{"msg":"x","a":"abc`, `{"msg":"x","a":"abc\`, `{"msg":"abc\`, `{"msg":"ab\u00`,
		`{"msg":"x","a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
		`{"msg":"x","a":` + strings.Repeat("[", 511) + strings.Repeat("]", 511) + `}`,
		"{\"msg\":\"x\"}\xff", "{\"msg\":\"x\",\x80:1}", "{\"msg\":\"x\",\xa0:1}", "{\"msg\":\"x\",\xad:1}",
		"{\"msg\":\"x\",\xe9:1}", "{\"msg\":\"x\",':1}", "{\"msg\":\"x\",\x00:1}", "{\"msg\":\"x\",\x7f:1}",
		"{\"msg\":\"x\",\t:1}", `{"msg":"x"}   `, "\t {\"msg\" : \"x\" , \"b\" : [ 1 , { \"c\" : \" d \" } ] } \n",
		`{"msg":{"a": [1, 2], "b":"c d"},"service":[ "s" ]}`, `{"msg":42,"service":17,"level":true}`,
		`{"msg":"x","service":"","level":null}`, `{"msg":"x","service":null}`,
		`{"msg":"\ud800\udc00\ud800","a":[{"b":[]}],"c":-0.5e-3}`, `{"msg":"\ud83d\ude80 \udc00 \ud800x \ud800\u0041"}`,
		`{"msg":"\"\\\/\b\f\n\r\t\u0000\u001f\u00e9"}`, `{"b":1,"a":2,"b":3,"a":4,"msg":"dup"}`,
		`{"z":1,"y":2,"x":3,"w":4,"v":5,"u":6,"t":7,"s":8,"r":9,"q":10,"p":11,"o":12,"n":13,"m":14,"msg":"many","m":15,"a":16,"b":17,"z":18}`,
		`{"msg":"x","ts":"yesterday"}`, `{"msg":"x","ts":true}`, `{"msg":"x","ts":{"s":1}}`, `{"msg":"x","ts":[1, 2]}`,
		"{\"msg\":\"x\",\"ts\":\"caf\xc3\xa9 \xff\\u0001 \\t\\\" \\\\ \\u00a0\\u00ad \\u2028\\ufeff \\ue000 \\ud83d\\ude80\"}",
		`{"msg":"x","ts":-1}`, `{"msg":"x","ts":4294967296}`, `{"msg":"x","ts":4294967295}`, `{"msg":"x","ts":"1969-12-31T23:59:59Z"}`,
		`{"msg":"x","ts":null}`, `{"msg":"x","ts":"0000-01-01T00:00:00Z"}`, `{"msg":"x","ts":"9999-12-31T23:59:60+23:59"}`,
	} {
		lines = append(lines, []byte(s))
	}
	for _, ts := range []string{
		"2024-05-01T12:00:00Z", "2024-05-01t12:00:00z", "2024-05-01 12:00:00Z", "2024-05-01T12:00:00.999999999Z",
		"2024-05-01T12:00:00,5Z", "2024-05-01T14:00:00+02:00", "2024-05-01T14:00:00+0200", "2024-05-01T10:30:00-01:30",
		"2024-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2106-02-07T06:28:15Z", "2106-02-07T06:28:16Z",
		"1714564800", "1714564800000", "1714564800.75", "2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z",
		"2024-05-01T24:00:00Z", "2024-05-01T12:00:00", "2024-05-01T12:00:00.Z", "2024-05-01T12:00:00Z junk",
		"2024-05-01", "", "2024-05-01T12:00:00+24:00", "2024-05-01T12:00:00+01:60", "2024-05-01T12:00:00+1", "-5",
		"1e9", "1.7e9x", "1_000",
	} {
		add(`{"msg":"x","ts":%s}`, quote(ts))
	}
	for _, ts := range []string{
		"0", "1714564800", "99999999999", "100000000000", "1714564800123", "1714564800123456",
		"1714564800123456789", "1714564800.9", "1.7145648e9", "1.7145648001e12", "-1", "-1.5", "-0.5", "-1500",
		"-150000000000", "-150000000001", "99999999999999999999", "1.5E+9", "2e-3", "-2e-3", "1e400", "9.3e18",
		"-0", "-0.0e5", "12345678901234567e3", "922337203685477580", "9223372036854775807", "9223372036854775808",
		"0.000000000000000000000000000000000000000000000000000000000000000000000000000000000001e85",
	} {
		add(`{"msg":"x","ts":%s}`, ts)
	}
	for _, lv := range []string{
		"trace", "TRACE", "T", "trc", "debug", "Debug", "D", "dbg", "info", "INFO", "I", "information",
		"Informational", "notice", "", "  info ", "\tWARN\n", "warn", "WARNING", "W", "Warning", "error", "ERR", "E",
		"Error", "fatal", "FATAL", "CRIT", "critical", "panic", "F", "emerg", "Emergency", "alert", "verbose",
		"verbose!", "warnings", "x", "30", "a very long level name indeed", "informationalx", "\x00",
	} {
		add(`{"msg":"x","level":%s}`, quote(lv))
	}
	for _, lv := range []string{"10", "20", "30", "40", "50", "60", "70", "-10", "30.0", "3e1", "true", "null", "[30]", `{"l":30}`} {
		add(`{"msg":"x","level":%s}`, lv)
	}
	for _, msg := range []string{
		"GET /users/42 served in 12ms", "slow query took 1532.5ms", "queue depth is -3 (expected >= 0)",
		"delta +7 and 1.5e3 and 2e", "user42 sha256 http2 v1.2", "version 1.2.3", "range 1-5",
		"session 3f2504e0-4f89-11d3-9a0c-0305e82c3301 refreshed", "id=16FD2706-8BAF-433B-82EB-8C7FADA847DA.",
		"from 10.0.0.17:51234 reset", "from 10.0.0.17, then 192.168.1.1.", "bad 256.1.1.1 and 1.2.3.4.5",
		"user42 v1.2.3 Foo.java:42 file.tar.gz", "from 2001:db8::8a2e:370:7334 reset",
		"peer [::1]:8080 and fe80::1%eth0 and ::ffff:10.0.0.1", "full 2001:0db8:0000:0000:0000:ff00:0042:8329: done",
		"at 12:34:56 and 1:2:3", "C++ add::bee and std::vector and ::", "charge 5f3a9c7e2b1d4e60 failed",
		"offset 0x7ffe5a3c and 0XFF and 0x", "sha deadbeefdeadbeef ok, deadbeef stays, abcdef12 goes",
		"ts 1714564803 is a number, 12345678 too", "req-5f3a9c7e2b and cafe", `job "nightly-report" finished`,
		"user 'alice' said \"hi \\\" there\" ok", "don't touch alice's 'thing'", "key='value' and ''",
		"unbalanced 'quote and \"dq", "été 42 🚀 x42", "", "1:2:3:4:5:6:7:8 1::2:3:4:5:6:7:8 ::1.2.3.4 1::1.2.3.4.",
		"1:2:3:4:5:6:1.2.3.4 1:2:3:4:5:6:7:1.2.3.4 12345::1 a:b:c:d:e:f:0:1 abcd::12345 1.2.3.4:99999 1.2.3.4:655350",
		"x 1e5 1e+5 1e-5x 1.5e 1.e5 +.5 -x 0x1g 0xAbC. 1234567890abcdef 1234567890abcdefg deadbeefdeadbeefcafe",
		"uuid 3f2504e0-4f89-11d3-9a0c-0305e82c330 and 3f2504e0-4f89-11d3-9a0c-0305e82c3301x 3f2504e0-4f89-11d3-9a0c-0305e82c3301-",
		"'a\\'b' \"x\\\"\" 'unterminated \\", "a.b.c 1.2.3.4 10.0.0.1.5 1.2.3 01.02.03.04 001.2.3.4 ::: ::",
		"\x80\xff 42 \xc3\xa9 7",
	} {
		add(`{"msg":%s}`, quote(msg))
	}
	return lines
}

// mutate returns n lines made by mutating the given ones at random (a
// fixed seed): byte flips, insertions of JSON punctuation, truncations.
func mutate(lines [][]byte, n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "\"\\{}[],: 0123456789abcdefxXu.-+eE'\t\n\x00\xff\xc3\xa9/ntrfl"
	out := make([][]byte, 0, n)
	for len(out) < n {
		l := bytes.Clone(lines[rng.IntN(len(lines))])
		for k := rng.IntN(4); k >= 0; k-- {
			if len(l) == 0 {
				l = append(l, alphabet[rng.IntN(len(alphabet))])
				continue
			}
			i := rng.IntN(len(l))
			switch rng.IntN(4) {
			case 0:
				l[i] = alphabet[rng.IntN(len(alphabet))]
			case 1:
				l = append(l[:i], append([]byte{alphabet[rng.IntN(len(alphabet))]}, l[i:]...)...)
			case 2:
				l = append(l[:i], l[i+1:]...)
			case 3:
				l = l[:i]
			}
		}
		out = append(out, l)
	}
	return out
}

// generated returns n log lines whose messages are random sequences of the
// tokens the templating tells apart (a fixed seed), with random ts and level.
func generated(n int) [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	tokens := []string{
		"42", "-3", "+7", "1.5", "1e5", "2.5e-3", "0x1f", "0XZ", "deadbeef", "deadbeef1", "cafebabecafebabe",
		"3f2504e0-4f89-11d3-9a0c-0305e82c3301", "3f2504e0-4f89-11d3-9a0c", "10.0.0.1", "10.0.0.1:8080",
		"256.0.0.1", "1.2.3.4.5", "::1", "fe80::1", "2001:db8::1", "1::", ":::", "add::bee", "a:b", "1:2",
		"'q'", "'", "\"s\"", "\"", "don't", "user42", "v1.2.3", "Foo.java", "été", "🚀", "_x", "x_1",
		" ", " ", " ", ".", ",", ":", "-", "/", "=", "(", ")", "[", "]", "\\", "\t", "ms", "s",
	}
	levels := []string{`"info"`, `"WARN"`, `" e "`, `30`, `null`, `"?"`, `true`}
	stamps := []string{`"2024-05-01T12:00:00Z"`, `1714564800`, `1714564800123`, `"1714564800.5"`, `-1`, `null`, `"x"`}
	out := make([][]byte, n)
	for i := range out {
		var msg strings.Builder
		for k := rng.IntN(12); k >= 0; k-- {
			msg.WriteString(tokens[rng.IntN(len(tokens))])
		}
		m, _ := json.Marshal(msg.String())
		out[i] = []byte(fmt.Sprintf(`{"ts":%s,"level":%s,"msg":%s,"k%d":%d}`,
			stamps[rng.IntN(len(stamps))], levels[rng.IntN(len(levels))], m, rng.IntN(3), rng.IntN(100)))
	}
	return out
}

func linesBatch(lines [][]byte) *Batch {
	b := &Batch{Topic: "logs", Records: make([]Record, len(lines))}
	for i, l := range lines {
		b.Records[i] = Record{Offset: int64(i), Timestamp: 1714564815000, Value: l}
	}
	return b
}

// TestLogNormalizeCMatchesGo runs the Go module and the C module (wasm, and
// the same C natively) on the same batches and compares every record's
// rows, byte for byte, and error message.
func TestLogNormalizeCMatchesGo(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	cMod := loadBytes(t, r, "log-normalize-c", cModuleWasm(t, logNormalizeC), Limits{})
	native := cModuleNative(t, logNormalizeC)
	cfg := InitConfig{Tables: []TableSchema{logsTable}}
	goIn, cIn := instantiate(t, goMod, cfg), instantiate(t, cMod, cfg)
	if msg := native.Init(encodeInit(cfg)); msg != "" {
		t.Fatalf("native init: %s", msg)
	}

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
		cOut, err := cIn.Transform(context.Background(), batch)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(cOut)

		payload := make([]byte, batch.encodedSize())
		batch.encode(payload)
		nativeOut := Output{total: len(lines)}
		lim, err := Limits{}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if err := parseOutput(&nativeOut, native.Transform(payload), len(lines), lim); err != nil {
			t.Fatalf("%s: native output: %v", name, err)
		}
		nat := collect(nativeOut)

		ok, errs := 0, 0
		for i := range want {
			if !equalResult(want[i], got[i]) {
				t.Errorf("%s: record %d %q:\n\tGo module: %+v\n\tC module:  %+v", name, i, lines[i], want[i], got[i])
			}
			if !equalResult(got[i], nat[i]) {
				t.Errorf("%s: record %d %q:\n\tC wasm:   %+v\n\tC native: %+v", name, i, lines[i], got[i], nat[i])
			}
			if want[i].err == "" {
				ok++
			} else {
				errs++
			}
		}
		// The cases must exercise both outcomes, or the comparison proves little.
		if ok < len(want)/20 || errs < len(want)/20 {
			t.Errorf("%s: %d rows and %d errors of %d records: the cases lost their variety", name, ok, errs, len(want))
		}
		t.Logf("%s: %d records (%d rows, %d errors) identical", name, len(want), ok, errs)
	}
}

func equalResult(a, b recordResult) bool {
	return a.err == b.err && strings.Join(a.rows, ",") == strings.Join(b.rows, ",")
}

// TestLogNormalizeCInit: the C module refuses the schemas the Go module
// refuses, with the same message.
func TestLogNormalizeCInit(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/log-normalize", Limits{})
	cMod := loadBytes(t, r, "log-normalize-c", cModuleWasm(t, logNormalizeC), Limits{})
	other := logsTable
	other.Columns = append([]ColumnSchema{}, logsTable.Columns...)
	other.Columns[2] = ColumnSchema{Name: "level", Type: "String"}
	other.Columns[5] = ColumnSchema{Name: "message", Type: "String"}
	spaced := logsTable
	spaced.Columns = append([]ColumnSchema{}, logsTable.Columns...)
	spaced.Columns[1].Type = "LowCardinality( String )"
	for _, tt := range []struct {
		name   string
		cfg    InitConfig
		refuse bool
	}{
		{"logs", InitConfig{Tables: []TableSchema{logsTable}}, false},
		{"spaced type", InitConfig{Tables: []TableSchema{spaced}}, false},
		{"table param", InitConfig{Params: map[string]string{"table": "logs2"}, Tables: []TableSchema{advTable, {Name: "logs2", Columns: logsTable.Columns}}}, false},
		{"no table", InitConfig{Tables: []TableSchema{advTable}}, true},
		{"no tables", InitConfig{}, true},
		{"other columns", InitConfig{Tables: []TableSchema{other}}, true},
		{"fewer columns", InitConfig{Tables: []TableSchema{{Name: "logs", Columns: logsTable.Columns[:6]}}}, true},
		{"more columns", InitConfig{Tables: []TableSchema{{Name: "logs", Columns: append(append([]ColumnSchema{}, logsTable.Columns...), ColumnSchema{Name: "x", Type: "UInt8"})}}}, true},
	} {
		_, goErr := goMod.Instantiate(context.Background(), tt.cfg)
		_, cErr := cMod.Instantiate(context.Background(), tt.cfg)
		if (goErr != nil) != tt.refuse || (cErr != nil) != tt.refuse {
			t.Errorf("%s: Go module: %v; C module: %v; want refused = %v", tt.name, goErr, cErr, tt.refuse)
			continue
		}
		if goErr != nil && strings.Replace(goErr.Error(), "log-normalize-c", "log-normalize", 1) != strings.Replace(cErr.Error(), "log-normalize-c", "log-normalize", 1) {
			t.Errorf("%s:\n\tGo module: %v\n\tC module:  %v", tt.name, goErr, cErr)
		}
	}
}
