package sluice

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

var testTables = []sluicetest.Table{
	{Name: "a", Columns: []sluicetest.Column{{Name: "s", Type: "String"}}},
	{Name: "b", Columns: []sluicetest.Column{{Name: "n", Type: "UInt64"}, {Name: "k", Type: "String"}}},
}

// echo writes each record's value to table a and, for a header "b", a row
// to table b too; "err", "panic" and "skip" values do what they say.
type echo struct{ a, b *Table }

func (e *echo) Init(cfg *Config) (err error) {
	if e.a, err = cfg.Table("a"); err != nil {
		return err
	}
	e.b, err = cfg.Table("b")
	return err
}

func (e *echo) Transform(rec *Record, out *Output) error {
	switch string(rec.Value) {
	case "err":
		out.Row(e.a).String("dropped").End()
		return errors.New("bad record")
	case "panic":
		out.Row(e.a).String("dropped") // a half-written row
		var m map[string]int
		m["x"]++
	case "skip":
		return nil
	}
	if err := out.Row(e.a).Bytes(rec.Value).End(); err != nil {
		return err
	}
	if _, ok := rec.Header("b"); ok {
		return out.Row(e.b).UInt64(uint64(rec.Offset)).Bytes(rec.Key).End()
	}
	return nil
}

func TestRoundTrip(t *testing.T) {
	in := NewInstance(&echo{})
	if msg := in.Init(sluicetest.InitPayload([]sluicetest.Param{{Key: "k", Value: "v"}}, testTables)); msg != "" {
		t.Fatal(msg)
	}
	res := run(t, in,
		sluicetest.Record{Offset: 10, Value: []byte("one")},
		sluicetest.Record{Offset: 11, Value: []byte("err")},
		sluicetest.Record{Offset: 12, Value: []byte("panic")},
		sluicetest.Record{Offset: 13, Value: []byte("skip")},
		sluicetest.Record{Offset: 14, Key: []byte("key"), Value: []byte("two"), Headers: []sluicetest.Header{{Key: "a", Value: []byte("1")}, {Key: "b"}}},
	)
	check := func(i int, failed bool, msg string, rows ...sluicetest.Row) {
		t.Helper()
		r := res[i]
		if r.Failed != failed || r.Err != msg || len(r.Rows) != len(rows) {
			t.Fatalf("record %d: %+v", i, r)
		}
		for j := range rows {
			if r.Rows[j].Table != rows[j].Table || !bytes.Equal(r.Rows[j].Data, rows[j].Data) {
				t.Errorf("record %d row %d: %+v, want %+v", i, j, r.Rows[j], rows[j])
			}
		}
	}
	check(0, false, "", sluicetest.Row{Table: 0, Data: []byte("\x03one")})
	check(1, true, "bad record")
	check(2, true, "panic: assignment to entry in nil map")
	check(3, false, "")
	check(4, false, "", sluicetest.Row{Table: 0, Data: []byte("\x03two")},
		sluicetest.Row{Table: 1, Data: []byte("\x0e\x00\x00\x00\x00\x00\x00\x00\x03key")})
}

func TestRecordFields(t *testing.T) {
	var got []Record
	in := NewInstance(funcs{transform: func(rec *Record, _ *Output) error {
		r := *rec
		r.Headers = append([]Header(nil), rec.Headers...)
		got = append(got, r)
		return nil
	}})
	if msg := in.Init(sluicetest.InitPayload(nil, nil)); msg != "" {
		t.Fatal(msg)
	}
	run(t, in,
		sluicetest.Record{Offset: -1, Timestamp: 1700000000123, Key: []byte("k"), Value: []byte("v"),
			Headers: []sluicetest.Header{{Key: "h1", Value: []byte("x")}, {Key: "h2"}}},
		sluicetest.Record{Offset: 1 << 40},
	)
	r := got[0]
	if r.Topic != "topic" || r.Partition != 3 || r.Offset != -1 || r.Timestamp != 1700000000123 ||
		string(r.Key) != "k" || string(r.Value) != "v" || len(r.Headers) != 2 ||
		r.Headers[0].Key != "h1" || string(r.Headers[0].Value) != "x" || r.Headers[1].Key != "h2" || len(r.Headers[1].Value) != 0 {
		t.Errorf("record 0: %+v", r)
	}
	if cap(r.Key) != len(r.Key) || cap(r.Value) != len(r.Value) {
		t.Error("Key and Value must be capped so that appending cannot clobber the payload")
	}
	if r := got[1]; r.Offset != 1<<40 || len(r.Key) != 0 || len(r.Value) != 0 || len(r.Headers) != 0 {
		t.Errorf("record 1: %+v", r)
	}
}

