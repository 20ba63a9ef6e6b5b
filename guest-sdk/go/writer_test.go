package sluice

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

func TestWriterEncoding(t *testing.T) {
	uuid := [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe}
	tests := []struct {
		typ   string
		write func(*Row)
		want  []byte
	}{
		{"UInt8", func(r *Row) { r.UInt8(0xfe) }, []byte{0xfe}},
		{"UInt16", func(r *Row) { r.UInt16(0x0102) }, []byte{2, 1}},
		{"UInt32", func(r *Row) { r.UInt32(0x01020304) }, []byte{4, 3, 2, 1}},
		{"UInt64", func(r *Row) { r.UInt64(0x0102030405060708) }, []byte{8, 7, 6, 5, 4, 3, 2, 1}},
		{"Int8", func(r *Row) { r.Int8(-2) }, []byte{0xfe}},
		{"Int16", func(r *Row) { r.Int16(-2) }, []byte{0xfe, 0xff}},
		{"Int32", func(r *Row) { r.Int32(-2) }, []byte{0xfe, 0xff, 0xff, 0xff}},
		{"Int64", func(r *Row) { r.Int64(-2) }, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"Float32", func(r *Row) { r.Float32(1) }, []byte{0, 0, 0x80, 0x3f}},
		{"Float64", func(r *Row) { r.Float64(math.Inf(-1)) }, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xff}},
		{"String", func(r *Row) { r.String("hé") }, []byte{3, 'h', 0xc3, 0xa9}},
		{"String", func(r *Row) { r.String(strings.Repeat("x", 200)) }, append([]byte{200, 1}, strings.Repeat("x", 200)...)},
		{"LowCardinality(String)", func(r *Row) { r.Bytes([]byte("ab")) }, []byte{2, 'a', 'b'}},
		{"FixedString(4)", func(r *Row) { r.FixedString([]byte("ab")) }, []byte{'a', 'b', 0, 0}},
		{"Date", func(r *Row) { r.Date(19000) }, []byte{0x38, 0x4a}},
		{"DateTime", func(r *Row) { r.DateTime(1700000000) }, []byte{0x00, 0xf1, 0x53, 0x65}},
		{"DateTime('UTC')", func(r *Row) { r.DateTime(1) }, []byte{1, 0, 0, 0}},
		{"Bool", func(r *Row) { r.Bool(true) }, []byte{1}},
		{"UUID", func(r *Row) { r.UUID(uuid) }, []byte{0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}},
		{"Enum8('a' = 1, 'b' = -1)", func(r *Row) { r.Enum8(-1) }, []byte{0xff}},
		{"Enum16('a' = 1000)", func(r *Row) { r.Enum16(1000) }, []byte{0xe8, 0x03}},
		{"IPv4", func(r *Row) { r.IPv4([4]byte{192, 168, 1, 2}) }, []byte{2, 1, 168, 192}},
		{"IPv6", func(r *Row) { r.IPv6([16]byte{0x20, 0x01, 15: 1}) }, []byte{0x20, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"Nullable(String)", func(r *Row) { r.Null() }, []byte{1}},
		{"Nullable(String)", func(r *Row) { r.NotNull().String("a") }, []byte{0, 1, 'a'}},
		{"Nullable(String)", func(r *Row) { r.String("a") }, []byte{0, 1, 'a'}},
		{"Nullable(UInt8)", func(r *Row) { r.UInt8(7) }, []byte{0, 7}},
		{"Array(String)", func(r *Row) { r.ArrayString([]string{"a", "bc"}) }, []byte{2, 1, 'a', 2, 'b', 'c'}},
		{"Array(String)", func(r *Row) { r.ArrayString(nil) }, []byte{0}},
		{"Array(LowCardinality(String))", func(r *Row) { r.BeginArray(2).String("a").Bytes([]byte("b")) }, []byte{2, 1, 'a', 1, 'b'}},
		{"Array(Int64)", func(r *Row) { r.ArrayInt64([]int64{-1}) }, []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"Array(UInt64)", func(r *Row) { r.ArrayUInt64([]uint64{1}) }, []byte{1, 1, 0, 0, 0, 0, 0, 0, 0}},
		{"Array(UInt16)", func(r *Row) { r.BeginArray(0) }, []byte{0}},
		{"Array(Nullable(UInt8))", func(r *Row) { r.BeginArray(3).UInt8(1).Null().NotNull().UInt8(2) }, []byte{3, 0, 1, 1, 0, 2}},
		{"Array(Array(UInt8))", func(r *Row) { r.BeginArray(2).BeginArray(1).UInt8(5).BeginArray(0) }, []byte{2, 1, 5, 0}},
		{"Nullable(Array(String))", func(r *Row) { r.ArrayString([]string{"x"}) }, []byte{0, 1, 1, 'x'}},
	}
	for _, tt := range tests {
		got, err := oneColumn(t, tt.typ, tt.write)
		if err != "" {
			t.Errorf("%s: %s", tt.typ, err)
			continue
		}
		if !bytes.Equal(got, tt.want) {
			t.Errorf("%s: wrote % x, want % x", tt.typ, got, tt.want)
		}
		// The independent decoder in sluicetest must accept it too.
		if _, err := sluicetest.DecodeRow([]sluicetest.Column{{Name: "c", Type: tt.typ}}, got); err != nil {
			t.Errorf("%s: DecodeRow: %v", tt.typ, err)
		}
	}
}

