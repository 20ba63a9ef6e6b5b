package clickhouse

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

func uvarintStr(s string) []byte {
	b := binary.AppendUvarint(nil, uint64(len(s)))
	return append(b, s...)
}

func testTable(t testing.TB) *Table {
	t.Helper()
	tbl, err := NewTable("db", "t", []Column{
		{Name: "ts", Type: "DateTime"},
		{Name: "name", Type: "LowCardinality(String)"},
		{Name: "n", Type: "Nullable(UInt64)"},
		{Name: "tags", Type: "Array(String)"},
		{Name: "e", Type: "Enum8('a' = 1, 'b' = -2)"},
		{Name: "m", Type: "UInt64", DefaultKind: "MATERIALIZED"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

func row(ts uint32, name string, n *uint64, tags []string, e int8) []byte {
	b := binary.LittleEndian.AppendUint32(nil, ts)
	b = append(b, uvarintStr(name)...)
	if n == nil {
		b = append(b, 1)
	} else {
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint64(b, *n)
	}
	b = binary.AppendUvarint(b, uint64(len(tags)))
	for _, s := range tags {
		b = append(b, uvarintStr(s)...)
	}
	return append(b, byte(e))
}

func TestTableSkipsComputedColumns(t *testing.T) {
	tbl := testTable(t)
	if len(tbl.Insert) != 5 {
		t.Fatalf("insert columns = %d, want 5 (MATERIALIZED left out)", len(tbl.Insert))
	}
	if want := "INSERT INTO `db`.`t` (`ts`, `name`, `n`, `tags`, `e`) VALUES"; tbl.target.insertSQL != want {
		t.Errorf("insert SQL = %q, want %q", tbl.target.insertSQL, want)
	}
}

func TestBlockAppendRowAndEncode(t *testing.T) {
	tbl := testTable(t)
	b := tbl.NewBlock()
	seven := uint64(7)
	if err := b.AppendRow(row(100, "x", &seven, []string{"p", "q"}, 1)); err != nil {
		t.Fatal(err)
	}
	if err := b.AppendRow(row(200, "yy", nil, nil, -2)); err != nil {
		t.Fatal(err)
	}
	if b.Rows() != 2 {
		t.Fatalf("rows = %d", b.Rows())
	}
	var buf proto.Buffer
	if err := b.encodeNative(&buf); err != nil {
		t.Fatal(err)
	}
	// Decode the Native block with ch-go's own columns and compare values.
	r := proto.NewReader(strings.NewReader(string(buf.Buf)))
	var (
		ts   proto.ColDateTime
		name = proto.NewLowCardinality[string](new(proto.ColStr))
		n    = proto.NewColNullable[uint64](new(proto.ColUInt64))
		tags = proto.NewArray[string](new(proto.ColStr))
		e    proto.ColEnum8
	)
	var blk proto.Block
	res := proto.Results{{Name: "ts", Data: &ts}, {Name: "name", Data: name}, {Name: "n", Data: n}, {Name: "tags", Data: tags}, {Name: "e", Data: &e}}
	if err := blk.DecodeRawBlock(r, 54451, res); err != nil {
		t.Fatal(err)
	}
	if ts.Row(1).Unix() != 200 || name.Row(1) != "yy" || name.Row(0) != "x" {
		t.Errorf("ts/name: %v %q %q", ts.Row(1).Unix(), name.Row(0), name.Row(1))
	}
	if !n.Row(0).Set || n.Row(0).Value != 7 || n.Row(1).Set {
		t.Errorf("nullable: %+v %+v", n.Row(0), n.Row(1))
	}
	if got := tags.Row(0); len(got) != 2 || got[1] != "q" || len(tags.Row(1)) != 0 {
		t.Errorf("tags: %v %v", tags.Row(0), tags.Row(1))
	}
	if e.Row(0) != 1 || e.Row(1) != -2 {
		t.Errorf("enum: %d %d", e.Row(0), e.Row(1))
	}
}

func TestBlockRejectsBadRowsAndKeepsState(t *testing.T) {
	tbl := testTable(t)
	b := tbl.NewBlock()
	seven := uint64(7)
	good := row(1, "a", &seven, []string{"t"}, 1)
	if err := b.AppendRow(good); err != nil {
		t.Fatal(err)
	}
	size := b.Size()
	for name, bad := range map[string][]byte{
		"short":           good[:len(good)-1],
		"trailing bytes":  append(append([]byte{}, good...), 0),
		"enum undeclared": row(1, "a", nil, nil, 3),
		"bad null flag":   append(append(binary.LittleEndian.AppendUint32(nil, 1), uvarintStr("a")...), 2),
		"huge string":     append(binary.LittleEndian.AppendUint32(nil, 1), 0xff, 0xff, 0xff, 0x7f),
		"huge array":      append(append(append(binary.LittleEndian.AppendUint32(nil, 1), uvarintStr("a")...), 1), 0xff, 0xff, 0x7f),
	} {
		err := b.AppendRow(bad)
		var re *RowError
		if !errors.As(err, &re) {
			t.Errorf("%s: err = %v, want a *RowError", name, err)
			continue
		}
		if re.Table != "db.t" || re.Column == "" {
			t.Errorf("%s: error does not name table and column: %v", name, err)
		}
		if b.Rows() != 1 || b.Size() != size {
			t.Errorf("%s: block changed: rows %d size %d, want 1 and %d", name, b.Rows(), b.Size(), size)
		}
	}
	b.Truncate(0)
	if b.Rows() != 0 || b.Size() != 0 {
		t.Errorf("after Truncate(0): rows %d size %d", b.Rows(), b.Size())
	}
}

func TestNewColumnTypes(t *testing.T) {
	for _, typ := range []string{
		"UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64", "Float32", "Float64",
		"String", "FixedString(16)", "Nullable(String)", "Array(Nullable(Int32))",
		"Date", "DateTime", "DateTime('UTC')", "DateTime64(3)", "UUID", "IPv4", "IPv6", "Bool",
		"Enum16('x' = 1000)", "Decimal(18, 4)", "Array(Array(String))",
		"DateTime64(6, 'Europe/Berlin')", "Date32", "Decimal32(2)", "Decimal256(20)", "Int128", "UInt256",
		"Map(String, Array(Nullable(UInt8)))", "Tuple(a UInt8, b Nullable(String))", "Tuple(UInt8, Map(String, String))",
		"Array(Tuple(String, Float64))",
	} {
		typ2, err := chtype.Parse(typ)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if got := columnOf(typ2).Type(); string(got) != typ {
			t.Errorf("%s: column type %s", typ, got)
		}
	}
	// LowCardinality goes as its inner type, JSON as its text.
	for typ, want := range map[string]string{
		"LowCardinality(String)":                      "String",
		"LowCardinality(FixedString(2))":              "FixedString(2)",
		"Array(LowCardinality(Nullable(String)))":     "Array(Nullable(String))",
		"Tuple(`a b` LowCardinality(String), c Int8)": "Tuple(`a b` String, c Int8)",
		"JSON":                        "String",
		"JSON(max_dynamic_paths = 8)": "String",
	} {
		typ2, err := chtype.Parse(typ)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		if got := columnOf(typ2).Type(); string(got) != want {
			t.Errorf("%s: column type %s, want %s", typ, got, want)
		}
	}
	for _, typ := range []string{"Map(String)", "Tuple()", "Map(String, Tuple())", "FixedString(x)", "Enum8()",
		"AggregateFunction(uniq, UInt64)", "Variant(String, UInt64)"} {
		if _, err := NewTable("db", "t", []Column{{Name: "c", Type: typ}}); err == nil {
			t.Errorf("%s: no error for an unsupported type", typ)
		}
	}
}

func FuzzBlockAppendRow(f *testing.F) {
	seven := uint64(7)
	f.Add(row(1, "a", &seven, []string{"t"}, 1))
	f.Add(row(1, "", nil, nil, -2))
	f.Add([]byte{})
	tbl, err := NewTable("db", "t", []Column{
		{Name: "ts", Type: "DateTime"}, {Name: "name", Type: "LowCardinality(String)"},
		{Name: "n", Type: "Nullable(UInt64)"}, {Name: "tags", Type: "Array(String)"},
		{Name: "e", Type: "Enum8('a' = 1, 'b' = -2)"},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := tbl.NewBlock()
		before := b.Size()
		if err := b.AppendRow(data); err != nil {
			if b.Rows() != 0 || b.Size() != before {
				t.Fatalf("failed row left data behind: rows %d size %d", b.Rows(), b.Size())
			}
			return
		}
		var buf proto.Buffer
		if err := b.encodeNative(&buf); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzNestedAppendRow fuzzes the Map and Tuple decoders and their nesting:
// a row either decodes whole or leaves the block as it was.
func FuzzNestedAppendRow(f *testing.F) {
	f.Add([]byte{0, 1, 1, 'k', 2, 0, 7, 1, 1, 0, 1, 'x'})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{})
	tbl, err := NewTable("db", "t", []Column{
		{Name: "m", Type: "Map(LowCardinality(String), Array(Nullable(UInt8)))"},
		{Name: "t", Type: "Tuple(a UInt8, b Nullable(String))"},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b := tbl.NewBlock()
		if err := b.AppendRow(data); err == nil {
			t.Logf("decoded %x", data)
		}
		before := b.Size()
		rows := b.Rows()
		if err := b.AppendRow(data); err != nil {
			if b.Rows() != rows || b.Size() != before {
				t.Fatalf("failed row left data behind: rows %d size %d", b.Rows(), b.Size())
			}
			return
		}
		var buf proto.Buffer
		if err := b.encodeNative(&buf); err != nil {
			t.Fatal(err)
		}
	})
}
