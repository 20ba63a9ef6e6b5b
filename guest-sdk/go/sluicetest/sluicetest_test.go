package sluicetest

import (
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

func TestDecodeRowErrors(t *testing.T) {
	for _, tt := range []struct {
		typ, data, want string
	}{
		{"Enum8('a' = 1)", "\x02", "2 is not a value of Enum8('a' = 1)"},
		{"UInt8", "\x01\x02", "1 trailing bytes"},
		{"UInt16", "\x01", "truncated"},
		{"Bool", "\x02", "Bool value 2"},
		{"Nullable(UInt8)", "\x03", "Nullable marker 3"},
		{"Array(UInt8)", "\x05\x01", "array of 5 elements does not fit"},
		{"String", "\x80", "bad LEB128 length"},
		{"Decimal(9, 2)", "", "not supported"},
	} {
		if _, err := DecodeRow([]Column{{Name: "c", Type: tt.typ}}, []byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("DecodeRow(%s, %q) = %v, want %q", tt.typ, tt.data, err, tt.want)
		}
	}
}
