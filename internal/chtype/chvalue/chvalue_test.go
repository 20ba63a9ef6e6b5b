package chvalue

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/chtype"
)

// vectorsFile holds ClickHouse's own RowBinary of a value of each type
// (sinks/clickhouse TestRowBinaryVectors checks it against the servers).
const vectorsFile = "../../../guest-sdk/testdata/rowbinary.tsv"

// vectorJSON is how each vector's value prints (JSON, then
// encoding/json): the value as the server shows the literal.
var vectorJSON = map[string]string{
	"UInt64\t18446744073709551615": `18446744073709551615`,
	"Int32\t-2":                    `-2`,
	"String\t'héllo'":              `"héllo"`,
	"Float32\t-1.5":                `-1.5`,
	"Bool\ttrue":                   `true`,
	"UUID\t'61f0c404-5cb3-11e7-907b-a6006ad3dba0'": `"61f0c404-5cb3-11e7-907b-a6006ad3dba0"`,
	"IPv4\t'1.2.3.4'":                                              `"1.2.3.4"`,
	"IPv6\t'2001:db8::1'":                                          `"2001:db8::1"`,
	"IPv6\t'::ffff:1.2.3.4'":                                       `"::ffff:1.2.3.4"`,
	"Enum8('a' = 1, 'b' = -2)\t'b'":                                `"b"`,
	"Enum16('x' = 1000, 'y' = -300)\t'y'":                          `"y"`,
	"Nullable(Int64)\t-3":                                          `-3`,
	"Nullable(String)\tNULL":                                       `null`,
	"LowCardinality(Nullable(String))\t'x'":                        `"x"`,
	"Array(UInt8)\t[1, 2]":                                         `[1,2]`,
	"LowCardinality(FixedString(2))\t'ab'":                         `"ab"`,
	"DateTime\t'2026-11-29 10:11:12'":                              `"2026-11-29 10:11:12"`,
	"DateTime('UTC')\t'2026-11-29 10:11:12'":                       `"2026-11-29 10:11:12"`,
	"DateTime('Europe/Berlin')\t1780308000":                        `"2026-06-01 12:00:00"`,
	"DateTime64(3)\t'2026-11-29 10:11:12.345'":                     `"2026-11-29 10:11:12.345"`,
	"DateTime64(3)\t'1900-01-01 00:00:00.001'":                     `"1900-01-01 00:00:00.001"`,
	"DateTime64(6, 'UTC')\t'2026-11-29 10:11:12.345678'":           `"2026-11-29 10:11:12.345678"`,
	"DateTime64(9, 'Asia/Tokyo')\t'2262-04-11 08:47:16.854775807'": `"2262-04-11 08:47:16.854775807"`,
	"DateTime64(0, 'Europe/Berlin')\t'2299-12-31 23:59:59'":        `"2299-12-31 23:59:59"`,
	"Date\t'2100-01-01'":                                           `"2100-01-01"`,
	"Date32\t'1900-01-01'":                                         `"1900-01-01"`,
	"Date32\t'2299-12-31'":                                         `"2299-12-31"`,
	"Decimal32(2)\t'-12.34'":                                       `"-12.34"`,
	"Decimal64(4)\t'99999.0001'":                                   `"99999.0001"`,
	"Decimal(18, 4)\t'-0.0001'":                                    `"-0.0001"`,
	"Decimal128(10)\t'-1.0000000001'":                              `"-1.0000000001"`,
	"Decimal256(20)\t'12345678901234567890.12345678901234567890'":  `"12345678901234567890.12345678901234567890"`,
	"Int128\t'-170141183460469231731687303715884105728'":           `"-170141183460469231731687303715884105728"`,
	"Int128\t'-1'":                                                 `-1`,
	"UInt128\t'340282366920938463463374607431768211455'":           `"340282366920938463463374607431768211455"`,
	"Int256\t'-57896044618658097711785492504343953926634992332820282019728792003956564819968'": `"-57896044618658097711785492504343953926634992332820282019728792003956564819968"`,
	"Int256\t'1'": `1`,
	"UInt256\t'115792089237316195423570985008687907853269984665640564039457584007913129639935'": `"115792089237316195423570985008687907853269984665640564039457584007913129639935"`,
	"Map(String, UInt64)\tmap('a', 1, 'b', 2)":                                                  `[["a",1],["b",2]]`,
	"Map(String, String)\tmap()":                                                                `[]`,
	"Map(LowCardinality(String), Array(Nullable(Int32)))\tmap('x', [1, NULL])":                  `[["x",[1,null]]]`,
	"Tuple(UInt8, String)\t(1, 'x')":                                                            `[1,"x"]`,
	"Tuple(a Int64, b Nullable(String), c Array(UInt8))\t(-1, NULL, [1, 2])":                    `[-1,null,[1,2]]`,
	"Array(LowCardinality(Nullable(String)))\t['a', NULL, '']":                                  `["a",null,""]`,
	"Array(Array(Nullable(UInt8)))\t[[1, NULL], []]":                                            `[[1,null],[]]`,
	"Array(Nullable(DateTime64(3)))\t['2026-01-01 00:00:00.001', NULL]":                         `["2026-01-01 00:00:00.001",null]`,
	"Array(Tuple(String, Float64))\t[('a', 1.5)]":                                               `[["a",1.5]]`,
	"JSON\t'{\"a\":1,\"b\":\"x\"}'":                                                             `{"a":1,"b":"x"}`,
}