func TestWriterChecks(t *testing.T) {
	tests := []struct {
		typ   string
		write func(*Row)
		want  string
	}{
		{"DateTime", func(r *Row) { r.String("x") }, `sluice: table "t", column "c" (DateTime): expected DateTime, got String`},
		{"LowCardinality(String)", func(r *Row) { r.UInt64(1) }, `column "c" (LowCardinality(String)): expected LowCardinality(String), got UInt64`},
		{"UInt32", func(r *Row) { r.UInt32(1).UInt32(2) }, `sluice: table "t": UInt32 value written past the last column (the table has 1)`},
		{"UInt32", func(r *Row) {}, `sluice: table "t": row ended after 0 of 1 columns: column "c" (UInt32) not written`},
		{"Array(String)", func(r *Row) { r.BeginArray(2).String("a") }, `row ended after 0 of 1 columns: array element of column "c" (Array(String)) not written`},
		{"Array(String)", func(r *Row) { r.BeginArray(1).UInt8(1) }, `column "c" (Array(String)): expected String array element, got UInt8`},
		{"Array(UInt8)", func(r *Row) { r.ArrayString([]string{"a"}) }, `expected Array(UInt8), got Array(String)`},
		{"Array(UInt8)", func(r *Row) { r.BeginArray(-1) }, `negative array length -1`},
		{"String", func(r *Row) { r.Null() }, `expected String, got NULL`},
		{"String", func(r *Row) { r.NotNull() }, `expected String, got NotNull`},
		{"Nullable(String)", func(r *Row) { r.UInt8(1) }, `expected Nullable(String), got UInt8`},
		{"Nullable(String)", func(r *Row) { r.NotNull().Null() }, `expected String, got NULL`},
		{"Enum8('a' = 1)", func(r *Row) { r.Enum8(2) }, `column "c" (Enum8('a' = 1)): 2 is not a declared value`},
		{"Enum8('a' = 1)", func(r *Row) { r.Enum16(1) }, `expected Enum8('a' = 1), got Enum16`},
		{"FixedString(2)", func(r *Row) { r.FixedString([]byte("abc")) }, `column "c" (FixedString(2)): 3 bytes do not fit`},
		{"Variant(String, UInt8)", func(r *Row) { r.Int64(1) }, `column "c": the SDK cannot write type Variant(String, UInt8): type "Variant(String, UInt8)": Variant is not supported by the guest ABI`},
		// The first error sticks: later writes do not replace it.
		{"UInt8", func(r *Row) { r.String("a").UInt8(1).Int8(2) }, `expected UInt8, got String`},
	}
	for _, tt := range tests {
		got, err := oneColumn(t, tt.typ, tt.write)
		if err == "" {
			t.Errorf("%s: wrote % x, want error %q", tt.typ, got, tt.want)
			continue
		}
		if !strings.Contains(err, tt.want) {
			t.Errorf("%s: error %q\n\twant it to contain %q", tt.typ, err, tt.want)
		}
	}
}

