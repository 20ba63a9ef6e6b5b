package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost"
)

// vector is one case of vectors.json.
type vector struct {
	Name      string            `json:"name"`
	Skip      map[string]string `json:"skip"` // SDK → why the vector does not apply
	Params    map[string]string `json:"params"`
	Tables    []table           `json:"tables"`
	Refused   string            `json:"refused"` // the refusal init must return
	Topic     string            `json:"topic"`
	Partition int32             `json:"partition"`
	Records   []record          `json:"records"`
	Want      []want            `json:"want"`
}

type table struct {
	Name    string      `json:"name"`
	Columns [][2]string `json:"columns"` // name, type
}

type record struct {
	Offset    int64             `json:"offset"`
	Timestamp int64             `json:"timestamp"`
	Key       string            `json:"key"`
	Headers   [][2]string       `json:"headers"`
	Ops       []json.RawMessage `json:"ops"`
}

// want is one record's expected result: rows (table index, hex of the
// RowBinary), an error message, or filtered out.
type want struct {
	Rows     [][2]json.RawMessage `json:"rows"`
	Error    string               `json:"error"`
	Filtered bool                 `json:"filtered"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Vectors []vector }
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("vectors.json: %v", err)
	}
	return f.Vectors
}

// sdk is a guest SDK under test: how to build its conformance module.
type sdk struct {
	name  string
	build func(t testing.TB) []byte
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var sdks = []sdk{
	{"go", func(t testing.TB) []byte {
		out := filepath.Join(t.TempDir(), "conformance-go.wasm")
		if err := wasmbuild.Build(context.Background(), filepath.Join(wasmbuild.RepoRoot(), "guest-sdk/conformance/go"), out); err != nil {
			t.Fatal(err)
		}
		return readFile(t, out)
	}},
	{"c", func(t testing.TB) []byte {
		return readFile(t, wasmbuild.BuildCT(t, wasmbuild.Wasm, "guest-sdk/conformance/c"))
	}},
	{"rust", func(t testing.TB) []byte {
		return readFile(t, wasmbuild.BuildRustT(t, "guest-sdk/conformance/rust"))
	}},
	{"assemblyscript", func(t testing.TB) []byte {
		return readFile(t, wasmbuild.BuildAST(t, "guest-sdk/conformance/assemblyscript/index.ts"))
	}},
}

// TestConformance runs every vector through every SDK's conformance module
// and compares each record's status, error message and rows, byte for byte.
// It ends with the table of vector × SDK.
func TestConformance(t *testing.T) {
	vectors := loadVectors(t)
	results := map[string]map[string]string{} // vector → SDK → outcome
	for _, v := range vectors {
		results[v.Name] = map[string]string{}
	}
	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	for _, s := range sdks {
		t.Run(s.name, func(t *testing.T) {
			if s.name == "go" && testing.Short() {
				// The other SDKs' builds skip under -short in wasmbuild, for
				// want of their toolchains.
				t.Skip("compiling the Go module takes wazero seconds; -short skips it")
			}
			start := time.Now()
			wasm := s.build(t)
			t.Logf("built the %s module (%d bytes) in %v", s.name, len(wasm), time.Since(start).Round(time.Millisecond))
			mod, err := rt.Load(ctx, "conformance-"+s.name, wasm)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vectors {
				if why, ok := v.Skip[s.name]; ok {
					results[v.Name][s.name] = "n/a"
					t.Logf("%s: not applicable: %s", v.Name, why)
					continue
				}
				ok := t.Run(v.Name, func(t *testing.T) { runVector(t, mod, v) })
				results[v.Name][s.name] = map[bool]string{true: "pass", false: "FAIL"}[ok]
			}
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| vector |")
	for _, s := range sdks {
		fmt.Fprintf(&b, " %s |", s.name)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(sdks)))
	for _, v := range vectors {
		fmt.Fprintf(&b, "| %s |", v.Name)
		for _, s := range sdks {
			r := results[v.Name][s.name]
			if r == "" {
				r = "not run"
			}
			fmt.Fprintf(&b, " %s |", r)
		}
		b.WriteByte('\n')
	}
	t.Log(b.String())
}

func runVector(t *testing.T, mod *wasmhost.Module, v vector) {
	ctx := context.Background()
	cfg := wasmhost.InitConfig{Params: map[string]string{}}
	var names []string
	for _, tb := range v.Tables {
		ts := wasmhost.TableSchema{Name: tb.Name}
		for _, c := range tb.Columns {
			ts.Columns = append(ts.Columns, wasmhost.ColumnSchema{Name: c[0], Type: c[1]})
		}
		cfg.Tables = append(cfg.Tables, ts)
		names = append(names, tb.Name)
	}
	for k, val := range v.Params {
		cfg.Params[k] = val
	}
	// The C SDK cannot list the tables: its module looks them up by these names.
	cfg.Params["tables"] = strings.Join(names, "|")
	in, err := mod.Instantiate(ctx, cfg)
	if v.Refused != "" {
		prefix := "module " + mod.Name + ": " + wasmhost.ErrRefused.Error() + ": "
		if err == nil {
			in.Close(ctx)
			t.Fatalf("init accepted, want refused with %q", v.Refused)
		}
		if got := strings.TrimPrefix(err.Error(), prefix); got != v.Refused {
			t.Fatalf("init refused with\n\t%q\nwant\n\t%q", got, v.Refused)
		}
		return
	}
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	defer in.Close(ctx)
	if len(v.Want) != len(v.Records) {
		t.Fatalf("vector has %d records and %d results", len(v.Records), len(v.Want))
	}
	batch := &wasmhost.Batch{Topic: v.Topic, Partition: v.Partition}
	for i, r := range v.Records {
		script, err := encodeOps(r.Ops)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		rec := wasmhost.Record{Offset: r.Offset, Timestamp: r.Timestamp, Key: []byte(r.Key), Value: script}
		for _, h := range r.Headers {
			rec.Headers = append(rec.Headers, wasmhost.Header{Key: h[0], Value: []byte(h[1])})
		}
		batch.Records = append(batch.Records, rec)
	}
	out, err := in.Transform(ctx, batch)
	if err != nil {
		t.Fatalf("transform: %v", err)
	}
	for i := range v.Records {
		res, ok := out.Next()
		if !ok {
			t.Fatalf("record %d: no result", i)
		}
		w := v.Want[i]
		var gotRows []string
		for {
			tbl, row, ok := res.NextRow()
			if !ok {
				break
			}
			gotRows = append(gotRows, fmt.Sprintf("%d:%x", tbl, row))
		}
		switch {
		case w.Error != "":
			if res.Err != w.Error {
				t.Errorf("record %d: got error %q and rows %v, want error %q", i, res.Err, gotRows, w.Error)
			}
		case w.Filtered:
			if res.Err != "" || len(gotRows) != 0 {
				t.Errorf("record %d: got error %q and rows %v, want it filtered out", i, res.Err, gotRows)
			}
		default:
			var wantRows []string
			for _, wr := range w.Rows {
				var tbl int
				var hexs string
				if json.Unmarshal(wr[0], &tbl) != nil || json.Unmarshal(wr[1], &hexs) != nil {
					t.Fatalf("record %d: bad row in vector: %s", i, wr)
				}
				b, err := parseHex(hexs)
				if err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
				wantRows = append(wantRows, fmt.Sprintf("%d:%x", tbl, b))
			}
			if res.Err != "" || strings.Join(gotRows, " ") != strings.Join(wantRows, " ") {
				t.Errorf("record %d:\n\tgot  rows %v, error %q\n\twant rows %v", i, gotRows, res.Err, wantRows)
			}
		}
	}
}

// parseHex reads space-separated hex pieces; "hh*N" is the byte hh N times.
func parseHex(s string) ([]byte, error) {
	var out []byte
	for _, piece := range strings.Fields(s) {
		if h, n, ok := strings.Cut(piece, "*"); ok {
			count, err := strconv.Atoi(n)
			b, err2 := hex.DecodeString(h)
			if err != nil || err2 != nil {
				return nil, fmt.Errorf("bad hex piece %q", piece)
			}
			out = append(out, bytes.Repeat(b, count)...)
			continue
		}
		b, err := hex.DecodeString(piece)
		if err != nil {
			return nil, fmt.Errorf("bad hex piece %q: %v", piece, err)
		}
		out = append(out, b...)
	}
	return out, nil
}

// encodeOps turns a record's ops into the binary script the conformance
// modules run (README.md, "The script").
func encodeOps(ops []json.RawMessage) ([]byte, error) {
	var b []byte
	le := binary.LittleEndian
	str := func(s []byte) { b = le.AppendUint32(b, uint32(len(s))); b = append(b, s...) }
	for _, raw := range ops {
		var op []any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&op); err != nil || len(op) == 0 {
			return nil, fmt.Errorf("op %s: want [name, args…]", raw)
		}
		name, _ := op[0].(string)
		arg := func(i int) any {
			if i < len(op) {
				return op[i]
			}
			return nil
		}
		num := func(i int, bits int, signed bool) (uint64, error) {
			var s string
			switch x := arg(i).(type) {
			case json.Number:
				s = x.String()
			case string:
				s = x
			default:
				return 0, fmt.Errorf("op %s: argument %d is not a number", raw, i)
			}
			if signed {
				v, err := strconv.ParseInt(s, 10, bits)
				return uint64(v), err
			}
			return strconv.ParseUint(s, 10, bits)
		}
		text := func(i int) (string, error) {
			s, ok := arg(i).(string)
			if !ok {
				return "", fmt.Errorf("op %s: argument %d is not a string", raw, i)
			}
			return s, nil
		}
		var err error
		var u uint64
		var s string
		fixed := map[string]struct {
			code   byte
			bits   int
			signed bool
		}{
			"UInt8": {'a', 8, false}, "UInt16": {'b', 16, false}, "UInt32": {'c', 32, false}, "UInt64": {'d', 64, false},
			"Int8": {'e', 8, true}, "Int16": {'f', 16, true}, "Int32": {'g', 32, true}, "Int64": {'h', 64, true},
			"Date": {'D', 16, false}, "DateTime": {'T', 32, false}, "DateTime64": {'t', 64, true},
			"Enum8": {'m', 8, true}, "Enum16": {'M', 16, true},
		}
		if f, ok := fixed[name]; ok {
			if u, err = num(1, f.bits, f.signed); err != nil {
				return nil, err
			}
			b = append(b, f.code)
			for i := 0; i < f.bits/8; i++ {
				b = append(b, byte(u>>(8*i)))
			}
			continue
		}
		switch name {
		case "row":
			if u, err = num(1, 16, false); err != nil {
				return nil, err
			}
			b = le.AppendUint16(append(b, 'R'), uint16(u))
		case "end":
			b = append(b, 'E')
		case "fail":
			if s, err = text(1); err != nil {
				return nil, err
			}
			b = append(b, 'X')
			str([]byte(s))
		case "null":
			b = append(b, 'N')
		case "notnull":
			b = append(b, 'n')
		case "array":
			if u, err = num(1, 32, false); err != nil {
				return nil, err
			}
			b = le.AppendUint32(append(b, 'A'), uint32(u))
		case "Float32", "Float64":
			n, ok := arg(1).(json.Number)
			f, err := n.Float64()
			if !ok || err != nil {
				return nil, fmt.Errorf("op %s: want a number", raw)
			}
			if name == "Float32" {
				b = le.AppendUint32(append(b, 'i'), math.Float32bits(float32(f)))
			} else {
				b = le.AppendUint64(append(b, 'j'), math.Float64bits(f))
			}
		case "Float32bits", "Float64bits":
			if s, err = text(1); err != nil {
				return nil, err
			}
			if u, err = strconv.ParseUint(s, 16, 64); err != nil {
				return nil, err
			}
			if name == "Float32bits" {
				b = le.AppendUint32(append(b, 'i'), uint32(u))
			} else {
				b = le.AppendUint64(append(b, 'j'), u)
			}
		case "String", "FixedString":
			if s, err = text(1); err != nil {
				return nil, err
			}
			b = append(b, map[string]byte{"String": 's', "FixedString": 'x'}[name])
			str([]byte(s))
		case "StringHex", "FixedStringHex":
			if s, err = text(1); err != nil {
				return nil, err
			}
			raw, err := hex.DecodeString(s)
			if err != nil {
				return nil, err
			}
			b = append(b, map[string]byte{"StringHex": 's', "FixedStringHex": 'x'}[name])
			str(raw)
		case "StringRepeat":
			if s, err = text(1); err != nil {
				return nil, err
			}
			if u, err = num(2, 32, false); err != nil {
				return nil, err
			}
			b = append(b, 's')
			str([]byte(strings.Repeat(s, int(u))))
		case "Bool":
			v, ok := arg(1).(bool)
			if !ok {
				return nil, fmt.Errorf("op %s: want true or false", raw)
			}
			b = append(b, 'B', map[bool]byte{false: 0, true: 1}[v])
		case "UUID":
			if s, err = text(1); err != nil {
				return nil, err
			}
			raw, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
			if err != nil || len(raw) != 16 {
				return nil, fmt.Errorf("op %s: bad UUID", raw)
			}
			b = append(append(b, 'U'), raw...)
		case "IPv4", "IPv6":
			if s, err = text(1); err != nil {
				return nil, err
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			if name == "IPv4" {
				a4 := a.As4()
				b = append(append(b, 'v'), a4[:]...)
			} else {
				a16 := a.As16()
				b = append(append(b, 'V'), a16[:]...)
			}
		case "key", "offset", "partition", "timestamp", "topic":
			b = append(b, map[string]byte{"key": 'K', "offset": 'O', "partition": 'P', "timestamp": 'S', "topic": 'Q'}[name])
		case "header":
			if s, err = text(1); err != nil {
				return nil, err
			}
			b = append(b, 'H')
			str([]byte(s))
		case "ArrayString", "ArrayInt64", "ArrayUInt64":
			elems, ok := arg(1).([]any)
			if !ok {
				return nil, fmt.Errorf("op %s: want a list", raw)
			}
			b = le.AppendUint32(append(b, map[string]byte{"ArrayString": 'L', "ArrayInt64": 'I', "ArrayUInt64": 'W'}[name]), uint32(len(elems)))
			for i, e := range elems {
				switch name {
				case "ArrayString":
					es, ok := e.(string)
					if !ok {
						return nil, fmt.Errorf("op %s: element %d is not a string", raw, i)
					}
					str([]byte(es))
				default:
					var es string
					switch x := e.(type) {
					case json.Number:
						es = x.String()
					case string:
						es = x
					}
					var v uint64
					if name == "ArrayInt64" {
						var iv int64
						iv, err = strconv.ParseInt(es, 10, 64)
						v = uint64(iv)
					} else {
						v, err = strconv.ParseUint(es, 10, 64)
					}
					if err != nil {
						return nil, fmt.Errorf("op %s: element %d: %v", raw, i, err)
					}
					b = le.AppendUint64(b, v)
				}
			}
		default:
			return nil, fmt.Errorf("op %s: unknown op %q", raw, name)
		}
	}
	return b, nil
}