type vector struct {
	typ, literal string
	rowBinary    []byte
}

func readVectors(t testing.TB) []vector {
	t.Helper()
	f, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var vs []vector
	for _, line := range strings.Split(string(f), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		v := strings.Split(line, "\t")
		if len(v) != 3 {
			t.Fatalf("%s: %q: want type, literal and hex", vectorsFile, line)
		}
		b, err := hex.DecodeString(v[2])
		if err != nil {
			t.Fatalf("%s: %q: %v", vectorsFile, line, err)
		}
		vs = append(vs, vector{v[0], v[1], b})
	}
	return vs
}

// TestVectors decodes and skips every vector whole, prints it as the
// server shows the literal, and refuses every shorter prefix of it.
func TestVectors(t *testing.T) {
	vs := readVectors(t)
	for _, v := range vs {
		key := v.typ + "\t" + v.literal
		typ, err := chtype.Parse(v.typ)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		if n, err := typ.Skip(v.rowBinary); err != nil || n != len(v.rowBinary) {
			t.Errorf("%s: Skip = %d, %v; want %d", key, n, err, len(v.rowBinary))
		}
		val, n, err := Decode(typ, v.rowBinary)
		if err != nil || n != len(v.rowBinary) {
			t.Errorf("%s: Decode = %d, %v; want %d", key, n, err, len(v.rowBinary))
			continue
		}
		got, err := json.Marshal(JSON(typ, val))
		if want, ok := vectorJSON[key]; err != nil || !ok || string(got) != want {
			t.Errorf("%s: prints %s (%v), want %s (listed: %v)", key, got, err, want, ok)
		}
		for cut := range len(v.rowBinary) {
			if _, _, err := Decode(typ, v.rowBinary[:cut]); err == nil {
				t.Errorf("%s: decoded from its first %d bytes", key, cut)
			}
			if _, err := typ.Skip(v.rowBinary[:cut]); err == nil {
				t.Errorf("%s: skipped in its first %d bytes", key, cut)
			}
		}
	}
	if len(vs) != len(vectorJSON) {
		t.Errorf("%d vectors, %d printed values listed", len(vs), len(vectorJSON))
	}
}