func TestWriterRowMisuse(t *testing.T) {
	cols := []sluicetest.Column{{Name: "a", Type: "UInt8"}}
	tests := []struct {
		name string
		f    func(*Table, *Output) error
		want string
	}{
		{"no row", func(tb *Table, out *Output) error { return out.row.UInt8(1).End() }, "UInt8 value written with no row started"},
		{"end twice", func(tb *Table, out *Output) error {
			w := out.Row(tb).UInt8(1)
			w.End()
			return w.End()
		}, "End called with no row started"},
		{"row in row", func(tb *Table, out *Output) error { out.Row(tb); out.Row(tb); return nil }, "Row called before End of the previous row"},
		{"not ended", func(tb *Table, out *Output) error { out.Row(tb).UInt8(1); return nil }, `table "t": Transform returned without calling End on its row`},
		{"nil table", func(tb *Table, out *Output) error { return out.Row(nil).End() }, "Row called with a nil table"},
		{"foreign table", func(tb *Table, out *Output) error {
			return out.Row(&Table{Name: "x"}).End()
		}, `table "x" is not from this instance's Config`},
		{"error ignored", func(tb *Table, out *Output) error { out.Row(tb).String("x").End(); return nil }, "expected UInt8, got String"},
	}
	for _, tt := range tests {
		_, err := runRow(t, cols, tt.f)
		if !strings.Contains(err, tt.want) {
			t.Errorf("%s: error %q, want it to contain %q", tt.name, err, tt.want)
		}
	}
}

func TestExpect(t *testing.T) {
	cfg, err := decodeInit(sluicetest.InitPayload(nil, []sluicetest.Table{{Name: "logs", Columns: []sluicetest.Column{
		{Name: "ts", Type: "DateTime"}, {Name: "e", Type: "Enum8('a' = 1, 'b' = 2)"}, {Name: "d", Type: "Variant(String, UInt8)"},
	}}}))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := cfg.Table("logs")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := tb.Columns[1].EnumValue("b"); !ok || v != 2 {
		t.Errorf("EnumValue(b) = %d, %v", v, ok)
	}
	if v, ok := tb.Columns[1].Enum8Value("b"); !ok || v != 2 {
		t.Errorf("Enum8Value(b) = %d, %v", v, ok)
	}
	if tb.Columns[2].Supported() == nil || tb.Columns[0].Supported() != nil {
		t.Error("Supported")
	}
	if err := tb.Expect(Col("ts", "DateTime"), Col("e", "Enum8('a'=1,'b'=2)"), Col("d", "Variant(String,UInt8)")); err == nil ||
		!strings.Contains(err.Error(), "column #3 d: type \"Variant(String, UInt8)\": Variant is not supported") || strings.Contains(err.Error(), "#2") {
		t.Errorf("Expect with an unsupported column: %v", err)
	}
	err = tb.Expect(Col("ts", "DateTime('UTC')"), Col("e", "Enum8('a' = 1, 'b' = 2)"))
	want := `sluice: table "logs" does not have the columns this module writes: column #1 is ts DateTime, want ts DateTime('UTC'); unexpected column #3 d Variant(String, UInt8)`
	if err == nil || err.Error() != want {
		t.Errorf("Expect:\n got %v\nwant %s", err, want)
	}
	err = tb.Expect(Col("ts", "DateTime"), Col("e", "Enum8('a' = 1, 'b' = 2)"), Col("d", "Variant(String, UInt8)"), Col("x", "String"))
	if err == nil || !strings.Contains(err.Error(), "missing column #4 x String") {
		t.Errorf("Expect with a missing column: %v", err)
	}
	if _, err := cfg.Table("nope"); err == nil || err.Error() != `sluice: the pipeline has no target table "nope" (tables: "logs")` {
		t.Errorf("Table(nope): %v", err)
	}
}

