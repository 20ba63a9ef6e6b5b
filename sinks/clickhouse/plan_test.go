package clickhouse

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/chtype"
)

// TestConverter checks each widening sluice converts, value by value, and
// that a change that could lose values is refused.
func TestConverter(t *testing.T) {
	le64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	f64 := func(f float64) []byte { return le64(math.Float64bits(f)) }
	cases := []struct {
		from, to string
		in       []byte // the values, encoded as from
		want     []byte // encoded as to; nil: refused
		nulls    int    // rows of a Nullable result (all not null)
	}{
		{"Int8", "Int64", []byte{0xff, 0x05}, append(le64(math.MaxUint64), le64(5)...), 0},
		{"Int16", "Int32", []byte{0x00, 0x80}, []byte{0x00, 0x80, 0xff, 0xff}, 0},
		{"UInt8", "Int16", []byte{0xff}, []byte{0xff, 0x00}, 0},
		{"UInt32", "Int64", []byte{0xff, 0xff, 0xff, 0xff}, le64(math.MaxUint32), 0},
		{"UInt16", "UInt64", []byte{0x34, 0x12}, le64(0x1234), 0},
		{"Float32", "Float64", binary.LittleEndian.AppendUint32(nil, math.Float32bits(-1.5)), f64(-1.5), 0},
		{"Int32", "Float64", binary.LittleEndian.AppendUint32(nil, uint32(0xfffffffe)), f64(-2), 0},
		{"UInt32", "Float64", []byte{0xff, 0xff, 0xff, 0xff}, f64(math.MaxUint32), 0},
		{"Int32", "Nullable(Int32)", []byte{9, 0, 0, 0}, []byte{9, 0, 0, 0}, 1},
		{"Int32", "Nullable(Int64)", []byte{9, 0, 0, 0}, le64(9), 1},
		{"Int64", "Int32", le64(1), nil, 0},
		{"Int32", "UInt64", []byte{1, 0, 0, 0}, nil, 0},
		{"UInt64", "Int64", le64(1), nil, 0},
		{"Int64", "Float64", le64(1), nil, 0},
		{"Int32", "String", []byte{1, 0, 0, 0}, nil, 0},
		{"Nullable(Int32)", "Int32", []byte{0, 1, 0, 0, 0}, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.from+"→"+tc.to, func(t *testing.T) {
			from, err := chtype.Parse(tc.from)
			if err != nil {
				t.Fatal(err)
			}
			to, err := chtype.Parse(tc.to)
			if err != nil {
				t.Fatal(err)
			}
			conv, err := converter(from, to)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), "does not convert") {
					t.Fatalf("converted %s to %s (err %v); want a refusal", tc.from, tc.to, err)
				}
				return
			}
			if err != nil || conv == nil {
				t.Fatalf("conversion %v, err %v", conv != nil, err)
			}
			src := columnOf(from)
			for in := tc.in; len(in) > 0; {
				n, err := src.decode(in)
				if err != nil {
					t.Fatal(err)
				}
				in = in[n:]
			}
			out := conv(src)
			var got []byte
			switch c := out.(type) {
			case *fixedColumn:
				got = c.buf
			case *nullableColumn:
				if len(c.nulls) != tc.nulls || strings.Contains(string(c.nulls), "\x01") {
					t.Fatalf("null map %v, want %d not-null rows", c.nulls, tc.nulls)
				}
				got = c.inner.(*fixedColumn).buf
			}
			if string(got) != string(tc.want) {
				t.Fatalf("%s %x as %s: %x, want %x", tc.from, tc.in, tc.to, got, tc.want)
			}
			if out.Type() != columnOf(to).Type() {
				t.Fatalf("converted column's type %s, want %s", out.Type(), columnOf(to).Type())
			}
		})
	}
}

// TestAdaptPlan checks the column list of an old version's blocks against
// the table as it is now.
func TestAdaptPlan(t *testing.T) {
	old, err := NewTable("db", "t", []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int32"}, {Name: "s", Type: "String"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		now     []Column
		convert bool // the server converts types
		cols    string
		conv    []bool
		err     string
	}{
		{name: "added", now: []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int32"}, {Name: "s", Type: "String"}, {Name: "w", Type: "UInt8"}},
			cols: "id v s", conv: []bool{false, false, false}},
		{name: "dropped", now: []Column{{Name: "id", Type: "Int64"}, {Name: "s", Type: "String"}}, cols: "id s", conv: []bool{false, false}},
		{name: "widened", now: []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int64"}, {Name: "s", Type: "LowCardinality(String)"}},
			cols: "id v s", conv: []bool{false, true, false}},
		{name: "now computed", now: []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int32", DefaultKind: "MATERIALIZED"}, {Name: "s", Type: "String"}},
			cols: "id s", conv: []bool{false, false}},
		{name: "narrowed, server converts", now: []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int16"}}, convert: true,
			cols: "id v", conv: []bool{false, false}},
		{name: "narrowed", now: []Column{{Name: "id", Type: "Int64"}, {Name: "v", Type: "Int16"}}, err: "column v was Int32 and is Int16 now"},
		{name: "none left", now: []Column{{Name: "other", Type: "Int64"}}, err: "none of the block's columns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := adaptPlan(old, tc.now, tc.convert)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(p.target.columns, " "); got != tc.cols {
				t.Fatalf("columns %q, want %q", got, tc.cols)
			}
			for i, c := range p.conv {
				if (c != nil) != tc.conv[i] {
					t.Fatalf("column %s converted: %v, want %v", p.target.columns[i], c != nil, tc.conv[i])
				}
			}
			if !strings.Contains(p.target.insertSQL, "INSERT INTO `db`.`t` (") {
				t.Fatalf("insert statement %q", p.target.insertSQL)
			}
		})
	}
}