// TestDecodeValues checks the Go values Decode gives, which the SDK's
// sluicetest hands to tenants.
func TestDecodeValues(t *testing.T) {
	for _, tt := range []struct {
		typ  string
		data string
		want any
	}{
		{"UInt8", "\x07", uint8(7)},
		{"Int16", "\xd4\xfe", int16(-300)},
		{"UInt32", "\x01\x00\x00\x80", uint32(1<<31 + 1)},
		{"Float64", "\x00\x00\x00\x00\x00\x00\xf8\x3f", 1.5},
		{"Bool", "\x00", false},
		{"FixedString(3)", "a\x00c", "a\x00c"},
		{"JSON", "\x02{}", "{}"},
		{"Date", "\x01\x00", time.Date(1970, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"DateTime('Asia/Tokyo')", "\x3c\x00\x00\x00", time.Date(1970, 1, 1, 0, 1, 0, 0, time.UTC)},
		{"DateTime64(2)", "\xff\xff\xff\xff\xff\xff\xff\xff", time.Date(1969, 12, 31, 23, 59, 59, 990_000_000, time.UTC)},
		{"Enum8('it\\'s' = -1)", "\xff", "it's"},
		{"IPv4", "\x04\x03\x02\x01", netip.MustParseAddr("1.2.3.4")},
		{"UInt128", "\x01" + strings.Repeat("\x00", 15), big.NewInt(1)},
		{"Decimal(3, 3)", "\x05\x00\x00\x00", "0.005"},
		{"Decimal32(0)", "\xfb\xff\xff\xff", "-5"},
		{"Nullable(UInt8)", "\x01", nil},
		{"Map(UInt8, String)", "\x01\x02\x01y", [][2]any{{uint8(2), "y"}}},
		{"Tuple(UInt8, Array(Int8))", "\x01\x01\xff", []any{uint8(1), []any{int8(-1)}}},
	} {
		typ, err := chtype.Parse(tt.typ)
		if err != nil {
			t.Fatalf("%s: %v", tt.typ, err)
		}
		got, n, err := Decode(typ, []byte(tt.data))
		if err != nil || n != len(tt.data) {
			t.Errorf("%s %q: %d bytes, %v", tt.typ, tt.data, n, err)
			continue
		}
		if g, ok := got.(time.Time); ok {
			if !g.Equal(tt.want.(time.Time)) || g.Location() != time.UTC {
				t.Errorf("%s %q = %v, want %v", tt.typ, tt.data, got, tt.want)
			}
			continue
		}
		if g, ok := got.(*big.Int); ok {
			if g.Cmp(tt.want.(*big.Int)) != 0 {
				t.Errorf("%s %q = %v, want %v", tt.typ, tt.data, got, tt.want)
			}
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s %q = %#v, want %#v", tt.typ, tt.data, got, tt.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tt := range []struct {
		typ, data, want string
	}{
		{"Enum8('a' = 1)", "\x02", "enum value 2 is not declared"},
		{"Enum16('a' = 1)", "\x02\x01", "enum value 258 is not declared"},
		{"UInt16", "\x01", "row ends inside a value"},
		{"Bool", "\x02", "Bool value 2 is neither 0 nor 1"},
		{"Nullable(UInt8)", "\x03", "Nullable flag 3 is neither 0 nor 1"},
		{"Nullable(UInt8)", "", "row ends inside a value"},
		{"Array(UInt8)", "\x05\x01", "array of 5 elements does not fit the row"},
		{"Array(UInt32)", "\x02\x01\x00\x00\x00\x02\x00\x00", "array of 2 elements does not fit the row"},
		{"Array(String)", "\x80\x80\x80\x10", "array of 33554432 elements does not fit the row"},
		{"String", "\x80", "row ends inside a value"},
		{"String", "\x05abc", "row ends inside a value"},
		{"Map(String, UInt8)", "\x05\x01", "map of 5 entries does not fit the row"},
		{"Map(String, UInt8)", "\x01\x01a", "row ends inside a value"},
		{"Tuple(UInt8, Bool)", "\x01\x05", "Bool value 5 is neither 0 nor 1"},
	} {
		typ, err := chtype.Parse(tt.typ)
		if err != nil {
			t.Fatalf("%s: %v", tt.typ, err)
		}
		_, _, derr := Decode(typ, []byte(tt.data))
		_, serr := typ.Skip([]byte(tt.data))
		for _, err := range []error{derr, serr} {
			if err == nil || err.Error() != tt.want {
				t.Errorf("%s %q: err = %v, want %q", tt.typ, tt.data, err, tt.want)
			}
		}
		if tt.want == chtype.ErrShort.Error() && !errors.Is(derr, chtype.ErrShort) {
			t.Errorf("%s %q: %v is not chtype.ErrShort", tt.typ, tt.data, derr)
		}
	}
}

func TestJSONValue(t *testing.T) {
	for _, tt := range []struct {
		typ, data, want string
	}{
		{"Float64", "\x00\x00\x00\x00\x00\x00\xf8\x7f", `"nan"`},
		{"Float32", "\x00\x00\x80\xff", `"-inf"`},
		{"JSON", "\x03{a}", `"{a}"`}, // not JSON: printed as the text it is
		{"DateTime('Nowhere/Atlantis')", "\x00\x00\x00\x00", `"1970-01-01 00:00:00"`},
		{"DateTime64(1, 'Asia/Tokyo')", "\x0f\x00\x00\x00\x00\x00\x00\x00", `"1970-01-01 09:00:01.5"`},
		{"UInt64", "\xff\xff\xff\xff\xff\xff\xff\xff", `18446744073709551615`},
		{"UInt128", "\xff\xff\xff\xff\xff\xff\xff\xff" + strings.Repeat("\x00", 8), `18446744073709551615`},
		{"Map(String, Nullable(Float32))", "\x01\x01k\x00\x00\x00\xc0\x7f", `[["k","nan"]]`},
	} {
		typ, err := chtype.Parse(tt.typ)
		if err != nil {
			t.Fatalf("%s: %v", tt.typ, err)
		}
		v, _, err := Decode(typ, []byte(tt.data))
		if err != nil {
			t.Fatalf("%s %q: %v", tt.typ, tt.data, err)
		}
		if got, err := json.Marshal(JSON(typ, v)); err != nil || string(got) != tt.want {
			t.Errorf("%s %q prints %s (%v), want %s", tt.typ, tt.data, got, err, tt.want)
		}
	}
}

// FuzzDecode checks that Decode and Skip agree on every input: the same
// size, both refusing or both not, and never past the input.
func FuzzDecode(f *testing.F) {
	types := []string{
		"Tuple(a Nullable(String), b Array(Enum8('x' = 1, 'y' = -1)), c Map(LowCardinality(String), Decimal(20, 3)))",
		"Array(Tuple(UUID, IPv6, Bool, DateTime64(9, 'UTC'), Int256))",
		"Map(FixedString(2), Array(Nullable(Float32)))",
	}
	for _, v := range readVectors(f) {
		f.Add(uint8(len(types)), v.rowBinary)
		types = append(types, v.typ)
	}
	parsed := make([]*chtype.Type, len(types))
	for i, s := range types {
		t, err := chtype.Parse(s)
		if err != nil {
			f.Fatal(err)
		}
		parsed[i] = t
	}
	f.Add(uint8(0), []byte("\x00\x01a\x02\x01\xff\x01\x01k\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		typ := parsed[int(which)%len(parsed)]
		_, n, derr := Decode(typ, data)
		m, serr := typ.Skip(data)
		if (derr == nil) != (serr == nil) || derr == nil && n != m {
			t.Fatalf("%s %x: Decode %d, %v; Skip %d, %v", typ.Text, data, n, derr, m, serr)
		}
		if derr == nil && n > len(data) {
			t.Fatalf("%s %x: %d bytes of %d", typ.Text, data, n, len(data))
		}
	})
}
