package normalize

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestNormalizeLevel(t *testing.T) {
	tests := map[string]string{
		"trace": LevelTrace, "TRACE": LevelTrace, "T": LevelTrace, "trc": LevelTrace,
		"debug": LevelDebug, "Debug": LevelDebug, "D": LevelDebug, "dbg": LevelDebug,
		"info": LevelInfo, "INFO": LevelInfo, "I": LevelInfo, "information": LevelInfo, "Informational": LevelInfo,
		"notice": LevelInfo, "": LevelInfo, "  info ": LevelInfo,
		"warn": LevelWarn, "WARNING": LevelWarn, "W": LevelWarn, "Warning": LevelWarn,
		"error": LevelError, "ERR": LevelError, "E": LevelError, "Error": LevelError,
		"fatal": LevelFatal, "FATAL": LevelFatal, "CRIT": LevelFatal, "critical": LevelFatal,
		"panic": LevelFatal, "F": LevelFatal, "emerg": LevelFatal, "alert": LevelFatal,
		"verbose!": LevelUnknown, "warnings": LevelUnknown, "x": LevelUnknown, "30": LevelUnknown,
		"a very long level name indeed": LevelUnknown,
	}
	for in, want := range tests {
		if got := NormalizeLevel([]byte(in)); got != want {
			t.Errorf("NormalizeLevel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTemplate(t *testing.T) {
	tests := []struct{ in, want string }{
		{"GET /users/42 served in 12ms", "GET /users/<num> served in <num>ms"},
		{"slow query took 1532.5ms", "slow query took <num>ms"},
		{"queue depth is -3 (expected >= 0)", "queue depth is <num> (expected >= <num>)"},
		{"delta +7 and 1.5e3 and 2e", "delta <num> and <num> and <num>e"},
		{"user42 sha256 http2 v1.2", "user42 sha256 http2 v1.2"},
		{"version 1.2.3", "version <num>.<num>"},
		{"range 1-5", "range <num>-<num>"},
		{"session 3f2504e0-4f89-11d3-9a0c-0305e82c3301 refreshed", "session <uuid> refreshed"},
		{"id=16FD2706-8BAF-433B-82EB-8C7FADA847DA.", "id=<uuid>."},
		{"from 10.0.0.17:51234 reset", "from <ip> reset"},
		{"from 10.0.0.17, then 192.168.1.1.", "from <ip>, then <ip>."},
		{"bad 256.1.1.1 and 1.2.3.4.5", "bad <num>.<num> and <num>.<num>.<num>"},
		{"user42 v1.2.3 Foo.java:42 file.tar.gz", "user42 v1.2.3 Foo.java:<num> file.tar.gz"},
		{"from 2001:db8::8a2e:370:7334 reset", "from <ip> reset"},
		{"peer [::1]:8080 and fe80::1%eth0 and ::ffff:10.0.0.1", "peer [<ip>]:<num> and <ip>%eth0 and <ip>"},
		{"full 2001:0db8:0000:0000:0000:ff00:0042:8329: done", "full <ip>: done"},
		{"at 12:34:56 and 1:2:3", "at <num>:<num>:<num> and <num>:<num>:<num>"},
		{"C++ add::bee and std::vector and ::", "C++ add::bee and std::vector and ::"},
		{"charge 5f3a9c7e2b1d4e60 failed", "charge <hex> failed"},
		{"offset 0x7ffe5a3c and 0XFF and 0x", "offset <hex> and <hex> and <num>x"},
		{"sha deadbeefdeadbeef ok, deadbeef stays, abcdef12 goes", "sha <hex> ok, deadbeef stays, <hex> goes"},
		{"ts 1714564803 is a number, 12345678 too", "ts <num> is a number, <num> too"},
		{"req-5f3a9c7e2b and cafe", "req-<hex> and cafe"},
		{`job "nightly-report" finished`, "job <str> finished"},
		{"user 'alice' said \"hi \\\" there\" ok", "user <str> said <str> ok"},
		{"don't touch alice's 'thing'", "don't touch alice's <str>"},
		{"key='value' and ''", "key=<str> and <str>"},
		{"unbalanced 'quote and \"dq", "unbalanced 'quote and \"dq"},
		{"été 42 🚀 x42", "été <num> 🚀 x42"},
		{"", ""},
	}
	for _, tt := range tests {
		got := string(AppendTemplate(nil, []byte(tt.in)))
		if got != tt.want {
			t.Errorf("AppendTemplate(%q)\n\t= %q\n\twant %q", tt.in, got, tt.want)
		}
	}
}

func TestFingerprint(t *testing.T) {
	// FNV-1a 64 test vectors.
	for in, want := range map[string]uint64{"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "foobar": 0x85944171f73967e8} {
		if got := Fingerprint([]byte(in)); got != want {
			t.Errorf("Fingerprint(%q) = %#x, want %#x", in, got, want)
		}
	}
}

func TestParseTime(t *testing.T) {
	ref := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).Unix()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"2024-05-01T12:00:00Z", ref, true},
		{"2024-05-01t12:00:00z", ref, true},
		{"2024-05-01 12:00:00Z", ref, true},
		{"2024-05-01T12:00:00.999999999Z", ref, true},
		{"2024-05-01T12:00:00,5Z", ref, true},
		{"2024-05-01T14:00:00+02:00", ref, true},
		{"2024-05-01T14:00:00+0200", ref, true},
		{"2024-05-01T10:30:00-01:30", ref, true},
		{"2024-02-29T00:00:00Z", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC).Unix(), true},
		{"1714564800", ref, true},
		{"1714564800000", ref, true},
		{"1714564800.75", ref, true},
		{"2023-02-29T00:00:00Z", 0, false},
		{"2024-13-01T00:00:00Z", 0, false},
		{"2024-05-01T24:00:00Z", 0, false},
		{"2024-05-01T12:00:00", 0, false},
		{"2024-05-01T12:00:00.Z", 0, false},
		{"2024-05-01T12:00:00Z junk", 0, false},
		{"2024-05-01", 0, false},
		{"yesterday", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseTime([]byte(tt.in))
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseTime(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseEpoch(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1714564800", 1714564800, true},
		{"99999999999", 99999999999, true},
		{"100000000000", 100000000, true}, // 1e11 and above: milliseconds
		{"1714564800123", 1714564800, true},
		{"1714564800123456", 1714564800, true},
		{"1714564800123456789", 1714564800, true},
		{"1714564800.9", 1714564800, true},
		{"1.7145648e9", 1714564800, true},
		{"1.7145648001e12", 1714564800, true},
		{"-1", -1, true},
		{"-1.5", -2, true},
		{"-0.5", -1, true},
		{"-1500", -1500, true},
		{"-150000000000", -150000000, true},
		{"-150000000001", -150000001, true},
		{"99999999999999999999", 0, false},
		{"1.", 0, false},
		{"-", 0, false},
		{"12a", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseEpoch([]byte(tt.in))
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseEpoch(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// entry is an Entry as plain values, for comparisons.
type entry struct {
	Time     int64
	Service  string
	Level    string
	Msg      string
	Template string
	Attrs    []string // "key=value"
}

func plain(e *Entry) entry {
	p := entry{Time: e.Time, Service: string(e.Service), Level: e.Level, Msg: string(e.Msg), Template: string(e.Template)}
	for _, a := range e.Attrs {
		p.Attrs = append(p.Attrs, string(a.Key)+"="+string(a.Value))
	}
	if e.Fingerprint != Fingerprint(e.Template) {
		panic("fingerprint")
	}
	return p
}

func TestNormalize(t *testing.T) {
	const kafka = 1714564800999
	tests := []struct {
		in   string
		want entry
	}{
		{`{"ts":"2024-05-01T12:00:00Z","level":"INFO","service":"api","msg":"served in 12ms","status":200,"path":"/a"}`,
			entry{1714564800, "api", "info", "served in 12ms", "served in <num>ms", []string{"path=/a", "status=200"}}},
		{` { "msg" : "hi" } `, entry{1714564800, "unknown", "info", "hi", "hi", nil}},
		{`{"msg":"x","ts":null,"level":null,"service":null}`, entry{1714564800, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","service":""}`, entry{1714564800, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","ts":1714564801}`, entry{1714564801, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","ts":1714564801500}`, entry{1714564801, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","ts":"1714564801500"}`, entry{1714564801, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","level":30}`, entry{1714564800, "unknown", "info", "x", "x", nil}},
		{`{"msg":"x","level":50}`, entry{1714564800, "unknown", "error", "x", "x", nil}},
		{`{"msg":"x","level":7}`, entry{1714564800, "unknown", "unknown", "x", "x", nil}},
		{`{"msg":"x","level":true}`, entry{1714564800, "unknown", "unknown", "x", "x", nil}},
		{`{"msg":"x","level":"WARNING"}`, entry{1714564800, "unknown", "warn", "x", "x", nil}},
		{`{"msg":42,"service":{"name": "a"}}`, entry{1714564800, `{"name":"a"}`, "info", "42", "<num>", nil}},
		{`{"msg":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20AC\ud83d\ude80\ud83d\u0041\udc00"}`,
			entry{1714564800, "unknown", "info", "a\"b\\c/d\b\f\n\r\t" + "é€🚀\uFFFDA\uFFFD", "a\"b\\c/d\b\f\n\r\té€🚀\uFFFDA\uFFFD", nil}},
		{`{"z":1,"a":"x","m":[1, {"k" : "v w"}],"n":null,"t":true,"a":"last","e\u0301":"","msg":"m"}`,
			entry{1714564800, "unknown", "info", "m", "m", []string{"a=last", "e\u0301=", `m=[1,{"k":"v w"}]`, "n=null", "t=true", "z=1"}}},
		{`{"msg":"first","msg":"second"}`, entry{1714564800, "unknown", "info", "second", "second", nil}},
		{`{"msg":"x","key with \"quotes\"":"v\n"}`, entry{1714564800, "unknown", "info", "x", "x", []string{"key with \"quotes\"=v\n"}}},
	}
	var e Entry
	for _, tt := range tests {
		if err := Normalize([]byte(tt.in), kafka, &e); err != nil {
			t.Errorf("Normalize(%s): %v", tt.in, err)
			continue
		}
		got := plain(&e)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Normalize(%s)\n\t= %+v\n\twant %+v", tt.in, got, tt.want)
		}
	}
}

func TestNormalizeErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{``, "value is not a JSON object"},
		{`plain text line`, "value is not a JSON object"},
		{`[1,2]`, "value is not a JSON object"},
		{`"msg"`, "value is not a JSON object"},
		{`{}`, `log line has no "msg" field (or it is null)`},
		{`{"level":"info"}`, `log line has no "msg" field (or it is null)`},
		{`{"msg":null}`, `log line has no "msg" field (or it is null)`},
		{`{"msg":"x"`, "invalid JSON at byte 10: unexpected end of input, expected ',' or '}'"},
		{`{"msg":"x",}`, `invalid JSON at byte 11: expected a string key, found '}'`},
		{`{"msg":"x"} trailing`, `invalid JSON at byte 12: unexpected data after the object, found 't'`},
		{`{"msg":"x" "a":1}`, `invalid JSON at byte 11: expected ',' or '}', found '"'`},
		{`{"msg" "x"}`, `invalid JSON at byte 7: expected ':', found '"'`},
		{`{msg:"x"}`, `invalid JSON at byte 1: expected a string key, found 'm'`},
		{`{"msg":"a` + "\n" + `b"}`, `invalid JSON at byte 9: control character in string, found '\n'`},
		{`{"msg":"\x"}`, `invalid JSON at byte 8: bad escape, found '\\'`},
		{`{"msg":"\u12G4"}`, `invalid JSON at byte 8: bad \u escape, found '\\'`},
		{`{"msg":"x","a":[1,2}`, `invalid JSON at byte 19: expected ',' or ']', found '}'`},
		{`{"msg":"x","a":01}`, `invalid JSON at byte 16: expected ',' or '}', found '1'`},
		{`{"msg":"x","a":-}`, `invalid JSON at byte 16: expected a digit, found '}'`},
		{`{"msg":"x","a":tru}`, `invalid JSON at byte 15: expected true, found 't'`},
		{`{"msg":"x","a":{"b":"\q"}}`, `invalid JSON at byte 21: bad escape, found '\\'`},
		{`{"msg":"x","a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`, "nested too deep"},
		{`{"msg":"x","ts":"yesterday"}`, `ts "yesterday" is neither RFC 3339 nor a number of (milli)seconds since the epoch`},
		{`{"msg":"x","ts":true}`, `ts true is neither RFC 3339 nor a number of (milli)seconds since the epoch`},
		{`{"msg":"x","ts":{"s":1}}`, `ts {"s":1} is neither RFC 3339`},
	}
	var e Entry
	for _, tt := range tests {
		err := Normalize([]byte(tt.in), 0, &e)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Normalize(%.40q) = %v, want %q", tt.in, err, tt.want)
		}
	}
	if err := Normalize([]byte("x"), 0, &e); !errors.Is(err, ErrNotObject) {
		t.Errorf("not an object: %v", err)
	}
	var se *SyntaxError
	if err := Normalize([]byte(`{"msg":`), 0, &e); !errors.As(err, &se) || se.Offset != 7 {
		t.Errorf("syntax error: %v", err)
	}
}

// Normalize agrees with encoding/json on which values are valid JSON objects
// and on their string fields.
func TestNormalizeMatchesEncodingJSON(t *testing.T) {
	for _, line := range readSample(t) {
		checkAgainstJSON(t, line)
	}
}

func FuzzNormalize(f *testing.F) {
	for _, line := range readSample(f) {
		f.Add(line)
	}
	f.Add([]byte(`{"msg":"\ud800\udc00\ud800","a":[{"b":[]}],"c":-0.5e-3}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		checkAgainstJSON(t, p)
		var e Entry
		Normalize(p, 0, &e)
		AppendTemplate(nil, p)
	})
}

func checkAgainstJSON(t *testing.T, p []byte) {
	t.Helper()
	var e Entry
	err := Normalize(p, 0, &e)
	var se *SyntaxError
	trimmed := bytes.TrimLeft(p, " \t\r\n")
	isObject := len(trimmed) > 0 && trimmed[0] == '{'
	valid := json.Valid(p)
	if isObject && valid == errors.As(err, &se) {
		t.Fatalf("%q: json.Valid = %v, Normalize: %v", p, valid, err)
	}
	if err != nil || !utf8.Valid(p) {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(p, &m); err != nil {
		t.Fatalf("%q: %v", p, err)
	}
	if s, ok := m["msg"].(string); ok && s != string(e.Msg) {
		t.Fatalf("%q: msg %q, encoding/json %q", p, e.Msg, s)
	}
	if s, ok := m["service"].(string); ok && s != "" && s != string(e.Service) {
		t.Fatalf("%q: service %q, encoding/json %q", p, e.Service, s)
	}
	n := 0
	for k, v := range m {
		switch k {
		case "ts", "level", "service", "msg":
			continue
		}
		n++
		i, ok := slices.BinarySearchFunc(e.Attrs, k, func(a Attr, k string) int { return strings.Compare(string(a.Key), k) })
		if !ok {
			t.Fatalf("%q: attr %q missing from %q", p, k, plain(&e).Attrs)
		}
		if s, ok := v.(string); ok && s != string(e.Attrs[i].Value) {
			t.Fatalf("%q: attr %q = %q, encoding/json %q", p, k, e.Attrs[i].Value, s)
		}
	}
	if n != len(e.Attrs) {
		t.Fatalf("%q: %d attrs, encoding/json %d", p, len(e.Attrs), n)
	}
}

func readSample(tb testing.TB) [][]byte {
	f, err := os.Open("../sample.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var lines [][]byte
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	return lines
}

func BenchmarkNormalize(b *testing.B) {
	var lines [][]byte
	var e Entry
	for _, l := range readSample(b) {
		if Normalize(l, 0, &e) == nil {
			lines = append(lines, l)
		}
	}
	size := 0
	for _, l := range lines {
		size += len(l)
	}
	b.SetBytes(int64(size) / int64(len(lines)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := Normalize(lines[i%len(lines)], 0, &e); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkTemplate(b *testing.B) {
	msg := []byte(`charge 5f3a9c7e2b1d4e60 for user 'alice' from 10.0.0.17:51234 failed after 1532.5ms: session 3f2504e0-4f89-11d3-9a0c-0305e82c3301`)
	var dst []byte
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendTemplate(dst[:0], msg)
	}
}

// TestNormalizeAllocs: once an Entry has grown, Normalize does not allocate.
func TestNormalizeAllocs(t *testing.T) {
	var e Entry
	lines := readSample(t)
	for _, l := range lines {
		Normalize(l, 0, &e)
	}
	allocs := testing.AllocsPerRun(10, func() {
		for _, l := range lines[:19] { // the valid lines; errors may allocate their message
			if err := Normalize(l, 0, &e); err != nil && !errors.Is(err, ErrNoMsg) {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations", allocs)
	}
}