func TestInitRefusals(t *testing.T) {
	init := sluicetest.InitPayload(nil, testTables)
	tests := []struct {
		name    string
		h       Handler
		payload []byte
		want    string
	}{
		{"refuse", funcs{init: func(*Config) error { return errors.New("param x is required") }}, init, "param x is required"},
		{"empty message", funcs{init: func(*Config) error { return errors.New("") }}, init, "sluice: the module refused its config (empty error message)"},
		{"panic", funcs{init: func(*Config) error { panic("boom") }}, init, "panic: boom"},
		{"no handler", nil, init, "sluice: no handler registered: call sluice.Run from an init function"},
		{"no table", funcs{init: func(c *Config) error { _, err := c.Table("logs"); return err }}, init,
			`sluice: the pipeline has no target table "logs" (tables: "a", "b")`},
		{"truncated", &echo{}, init[:len(init)-1], "sluice: malformed init payload: truncated reading column type at offset"},
		{"trailing", &echo{}, append(init[:len(init):len(init)], 0), "sluice: malformed init payload: 1 trailing bytes at offset"},
	}
	for _, tt := range tests {
		in := NewInstance(tt.h)
		if got := in.Init(tt.payload); !strings.HasPrefix(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		// A refused instance fails its records rather than running them.
		res := run(t, in, sluicetest.Record{Value: []byte("x")})
		if !res[0].Failed || res[0].Err != errNotInitialized.Error() {
			t.Errorf("%s: transform after refusal: %+v", tt.name, res[0])
		}
	}
}

func TestInitParams(t *testing.T) {
	var cfg *Config
	in := NewInstance(funcs{init: func(c *Config) error { cfg = c; return nil }})
	payload := sluicetest.InitPayload([]sluicetest.Param{{Key: "a", Value: "1"}, {Key: "b", Value: ""}}, testTables)
	if msg := in.Init(payload); msg != "" {
		t.Fatal(msg)
	}
	clear(payload) // the config must not alias the payload
	if v, ok := cfg.Param("a"); !ok || v != "1" {
		t.Errorf("Param(a) = %q, %v", v, ok)
	}
	if v, ok := cfg.Param("b"); !ok || v != "" {
		t.Errorf("Param(b) = %q, %v", v, ok)
	}
	if _, ok := cfg.Param("c"); ok {
		t.Error("Param(c) found")
	}
	if len(cfg.Tables) != 2 || cfg.Tables[1].Name != "b" || cfg.Tables[1].Index != 1 ||
		cfg.Tables[1].Columns[1].Name != "k" || cfg.Tables[1].Columns[1].Type != "String" {
		t.Errorf("tables %+v", cfg.Tables)
	}
}

// Every truncation of a valid init payload is an error, never a panic.
func TestInitTruncated(t *testing.T) {
	p := sluicetest.InitPayload([]sluicetest.Param{{Key: "a", Value: "1"}}, testTables)
	for n := 0; n < len(p); n++ {
		if _, err := decodeInit(p[:n]); err == nil {
			t.Errorf("decodeInit of %d/%d bytes: no error", n, len(p))
		}
	}
	// A count far larger than the payload is refused before any allocation.
	if _, err := decodeInit([]byte{0xff, 0xff, 0xff, 0xff}); err == nil || !strings.Contains(err.Error(), "nparams 4294967295 does not fit") {
		t.Errorf("huge count: %v", err)
	}
}

// Every truncation of a valid batch payload yields an output the host can
// parse: zero records when the header is cut or claims more records than the
// payload can hold, otherwise one entry per
// record, the ones that are cut (and those after) being errors.
func TestBatchTruncated(t *testing.T) {
	in := NewInstance(&echo{})
	if msg := in.Init(sluicetest.InitPayload(nil, testTables)); msg != "" {
		t.Fatal(msg)
	}
	var logs []string
	logHook = func(_ Level, msg string) { logs = append(logs, msg) }
	defer func() { logHook = nil }()
	recs := []sluicetest.Record{
		{Offset: 1, Value: []byte("one"), Headers: []sluicetest.Header{{Key: "b", Value: []byte("1")}}},
		{Offset: 2, Key: []byte("k"), Value: []byte("two")},
	}
	p := sluicetest.BatchPayload("topic", 0, recs)
	header := 4 + len("topic") + 4 + 4
	for n := 0; n < len(p); n++ {
		res, err := sluicetest.DecodeOutput(in.Transform(p[:n]))
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if n < header+2*28 { // the header is cut, or its count cannot fit: a record takes 28 bytes at least
			if len(res) != 0 {
				t.Errorf("%d bytes: %d results, want 0", n, len(res))
			}
			continue
		}
		if len(res) != 2 || !res[1].Failed || !strings.HasPrefix(res[1].Err, "sluice: malformed batch payload: record ") {
			t.Errorf("%d bytes: %+v", n, res)
		}
	}
	if len(logs) == 0 || !strings.HasPrefix(logs[0], "sluice: malformed batch payload: truncated reading topic") {
		t.Errorf("logs %q", logs)
	}
	// A record count that cannot fit is a header error.
	res, _ := sluicetest.DecodeOutput(in.Transform(append(p[:header-4:header-4], 0xff, 0, 0, 0)))
	if len(res) != 0 {
		t.Errorf("nrecords 255 in a short payload: %d results", len(res))
	}
}

func FuzzTransform(f *testing.F) {
	f.Add(sluicetest.BatchPayload("t", 1, []sluicetest.Record{{Value: []byte("v"), Headers: []sluicetest.Header{{Key: "b"}}}}))
	f.Add(sluicetest.BatchPayload("t", 1, []sluicetest.Record{{Value: []byte("panic")}, {Value: []byte("err")}}))
	f.Add([]byte{})
	in := NewInstance(&echo{})
	if msg := in.Init(sluicetest.InitPayload(nil, testTables)); msg != "" {
		f.Fatal(msg)
	}
	logHook = func(Level, string) {}
	f.Fuzz(func(t *testing.T, p []byte) {
		if _, err := sluicetest.DecodeOutput(in.Transform(p)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestInputCap: sluice_alloc's buffer grows by a quarter of what the call
// needs, from 64 KiB, so that a call a byte over the buffer does not
// double it, and calls that grow a byte at a time reallocate it once per
// quarter.
func TestInputCap(t *testing.T) {
	for _, tc := range []struct{ size, want int }{
		{0, 64 << 10},
		{1, 64 << 10},
		{800_000, 1_000_000},
		{1_000_001, 1_250_001}, // one byte over a buffer of 1,000,000
		{4 << 20, 5 << 20},
	} {
		if got := inputCap(tc.size); got != tc.want {
			t.Errorf("inputCap(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
	// Calls growing a byte at a time from 1 byte to 1 MiB, as sluice_alloc
	// grows for them.
	have, grows := 0, 0
	for size := 1; size <= 1<<20; size++ {
		if size > have {
			have = inputCap(size)
			grows++
		}
		if have > size+size/4+64<<10 {
			t.Fatalf("a call of %d bytes left a buffer of %d", size, have)
		}
	}
	if grows > 14 { // the first, then 1.25^13 > 16
		t.Errorf("%d reallocations for calls growing from 1 byte to 1 MiB, want at most 14", grows)
	}
}