// A Decimal(P, S) takes every value of P digits, the largest ClickHouse
// reads from text (its ParseDecimal), and refuses one of P+1: for every
// precision, with Decimal and DecimalBig, both signs.
func TestDecimalTakesPDigits(t *testing.T) {
	for p := 1; p <= 76; p++ {
		s := p / 3
		typ := fmt.Sprintf("Decimal(%d, %d)", p, s)
		text := strings.Repeat("9", p-s) + "." + strings.Repeat("9", s)
		largest, err := ParseDecimalBig(nil, text, p, s)
		if err != nil {
			t.Fatalf("%s: %q: %v", typ, text, err)
		}
		tooLarge := new(big.Int).Add(largest, big.NewInt(1))
		for _, sign := range []int64{1, -1} {
			v, over := new(big.Int).Mul(largest, big.NewInt(sign)), new(big.Int).Mul(tooLarge, big.NewInt(sign))
			if _, msg := oneColumn(t, typ, func(r *Row) { r.DecimalBig(v) }); msg != "" {
				t.Errorf("%s: DecimalBig(%v): %s", typ, v, msg)
			}
			if _, msg := oneColumn(t, typ, func(r *Row) { r.DecimalBig(over) }); !strings.Contains(msg, fmt.Sprintf("has more than %d digits", p)) {
				t.Errorf("%s: DecimalBig(%v): %q, want it refused", typ, over, msg)
			}
			if !v.IsInt64() {
				continue
			}
			if _, msg := oneColumn(t, typ, func(r *Row) { r.Decimal(v.Int64()) }); msg != "" {
				t.Errorf("%s: Decimal(%v): %s", typ, v, msg)
			}
			if over.IsInt64() {
				if _, msg := oneColumn(t, typ, func(r *Row) { r.Decimal(over.Int64()) }); !strings.Contains(msg, fmt.Sprintf("has more than %d digits", p)) {
					t.Errorf("%s: Decimal(%v): %q, want it refused", typ, over, msg)
				}
			}
		}
	}
}

// Enum8Value returns an Enum8's value as Row.Enum8 takes it, at its
// limits and inside an Array or a Nullable, and nothing for an Enum16 or
// an undeclared name; EnumValue keeps returning both kinds as int16.
func TestEnum8Value(t *testing.T) {
	cols := []sluicetest.Column{
		{Name: "e8", Type: "Enum8('lo' = -128, 'hi' = 127, 'z' = 0)"},
		{Name: "a8", Type: "Array(Nullable(Enum8('x' = -3)))"},
		{Name: "e16", Type: "Enum16('lo' = -128, 'big' = 1000)"},
		{Name: "s", Type: "String"},
	}
	cfg, err := decodeInit(sluicetest.InitPayload(nil, []sluicetest.Table{{Name: "t", Columns: cols}}))
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Tables[0].Columns
	for _, tt := range []struct {
		col  int
		name string
		want int8
		ok   bool
	}{
		{0, "lo", -128, true}, {0, "hi", 127, true}, {0, "z", 0, true}, {0, "nope", 0, false},
		{1, "x", -3, true}, {2, "lo", 0, false}, {2, "big", 0, false}, {3, "lo", 0, false},
	} {
		if v, ok := c[tt.col].Enum8Value(tt.name); v != tt.want || ok != tt.ok {
			t.Errorf("%s.Enum8Value(%q) = %d, %v; want %d, %v", c[tt.col].Name, tt.name, v, ok, tt.want, tt.ok)
		}
	}
	if v, ok := c[2].EnumValue("big"); v != 1000 || !ok {
		t.Errorf("e16.EnumValue(big) = %d, %v", v, ok)
	}
	// What Enum8Value returns, Enum8 writes.
	lo, _ := c[0].Enum8Value("lo")
	x, _ := c[1].Enum8Value("x")
	got, msg := runRow(t, cols, func(tb *Table, out *Output) error {
		return out.Row(tb).Enum8(lo).BeginArray(1).Enum8(x).Enum16(1000).String("").End()
	})
	if msg != "" || !bytes.Equal(got, []byte{0x80, 1, 0, 0xfd, 0xe8, 0x03, 0}) {
		t.Errorf("wrote % x, %q", got, msg)
	}
}
