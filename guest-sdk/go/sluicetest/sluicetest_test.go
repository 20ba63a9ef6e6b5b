package sluicetest

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestDecodeOutputErrors(t *testing.T) {
	for _, tt := range []struct {
		p    string
		want string
	}{
		{"\x01\x00\x00\x00", "truncated at offset 4"},
		{"\x01\x00\x00\x00\x02", "record 0: status 2"},
		{"\x00\x00\x00\x00\x00", "1 trailing bytes"},
		{"\x01\x00\x00\x00\x01\x05\x00\x00\x00abc", "truncated at offset 9"},
	} {
		if _, err := DecodeOutput([]byte(tt.p)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeOutput(%q) = %v, want %q", tt.p, err, tt.want)
		}
	}
	res, err := DecodeOutput([]byte("\x02\x00\x00\x00\x01\x02\x00\x00\x00no\x00\x01\x00\x00\x00\x01\x00\x01\x00\x00\x00\x07"))
	if err != nil || len(res) != 2 || !res[0].Failed || res[0].Err != "no" ||
		len(res[1].Rows) != 1 || res[1].Rows[0].Table != 1 || string(res[1].Rows[0].Data) != "\x07" {
		t.Errorf("DecodeOutput: %+v, %v", res, err)
	}
}

// TestDecodeRowErrors checks what DecodeRow adds to the model's decoding
// (internal/chtype/chvalue, tested in the host module): the column and
// offset of a bad value, trailing bytes, types the ABI cannot carry.
func TestDecodeRowErrors(t *testing.T) {
	cols := []Column{{Name: "a", Type: "UInt16"}, {Name: "e", Type: "Enum8('a' = 1)"}}
	for _, tt := range []struct {
		cols       []Column
		data, want string
	}{
		{cols, "\x01\x00\x02", `sluicetest: column "e" (Enum8('a' = 1)) at offset 2: enum value 2 is not declared`},
		{cols, "\x01\x00\x01\x02", "sluicetest: row has 1 trailing bytes"},
		{cols, "\x01", `sluicetest: column "a" (UInt16) at offset 0: row ends inside a value`},
		{[]Column{{Name: "v", Type: "Variant(String, UInt8)"}}, "", `type "Variant(String, UInt8)": Variant is not supported by the guest ABI`},
	} {
		if _, err := DecodeRow(tt.cols, []byte(tt.data)); err == nil || err.Error() != tt.want {
			t.Errorf("DecodeRow(%q) = %v, want %q", tt.data, err, tt.want)
		}
	}
}

// TestDecodeVectors decodes every RowBinary test vector (ClickHouse's own
// bytes, ../../testdata/rowbinary.tsv) whole, and checks a few values.
func TestDecodeVectors(t *testing.T) {
	f, err := os.ReadFile("../../testdata/rowbinary.tsv")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Decimal32(2) '-12.34'": "-12.34",
		"Decimal256(20) '12345678901234567890.12345678901234567890'": "12345678901234567890.12345678901234567890",
		"Int128 '-1'": "-1",
		"DateTime64(3) '1900-01-01 00:00:00.001'":                               "1900-01-01 00:00:00.001 +0000 UTC",
		"DateTime64(9, 'Asia/Tokyo') '2262-04-11 08:47:16.854775807'":           "2262-04-10 23:47:16.854775807 +0000 UTC",
		"Date32 '1900-01-01'":                                                   "1900-01-01 00:00:00 +0000 UTC",
		"Map(String, UInt64) map('a', 1, 'b', 2)":                               "[[a 1] [b 2]]",
		"Tuple(a Int64, b Nullable(String), c Array(UInt8)) (-1, NULL, [1, 2])": "[-1 <nil> [1 2]]",
	}
	n := 0
	for _, line := range strings.Split(string(f), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		v := strings.Split(line, "\t")
		data, err := hex.DecodeString(v[2])
		if err != nil {
			t.Fatal(err)
		}
		vals, err := DecodeRow([]Column{{Name: "c", Type: v[0]}}, data)
		if err != nil {
			t.Errorf("%s %s: %v", v[0], v[1], err)
			continue
		}
		if w, ok := want[v[0]+" "+v[1]]; ok {
			n++
			if got := fmt.Sprint(vals[0]); got != w {
				t.Errorf("%s %s: decoded %s, want %s", v[0], v[1], got, w)
			}
		}
	}
	if n != len(want) {
		t.Errorf("checked %d values, want %d", n, len(want))
	}
}
