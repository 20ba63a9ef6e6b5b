package sluice

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// flatColumn runs write on a one-record batch against a table t with a
// single column c of type typ, as oneColumn does for Row.
func flatColumn(t *testing.T, typ string, write func(*FlatRow)) ([]byte, string) {
	t.Helper()
	return runRow(t, []sluicetest.Column{{Name: "c", Type: typ}}, func(tb *Table, out *Output) error {
		w := out.Flat(tb)
		write(w)
		return w.End()
	})
}

// A value written with FlatRow is byte for byte what Row writes, and what
// sluicetest's independent decoder accepts.
func TestFlatRowEncoding(t *testing.T) {
	uuid := [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}
	long := strings.Repeat("x", 200)
	tests := []struct {
		typ  string
		flat func(*FlatRow)
		row  func(*Row)
	}{
		{"UInt8", func(w *FlatRow) { w.UInt8(0xfe) }, func(r *Row) { r.UInt8(0xfe) }},
		{"UInt16", func(w *FlatRow) { w.UInt16(0x0102) }, func(r *Row) { r.UInt16(0x0102) }},
		{"UInt32", func(w *FlatRow) { w.UInt32(0x01020304) }, func(r *Row) { r.UInt32(0x01020304) }},
		{"UInt64", func(w *FlatRow) { w.UInt64(math.MaxUint64 - 1) }, func(r *Row) { r.UInt64(math.MaxUint64 - 1) }},
		{"Int8", func(w *FlatRow) { w.Int8(-2) }, func(r *Row) { r.Int8(-2) }},
		{"Int16", func(w *FlatRow) { w.Int16(-2) }, func(r *Row) { r.Int16(-2) }},
		{"Int32", func(w *FlatRow) { w.Int32(-2) }, func(r *Row) { r.Int32(-2) }},
		{"Int64", func(w *FlatRow) { w.Int64(math.MinInt64) }, func(r *Row) { r.Int64(math.MinInt64) }},
		{"Float32", func(w *FlatRow) { w.Float32(-1.5) }, func(r *Row) { r.Float32(-1.5) }},
		{"Float64", func(w *FlatRow) { w.Float64(math.Inf(-1)) }, func(r *Row) { r.Float64(math.Inf(-1)) }},
		{"Bool", func(w *FlatRow) { w.Bool(true) }, func(r *Row) { r.Bool(true) }},
		{"Bool", func(w *FlatRow) { w.Bool(false) }, func(r *Row) { r.Bool(false) }},
		{"String", func(w *FlatRow) { w.String("hé") }, func(r *Row) { r.String("hé") }},
		{"String", func(w *FlatRow) { w.String(long) }, func(r *Row) { r.String(long) }},
		{"String", func(w *FlatRow) { w.Bytes(nil) }, func(r *Row) { r.Bytes(nil) }},
		{"LowCardinality(String)", func(w *FlatRow) { w.Bytes([]byte(long)) }, func(r *Row) { r.Bytes([]byte(long)) }},
		{"Date", func(w *FlatRow) { w.Date(19000) }, func(r *Row) { r.Date(19000) }},
		{"Date32", func(w *FlatRow) { w.Date32(-1) }, func(r *Row) { r.Date32(-1) }},
		{"DateTime", func(w *FlatRow) { w.DateTime(1700000000) }, func(r *Row) { r.DateTime(1700000000) }},
		{"DateTime('UTC')", func(w *FlatRow) { w.DateTime(1) }, func(r *Row) { r.DateTime(1) }},
		{"DateTime64(3)", func(w *FlatRow) { w.DateTime64(-1) }, func(r *Row) { r.DateTime64(-1) }},
		{"DateTime64(6, 'UTC')", func(w *FlatRow) { w.DateTime64(1700000000123456) }, func(r *Row) { r.DateTime64(1700000000123456) }},
		{"UUID", func(w *FlatRow) { w.UUID(uuid) }, func(r *Row) { r.UUID(uuid) }},
		{"IPv4", func(w *FlatRow) { w.IPv4([4]byte{192, 168, 1, 2}) }, func(r *Row) { r.IPv4([4]byte{192, 168, 1, 2}) }},
		{"IPv6", func(w *FlatRow) { w.IPv6([16]byte{0x20, 0x01, 15: 1}) }, func(r *Row) { r.IPv6([16]byte{0x20, 0x01, 15: 1}) }},
		{"Nullable(String)", func(w *FlatRow) { w.Null() }, func(r *Row) { r.Null() }},
		{"Nullable(String)", func(w *FlatRow) { w.NotNull().String("a") }, func(r *Row) { r.NotNull().String("a") }},
		{"Nullable(Float64)", func(w *FlatRow) { w.NotNull().Float64(0.5) }, func(r *Row) { r.Float64(0.5) }},
		{"LowCardinality(Nullable(String))", func(w *FlatRow) { w.NotNull().Bytes([]byte("b")) }, func(r *Row) { r.Bytes([]byte("b")) }},
		{"LowCardinality(Nullable(String))", func(w *FlatRow) { w.Null() }, func(r *Row) { r.Null() }},
		{"Nullable(DateTime64(3))", func(w *FlatRow) { w.NotNull().DateTime64(5) }, func(r *Row) { r.DateTime64(5) }},
		{"Array(String)", func(w *FlatRow) { w.ArrayString([]string{"a", long}) }, func(r *Row) { r.ArrayString([]string{"a", long}) }},
		{"Array(String)", func(w *FlatRow) { w.ArrayString(nil) }, func(r *Row) { r.ArrayString(nil) }},
		{"Array(LowCardinality(String))", func(w *FlatRow) { w.ArrayBytes([][]byte{[]byte("a"), nil}) }, func(r *Row) { r.ArrayString([]string{"a", ""}) }},
		{"Array(Int64)", func(w *FlatRow) { w.ArrayInt64([]int64{-1, 2}) }, func(r *Row) { r.ArrayInt64([]int64{-1, 2}) }},
		{"Array(UInt64)", func(w *FlatRow) { w.ArrayUInt64([]uint64{1}) }, func(r *Row) { r.ArrayUInt64([]uint64{1}) }},
	}
	for _, tt := range tests {
		want, err := oneColumn(t, tt.typ, tt.row)
		if err != "" {
			t.Fatalf("%s: Row: %s", tt.typ, err)
		}
		got, err := flatColumn(t, tt.typ, tt.flat)
		if err != "" {
			t.Errorf("%s: %s", tt.typ, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: wrote % x, Row wrote % x", tt.typ, got, want)
		}
		if _, err := sluicetest.DecodeRow([]sluicetest.Column{{Name: "c", Type: tt.typ}}, got); err != nil {
			t.Errorf("%s: DecodeRow: %v", tt.typ, err)
		}
	}
}

func TestFlatRowChecks(t *testing.T) {
	tests := []struct {
		typ   string
		write func(*FlatRow)
		want  string
	}{
		{"DateTime", func(w *FlatRow) { w.String("x") }, `sluice: table "t", column "c" (DateTime): expected DateTime, got String`},
		{"LowCardinality(String)", func(w *FlatRow) { w.UInt64(1) }, `column "c" (LowCardinality(String)): expected LowCardinality(String), got UInt64`},
		{"UInt32", func(w *FlatRow) { w.UInt32(1).UInt32(2) }, `sluice: table "t": UInt32 value written past the last column (the table has 1)`},
		{"UInt32", func(w *FlatRow) {}, `sluice: table "t": row ended after 0 of 1 columns: column "c" (UInt32) not written`},
		{"Nullable(Float64)", func(w *FlatRow) { w.Float64(1) }, `column "c" (Nullable(Float64)): FlatRow needs NotNull() before a Nullable column's value (or Null())`},
		{"Nullable(Float64)", func(w *FlatRow) { w.NotNull() }, `row ended after 0 of 1 columns: column "c" (Nullable(Float64)) not written`},
		{"Nullable(Float64)", func(w *FlatRow) { w.NotNull().Null() }, `column "c" (Nullable(Float64)): expected Float64, got NULL`},
		{"Nullable(Float64)", func(w *FlatRow) { w.NotNull().Int64(1) }, `column "c" (Nullable(Float64)): expected Float64, got Int64`},
		{"Nullable(String)", func(w *FlatRow) { w.UInt8(1) }, `expected Nullable(String), got UInt8`},
		{"String", func(w *FlatRow) { w.Null() }, `expected String, got NULL`},
		{"String", func(w *FlatRow) { w.NotNull() }, `expected String, got NotNull`},
		{"Array(UInt8)", func(w *FlatRow) { w.ArrayString([]string{"a"}) }, `column "c": FlatRow cannot write type Array(UInt8); write this table's rows with Output.Row`},
		{"Array(String)", func(w *FlatRow) { w.ArrayInt64(nil) }, `column "c" (Array(String)): expected Array(String), got Array(Int64)`},
		{"Array(Int64)", func(w *FlatRow) { w.ArrayUInt64(nil) }, `expected Array(Int64), got Array(UInt64)`},
		{"Array(UInt64)", func(w *FlatRow) { w.ArrayBytes(nil) }, `expected Array(UInt64), got Array(String)`},
		{"Array(Nullable(String))", func(w *FlatRow) { w.ArrayString(nil) }, `FlatRow cannot write type Array(Nullable(String))`},
		{"FixedString(2)", func(w *FlatRow) { w.Bytes([]byte("ab")) }, `column "c": FlatRow cannot write type FixedString(2); write this table's rows with Output.Row`},
		{"Enum8('a' = 1)", func(w *FlatRow) { w.Int8(1) }, `FlatRow cannot write type Enum8('a' = 1)`},
		{"Decimal(9, 2)", func(w *FlatRow) { w.Int32(1) }, `FlatRow cannot write type Decimal(9, 2)`},
		{"Nullable(FixedString(2))", func(w *FlatRow) { w.NotNull() }, `FlatRow cannot write type Nullable(FixedString(2))`},
		{"Map(String, UInt8)", func(w *FlatRow) { w.String("k") }, `FlatRow cannot write type Map(String, UInt8)`},
		{"Variant(String, UInt8)", func(w *FlatRow) { w.Int64(1) }, `column "c": the SDK cannot write type Variant(String, UInt8): type "Variant(String, UInt8)": Variant is not supported by the guest ABI`},
		// The first mismatch is the one reported.
		{"UInt8", func(w *FlatRow) { w.String("a").UInt8(1).Int8(2) }, `expected UInt8, got String`},
		{"UInt8", func(w *FlatRow) { w.UInt8(1).Int8(2).String("a") }, `Int8 value written past the last column`},
	}
	for _, tt := range tests {
		got, err := flatColumn(t, tt.typ, tt.write)
		if err == "" {
			t.Errorf("%s: wrote % x, want error %q", tt.typ, got, tt.want)
			continue
		}
		if !strings.Contains(err, tt.want) {
			t.Errorf("%s: error %q\n\twant it to contain %q", tt.typ, err, tt.want)
		}
	}
}

func TestFlatRowMisuse(t *testing.T) {
	cols := []sluicetest.Column{{Name: "a", Type: "UInt8"}}
	tests := []struct {
		name string
		f    func(*Table, *Output) error
		want string
	}{
		{"no row", func(tb *Table, out *Output) error { return out.flat.UInt8(1).End() }, "UInt8 value written with no row started (call Output.Flat first)"},
		{"End with no row", func(tb *Table, out *Output) error { return out.flat.End() }, "End called with no row started"},
		{"no row, no End", func(tb *Table, out *Output) error { out.flat.UInt8(1); return nil }, "UInt8 value written with no row started (call Output.Flat first)"},
		{"write after End", func(tb *Table, out *Output) error {
			w := out.Flat(tb).UInt8(1)
			if err := w.End(); err != nil {
				return err
			}
			w.UInt8(2)
			return nil
		}, "UInt8 value written with no row started"},
		{"write after End, then a row", func(tb *Table, out *Output) error {
			w := out.Flat(tb).UInt8(1)
			w.End()
			w.String("x")
			return out.Flat(tb).UInt8(3).End()
		}, "String value written with no row started"},
		{"NULL and an array after End", func(tb *Table, out *Output) error {
			w := out.Flat(tb).UInt8(1)
			w.End()
			w.Null().NotNull().ArrayBytes(nil).ArrayInt64(nil).Float64(1)
			return nil
		}, "NULL value written with no row started"},
		{"end twice", func(tb *Table, out *Output) error {
			w := out.Flat(tb).UInt8(1)
			w.End()
			return w.End()
		}, "End called with no row started"},
		{"flat in flat", func(tb *Table, out *Output) error { out.Flat(tb); out.Flat(tb); return nil }, `table "t": Flat called before End of the previous row`},
		{"flat in row", func(tb *Table, out *Output) error { out.Row(tb); return out.Flat(tb).UInt8(1).End() }, `table "t": Flat called before End of the previous row`},
		{"row in flat", func(tb *Table, out *Output) error { out.Flat(tb); return out.Row(tb).UInt8(1).End() }, `table "t": Row called before End of the previous row`},
		{"not ended", func(tb *Table, out *Output) error { out.Flat(tb).UInt8(1); return nil }, `table "t": Transform returned without calling End on its row`},
		{"mismatch, not ended", func(tb *Table, out *Output) error { out.Flat(tb).String("x"); return nil }, `expected UInt8, got String`},
		{"mismatch, then a row", func(tb *Table, out *Output) error { out.Flat(tb).String("x"); return out.Row(tb).UInt8(1).End() }, `expected UInt8, got String`},
		{"nil table", func(tb *Table, out *Output) error { return out.Flat(nil).UInt8(1).End() }, "Flat called with a nil table"},
		{"foreign table", func(tb *Table, out *Output) error {
			return out.Flat(&Table{Name: "x"}).End()
		}, `table "x" is not from this instance's Config`},
		{"error ignored", func(tb *Table, out *Output) error { out.Flat(tb).String("x").End(); return nil }, "expected UInt8, got String"},
		{"error of an earlier row", func(tb *Table, out *Output) error {
			out.Row(tb).String("x").End()
			return out.Flat(tb).UInt8(1).End()
		}, "expected UInt8, got String"},
	}
	for _, tt := range tests {
		_, err := runRow(t, cols, tt.f)
		if !strings.Contains(err, tt.want) {
			t.Errorf("%s: error %q, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

// Rows of several tables and records, Row and FlatRow mixed: a failed
// record leaves no row and no state behind for the next one.
func TestFlatRowRecords(t *testing.T) {
	var a, b *Table
	in := NewInstance(funcs{
		init: func(cfg *Config) (err error) {
			if a, err = cfg.Table("a"); err != nil {
				return err
			}
			b, err = cfg.Table("b")
			return err
		},
		transform: func(rec *Record, out *Output) error {
			switch string(rec.Value) {
			case "bad":
				out.Flat(a).UInt8(1).String("two")
				return out.Flat(b).String("never").End() // the first row's mismatch fails the record first
			case "open":
				out.Flat(b).String("left open")
				return nil
			}
			if err := out.Flat(a).UInt8(1).UInt16(2).End(); err != nil {
				return err
			}
			if err := out.Row(b).String("row").End(); err != nil {
				return err
			}
			return out.Flat(b).String(string(rec.Value)).End()
		},
	})
	tables := []sluicetest.Table{
		{Name: "a", Columns: []sluicetest.Column{{Name: "x", Type: "UInt8"}, {Name: "y", Type: "UInt16"}}},
		{Name: "b", Columns: []sluicetest.Column{{Name: "s", Type: "String"}}},
	}
	if msg := in.Init(sluicetest.InitPayload(nil, tables)); msg != "" {
		t.Fatal(msg)
	}
	for range 2 { // the buffers are reused from batch to batch
		res := run(t, in, sluicetest.Record{Value: []byte("one")}, sluicetest.Record{Value: []byte("bad")},
			sluicetest.Record{Value: []byte("open")}, sluicetest.Record{Value: []byte("three")})
		for i, want := range []string{"one", "", "", "three"} {
			r := res[i]
			if want == "" {
				if !r.Failed || len(r.Rows) != 0 {
					t.Errorf("record %d: %+v, want it failed with no rows", i, r)
				}
				continue
			}
			if r.Failed || len(r.Rows) != 3 {
				t.Fatalf("record %d: %+v, want 3 rows", i, r)
			}
			if r.Rows[0].Table != 0 || !bytes.Equal(r.Rows[0].Data, []byte{1, 2, 0}) {
				t.Errorf("record %d row 0: %+v", i, r.Rows[0])
			}
			if r.Rows[2].Table != 1 || !bytes.Equal(r.Rows[2].Data, append([]byte{byte(len(want))}, want...)) {
				t.Errorf("record %d row 2: %+v", i, r.Rows[2])
			}
		}
		if !strings.Contains(res[1].Err, `table "a", column "y" (UInt16): expected UInt16, got String`) {
			t.Errorf("bad record: %q", res[1].Err)
		}
		if !strings.Contains(res[2].Err, "Transform returned without calling End") {
			t.Errorf("open record: %q", res[2].Err)
		}
	}
}

// flatOp is one write, made both ways.
type flatOp struct {
	name string
	flat func(*FlatRow)
	row  func(*Row)
}

var flatOps = []flatOp{
	{"UInt8", func(w *FlatRow) { w.UInt8(7) }, func(r *Row) { r.UInt8(7) }},
	{"UInt16", func(w *FlatRow) { w.UInt16(700) }, func(r *Row) { r.UInt16(700) }},
	{"UInt32", func(w *FlatRow) { w.UInt32(7e6) }, func(r *Row) { r.UInt32(7e6) }},
	{"UInt64", func(w *FlatRow) { w.UInt64(7e12) }, func(r *Row) { r.UInt64(7e12) }},
	{"Int8", func(w *FlatRow) { w.Int8(-7) }, func(r *Row) { r.Int8(-7) }},
	{"Int16", func(w *FlatRow) { w.Int16(-700) }, func(r *Row) { r.Int16(-700) }},
	{"Int32", func(w *FlatRow) { w.Int32(-7e6) }, func(r *Row) { r.Int32(-7e6) }},
	{"Int64", func(w *FlatRow) { w.Int64(-7e12) }, func(r *Row) { r.Int64(-7e12) }},
	{"Float32", func(w *FlatRow) { w.Float32(0.25) }, func(r *Row) { r.Float32(0.25) }},
	{"Float64", func(w *FlatRow) { w.Float64(0.125) }, func(r *Row) { r.Float64(0.125) }},
	{"Bool", func(w *FlatRow) { w.Bool(true) }, func(r *Row) { r.Bool(true) }},
	{"String", func(w *FlatRow) { w.String("str") }, func(r *Row) { r.String("str") }},
	{"Bytes", func(w *FlatRow) { w.Bytes([]byte("bytes")) }, func(r *Row) { r.Bytes([]byte("bytes")) }},
	{"Date", func(w *FlatRow) { w.Date(3) }, func(r *Row) { r.Date(3) }},
	{"Date32", func(w *FlatRow) { w.Date32(-3) }, func(r *Row) { r.Date32(-3) }},
	{"DateTime", func(w *FlatRow) { w.DateTime(33) }, func(r *Row) { r.DateTime(33) }},
	{"DateTime64", func(w *FlatRow) { w.DateTime64(333) }, func(r *Row) { r.DateTime64(333) }},
	{"UUID", func(w *FlatRow) { w.UUID([16]byte{1, 15: 2}) }, func(r *Row) { r.UUID([16]byte{1, 15: 2}) }},
	{"IPv4", func(w *FlatRow) { w.IPv4([4]byte{1, 2, 3, 4}) }, func(r *Row) { r.IPv4([4]byte{1, 2, 3, 4}) }},
	{"IPv6", func(w *FlatRow) { w.IPv6([16]byte{15: 9}) }, func(r *Row) { r.IPv6([16]byte{15: 9}) }},
	{"Null", func(w *FlatRow) { w.Null() }, func(r *Row) { r.Null() }},
	{"NotNull", func(w *FlatRow) { w.NotNull() }, func(r *Row) { r.NotNull() }},
	{"ArrayString", func(w *FlatRow) { w.ArrayString([]string{"x", "yz"}) }, func(r *Row) { r.ArrayString([]string{"x", "yz"}) }},
	{"ArrayBytes", func(w *FlatRow) { w.ArrayBytes([][]byte{[]byte("x")}) }, func(r *Row) { r.ArrayString([]string{"x"}) }},
	{"ArrayInt64", func(w *FlatRow) { w.ArrayInt64([]int64{-1}) }, func(r *Row) { r.ArrayInt64([]int64{-1}) }},
	{"ArrayUInt64", func(w *FlatRow) { w.ArrayUInt64([]uint64{1, 2}) }, func(r *Row) { r.ArrayUInt64([]uint64{1, 2}) }},
}

// flatTypes are the column types of the random tables: each op above has
// one, plus the Nullable and LowCardinality forms and types FlatRow does
// not write.
var flatTypes = []string{
	"UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64", "Float32", "Float64",
	"Bool", "String", "LowCardinality(String)", "Date", "Date32", "DateTime", "DateTime64(3)",
	"UUID", "IPv4", "IPv6", "Nullable(UInt8)", "Nullable(String)", "LowCardinality(Nullable(String))",
	"Nullable(Float64)", "Array(String)", "Array(LowCardinality(String))", "Array(Int64)", "Array(UInt64)",
	"FixedString(3)", "Array(UInt8)",
}

// For random tables and random sequences of writes, mostly the right ones:
// FlatRow accepts exactly what Row accepts when every Nullable value comes
// after NotNull, writes the same bytes, and fails with an error otherwise.
func TestFlatRowMatchesRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	opFor := map[string][]int{} // column type → the ops that write it
	for i, op := range flatOps {
		for _, typ := range flatTypes {
			if writes(op.name, typ) {
				opFor[typ] = append(opFor[typ], i)
			}
		}
	}
	accepted, refused := 0, 0
	for iter := range 2000 {
		cols := make([]sluicetest.Column, 1+rng.IntN(6))
		for i := range cols {
			cols[i] = sluicetest.Column{Name: fmt.Sprintf("c%d", i), Type: flatTypes[rng.IntN(len(flatTypes))]}
		}
		var ops []int
		for _, c := range cols {
			if strings.HasPrefix(c.Type, "Nullable(") || strings.HasPrefix(c.Type, "LowCardinality(Nullable(") {
				if rng.IntN(3) == 0 {
					ops = append(ops, opIndex("Null"))
					continue
				}
				ops = append(ops, opIndex("NotNull"))
			}
			if w := opFor[c.Type]; len(w) > 0 && rng.IntN(20) != 0 {
				ops = append(ops, w[rng.IntN(len(w))])
			} else {
				ops = append(ops, rng.IntN(len(flatOps)))
			}
		}
		if rng.IntN(10) == 0 { // one too few or one too many
			if len(ops) > 0 && rng.IntN(2) == 0 {
				ops = ops[:len(ops)-1]
			} else {
				ops = append(ops, rng.IntN(len(flatOps)))
			}
		}
		names := make([]string, len(ops))
		for i, o := range ops {
			names[i] = flatOps[o].name
		}
		want, rowErr := runRow(t, cols, func(tb *Table, out *Output) error {
			r := out.Row(tb)
			for _, o := range ops {
				flatOps[o].row(r)
			}
			return r.End()
		})
		got, flatErr := runRow(t, cols, func(tb *Table, out *Output) error {
			w := out.Flat(tb)
			for _, o := range ops {
				flatOps[o].flat(w)
			}
			return w.End()
		})
		flatOnly := true // every column one FlatRow writes
		for _, c := range cols {
			flatOnly = flatOnly && c.Type != "FixedString(3)" && c.Type != "Array(UInt8)"
		}
		switch {
		case rowErr == "" && flatErr == "":
			accepted++
			if !bytes.Equal(got, want) {
				t.Fatalf("iteration %d, %v, writes %v: FlatRow wrote % x, Row % x", iter, cols, names, got, want)
			}
		case rowErr == "" && flatOnly:
			t.Fatalf("iteration %d, %v, writes %v: Row accepted, FlatRow failed: %s", iter, cols, names, flatErr)
		case rowErr != "" && flatErr == "":
			t.Fatalf("iteration %d, %v, writes %v: Row failed (%s), FlatRow accepted", iter, cols, names, rowErr)
		default:
			refused++
		}
	}
	if accepted < 500 || refused < 200 {
		t.Errorf("%d sequences accepted, %d refused: the test does not exercise both", accepted, refused)
	}
}

func opIndex(name string) int {
	for i, op := range flatOps {
		if op.name == name {
			return i
		}
	}
	panic(name)
}

// writes reports whether op writes a (non-null) value of a column of type typ.
func writes(op, typ string) bool {
	typ = strings.TrimPrefix(typ, "LowCardinality(")
	typ = strings.TrimPrefix(typ, "Nullable(")
	typ = strings.TrimRight(typ, ")")
	switch op {
	case "Bytes":
		return typ == "String"
	case "DateTime64":
		return typ == "DateTime64(3"
	case "ArrayString", "ArrayBytes":
		return typ == "Array(String" || typ == "Array(LowCardinality(String"
	case "ArrayInt64":
		return typ == "Array(Int64"
	case "ArrayUInt64":
		return typ == "Array(UInt64"
	}
	return op == typ
}

// FlatRow allocates nothing once the output buffer has grown.
func TestFlatRowAllocs(t *testing.T) {
	var tb *Table
	tags := [][]byte{[]byte("a"), []byte("b")}
	in := NewInstance(funcs{
		init: func(cfg *Config) (err error) { tb, err = cfg.Table("t"); return err },
		transform: func(rec *Record, out *Output) error {
			return out.Flat(tb).UInt64(uint64(rec.Offset)).Bytes(rec.Value).NotNull().Float64(1).ArrayBytes(tags).End()
		},
	})
	cols := []sluicetest.Column{{Name: "o", Type: "UInt64"}, {Name: "v", Type: "LowCardinality(String)"},
		{Name: "q", Type: "Nullable(Float64)"}, {Name: "tags", Type: "Array(LowCardinality(String))"}}
	if msg := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{{Name: "t", Columns: cols}})); msg != "" {
		t.Fatal(msg)
	}
	recs := make([]sluicetest.Record, 100)
	for i := range recs {
		recs[i] = sluicetest.Record{Offset: int64(i), Value: []byte("value")}
	}
	batch := sluicetest.BatchPayload("topic", 0, recs)
	res, err := sluicetest.DecodeOutput(in.Transform(batch))
	if err != nil || len(res) != 100 || res[99].Failed || len(res[99].Rows) != 1 {
		t.Fatalf("%v %+v", err, res)
	}
	if a := testing.AllocsPerRun(20, func() { in.Transform(batch) }); a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
}

// FlatRow's speed is that its writes inline into the module's code; a
// change that pushes one over the compiler's budget (a call on its
// mismatch path, say) would keep every row correct and only slow it
// down, so this asks the compiler, for the wasm target, directly. End
// inlines too (it leaves the row's length to the next Flat). Bytes is a
// call (making room for a string does not fit the budget); String
// inlines into that call.
func TestFlatRowWritesInline(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with the Go toolchain")
	}
	cmd := exec.Command("go", "build", "-gcflags=-m", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	for _, m := range []string{"End", "Null", "NotNull", "String", "UInt8", "UInt16", "UInt32", "UInt64",
		"Int8", "Int16", "Int32", "Int64", "Float32", "Float64", "Bool", "Date", "Date32", "DateTime", "DateTime64", "IPv6"} {
		if want := "can inline (*FlatRow)." + m + "\n"; !bytes.Contains(out, []byte(want)) {
			t.Errorf("the compiler does not inline (*FlatRow).%s for wasm", m)
		}
	}
}

// fixedLeft is the bytes the rest of w's row can take in fixed-width
// values and NULL markers, from its next slot on.
func fixedLeft(w *FlatRow) int {
	n := 0
	for _, s := range w.t.flat[w.n:] {
		switch {
		case s == slotNull:
			n++
		case s != slotEnd && s != slotOther && s&slotArray == 0:
			n += flatWidth(chtype.Kind(s))
		}
	}
	return n
}

// FlatRow stores its fixed-width values with no check of their own, into
// room reserved when the row starts and kept by every string and array.
// Rows of every column type, strings of every length around the one-byte
// length's limit and past the buffer's size, several rows per record so
// that the buffer grows in the middle of rows, and writes out of place
// (each panics; the transform goes on past it, as a module that recovers
// would): after every write the room left covers what the rest of the row
// can take, and each record's rows are what Row writes.
func TestFlatRowKeepsItsRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	lengths := []int{0, 1, 126, 127, 128, 129, 300, 5000, 70000}
	str := func() string { return strings.Repeat("s", lengths[rng.IntN(len(lengths))]) }
	type write struct {
		flat func(*FlatRow)
		row  func(*Row)
	}
	// writeFor returns a write of column type typ, or, one time in eight,
	// any write.
	writeFor := func(typ string) write {
		if rng.IntN(8) == 0 {
			op := flatOps[rng.IntN(len(flatOps))]
			return write{op.flat, op.row}
		}
		switch strings.TrimSuffix(strings.TrimPrefix(typ, "LowCardinality("), ")") {
		case "String":
			s := str()
			if rng.IntN(2) == 0 {
				return write{func(w *FlatRow) { w.String(s) }, func(r *Row) { r.String(s) }}
			}
			return write{func(w *FlatRow) { w.Bytes([]byte(s)) }, func(r *Row) { r.Bytes([]byte(s)) }}
		case "Array(String", "Array(LowCardinality(String)":
			v := make([]string, rng.IntN(4))
			for i := range v {
				v[i] = str()
			}
			if rng.IntN(2) == 0 {
				return write{func(w *FlatRow) { w.ArrayString(v) }, func(r *Row) { r.ArrayString(v) }}
			}
			b := make([][]byte, len(v))
			for i := range v {
				b[i] = []byte(v[i])
			}
			return write{func(w *FlatRow) { w.ArrayBytes(b) }, func(r *Row) { r.ArrayString(v) }}
		case "Array(Int64)":
			v := make([]int64, rng.IntN(3000))
			return write{func(w *FlatRow) { w.ArrayInt64(v) }, func(r *Row) { r.ArrayInt64(v) }}
		}
		for _, op := range flatOps {
			if writes(op.name, typ) {
				return write{op.flat, op.row}
			}
		}
		op := flatOps[rng.IntN(len(flatOps))]
		return write{op.flat, op.row}
	}
	types := []string{"UInt8", "UInt16", "UInt32", "UInt64", "Int64", "Float64", "Bool", "Date", "DateTime64(3)",
		"UUID", "IPv4", "IPv6", "String", "LowCardinality(String)", "Nullable(UInt64)", "Nullable(UUID)",
		"LowCardinality(Nullable(String))", "Array(String)", "Array(LowCardinality(String))", "Array(Int64)"}
	checked, grown, misplacedWrites := 0, 0, 0
	for iter := range 300 {
		cols := make([]sluicetest.Column, 1+rng.IntN(12))
		for i := range cols {
			cols[i] = sluicetest.Column{Name: fmt.Sprintf("c%d", i), Type: types[rng.IntN(len(types))]}
		}
		nrows := 1 + rng.IntN(20)
		rows := make([][]write, nrows)
		for r := range rows {
			for _, c := range cols {
				if strings.Contains(c.Type, "Nullable(") {
					if rng.IntN(3) == 0 {
						rows[r] = append(rows[r], write{func(w *FlatRow) { w.Null() }, func(r *Row) { r.Null() }})
						continue
					}
					rows[r] = append(rows[r], write{func(w *FlatRow) { w.NotNull() }, func(r *Row) { r.NotNull() }})
				}
				rows[r] = append(rows[r], writeFor(c.Type))
			}
		}
		transform := func(flat bool) func(*Table, *Output) error {
			return func(tb *Table, out *Output) error {
				for _, ws := range rows {
					if !flat {
						r := out.Row(tb)
						for _, x := range ws {
							x.row(r)
						}
						if err := r.End(); err != nil {
							return err
						}
						continue
					}
					w := out.Flat(tb)
					for _, x := range ws {
						c := cap(w.buf)
						// A misplaced write panics; go on past it, as a
						// module that recovers would, to check the room
						// the writes after it leave.
						func() {
							defer func() {
								if p := recover(); p != nil {
									if _, ok := p.(misplaced); !ok {
										panic(p)
									}
									misplacedWrites++
								}
							}()
							x.flat(w)
						}()
						if cap(w.buf) != c {
							grown++
						}
						if w.isOpen() && w.off+fixedLeft(w) > cap(w.buf) {
							t.Fatalf("iteration %d, %v: %d bytes written, %d more fixed to come, in a buffer of %d",
								iter, cols, w.off, fixedLeft(w), cap(w.buf))
						}
						checked++
					}
					if err := w.End(); err != nil {
						return err
					}
				}
				return nil
			}
		}
		want, rowErr := runRows(t, cols, transform(false))
		got, flatErr := runRows(t, cols, transform(true))
		if (rowErr == "") != (flatErr == "") || !bytes.Equal(got, want) {
			t.Fatalf("iteration %d, %v: FlatRow wrote %d bytes (%q), Row %d (%q)", iter, cols, len(got), flatErr, len(want), rowErr)
		}
	}
	if grown < 50 {
		t.Errorf("the buffer grew %d times in the middle of a row of %d writes: the test does not exercise it", grown, checked)
	}
	if misplacedWrites < 100 {
		t.Errorf("%d misplaced writes of %d: the test does not exercise them", misplacedWrites, checked)
	}
}

// runRows is runRow for a record of any number of rows: their data, one
// after the other.
func runRows(t *testing.T, cols []sluicetest.Column, transform func(*Table, *Output) error) ([]byte, string) {
	t.Helper()
	res := runTable(t, cols, transform)
	if res.Failed {
		return nil, res.Err
	}
	var data []byte
	for _, r := range res.Rows {
		data = append(data, r.Data...)
	}
	return data, ""
}

// A misplaced write panics where it is: the transform's code after it
// does not run, the record fails with the write's message, and a module
// that recovers the panic gets an error with that message and still has
// its record failed. An earlier error of the record comes first.
func TestFlatRowMisplacedWritePanics(t *testing.T) {
	cols := []sluicetest.Column{{Name: "a", Type: "UInt8"}, {Name: "b", Type: "String"}}
	const want = `table "t", column "a" (UInt8): expected UInt8, got String`
	ran := false
	if _, err := runRow(t, cols, func(tb *Table, out *Output) error {
		out.Flat(tb).String("x")
		ran = true
		return nil
	}); ran || !strings.Contains(err, want) {
		t.Errorf("ran on after the write: %v; error %q, want it to contain %q", ran, err, want)
	}
	var got any
	if _, err := runRow(t, cols, func(tb *Table, out *Output) error {
		func() {
			defer func() { got = recover() }()
			out.Flat(tb).UInt8(1).UInt8(2)
		}()
		return nil // the module swallows it
	}); !strings.Contains(err, `table "t", column "b" (String): expected String, got UInt8`) {
		t.Errorf("a recovered misplaced write: record error %q", err)
	}
	if e, ok := got.(error); !ok || !strings.Contains(e.Error(), `expected String, got UInt8`) {
		t.Errorf("the panic's value is %#v, want an error naming the write", got)
	}
	if _, err := runRow(t, cols, func(tb *Table, out *Output) error {
		out.Row(tb).String("x").End() // fails the record
		out.Flat(tb).UInt8(1)
		return nil
	}); !strings.Contains(err, `expected UInt8, got String`) {
		t.Errorf("an earlier error of the record: %q", err)
	}
	// A module's own panic is still reported as a panic.
	if _, err := runRow(t, cols, func(tb *Table, out *Output) error { panic("boom") }); err != "panic: boom" {
		t.Errorf("a module's panic: %q", err)
	}
}
