package main

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

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
