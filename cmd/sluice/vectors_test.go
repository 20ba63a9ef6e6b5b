package main

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestRowPrinterVectors prints every RowBinary test vector
// (guest-sdk/testdata/rowbinary.tsv, ClickHouse's own bytes): each decodes
// whole, and the values below print as the server shows them.
func TestRowPrinterVectors(t *testing.T) {
	f, err := os.ReadFile("../../guest-sdk/testdata/rowbinary.tsv")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"DateTime64(9, 'Asia/Tokyo') '2262-04-11 08:47:16.854775807'": `t {"v": "2262-04-11 08:47:16.854775807"}`,
		"DateTime64(3) '1900-01-01 00:00:00.001'":                     `t {"v": "1900-01-01 00:00:00.001"}`,
		"Decimal256(20) '12345678901234567890.12345678901234567890'":  `t {"v": "12345678901234567890.12345678901234567890"}`,
		"Date32 '1900-01-01'": `t {"v": "1900-01-01"}`,
		"Map(LowCardinality(String), Array(Nullable(Int32))) map('x', [1, NULL])": `t {"v": [["x",[1,null]]]}`,
		"Tuple(a Int64, b Nullable(String), c Array(UInt8)) (-1, NULL, [1, 2])":   `t {"v": [-1,null,[1,2]]}`,
		"Array(Tuple(String, Float64)) [('a', 1.5)]":                              `t {"v": [["a",1.5]]}`,
		`JSON '{"a":1,"b":"x"}'`: `t {"v": {"a":1,"b":"x"}}`,
	}
	checked := 0
	for _, line := range strings.Split(string(f), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		v := strings.Split(line, "\t")
		row, err := hex.DecodeString(v[2])
		if err != nil {
			t.Fatal(err)
		}
		p, err := newRowPrinter("t", []clickhouse.Column{{Name: "v", Type: v[0]}})
		if err != nil {
			t.Errorf("%s: %v", v[0], err)
			continue
		}
		got, err := p.format(row)
		if err != nil {
			t.Errorf("%s %s: %v", v[0], v[1], err)
			continue
		}
		if w, ok := want[v[0]+" "+v[1]]; ok {
			checked++
			if got != w {
				t.Errorf("%s %s: printed %s, want %s", v[0], v[1], got, w)
			}
		}
	}
	if checked != len(want) {
		t.Errorf("checked %d vectors, want %d", checked, len(want))
	}
}
