package sluice

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"
)

// vectorWriters write the value of each line of ../testdata/rowbinary.tsv
// (type and SQL literal) with the SDK. sinks/clickhouse TestRowBinaryVectors
// checks the file's bytes against ClickHouse 18.16 and 26.9.
var vectorWriters = map[[2]string]func(*Row){
	{"UInt64", "18446744073709551615"}: func(r *Row) { r.UInt64(math.MaxUint64) },
	{"Int32", "-2"}:                    func(r *Row) { r.Int32(-2) },
	{"String", "'héllo'"}:              func(r *Row) { r.String("héllo") },
	{"Float32", "-1.5"}:                func(r *Row) { r.Float32(-1.5) },
	{"Bool", "true"}:                   func(r *Row) { r.Bool(true) },
	{"UUID", "'61f0c404-5cb3-11e7-907b-a6006ad3dba0'"}: func(r *Row) {
		r.UUID([16]byte{0x61, 0xf0, 0xc4, 0x04, 0x5c, 0xb3, 0x11, 0xe7, 0x90, 0x7b, 0xa6, 0x00, 0x6a, 0xd3, 0xdb, 0xa0})
	},
	{"IPv4", "'1.2.3.4'"}:                          func(r *Row) { r.IPv4([4]byte{1, 2, 3, 4}) },
	{"IPv6", "'2001:db8::1'"}:                      func(r *Row) { r.IPv6([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}) },
	{"IPv6", "'::ffff:1.2.3.4'"}:                   func(r *Row) { r.IPv6([16]byte{10: 0xff, 11: 0xff, 12: 1, 13: 2, 14: 3, 15: 4}) },
	{"Enum8('a' = 1, 'b' = -2)", "'b'"}:            func(r *Row) { r.Enum8(-2) },
	{"Enum16('x' = 1000, 'y' = -300)", "'y'"}:      func(r *Row) { r.Enum16(-300) },
	{"Nullable(Int64)", "-3"}:                      func(r *Row) { r.Int64(-3) },
	{"Nullable(String)", "NULL"}:                   func(r *Row) { r.Null() },
	{"LowCardinality(Nullable(String))", "'x'"}:    func(r *Row) { r.String("x") },
	{"Array(UInt8)", "[1, 2]"}:                     func(r *Row) { r.BeginArray(2).UInt8(1).UInt8(2) },
	{"LowCardinality(FixedString(2))", "'ab'"}:     func(r *Row) { r.FixedString([]byte("ab")) },
	{"DateTime", "'2026-11-29 10:11:12'"}:          func(r *Row) { r.Time(utc(2026, 11, 29, 10, 11, 12, 0)) },
	{"DateTime('UTC')", "'2026-11-29 10:11:12'"}:   func(r *Row) { r.DateTime(uint32(utc(2026, 11, 29, 10, 11, 12, 0).Unix())) },
	{"DateTime('Europe/Berlin')", "1780308000"}:    func(r *Row) { r.Time(time.Unix(1780308000, 0)) },
	{"DateTime64(3)", "'2026-11-29 10:11:12.345'"}: func(r *Row) { r.Time(utc(2026, 11, 29, 10, 11, 12, 345_000_000)) },
	{"DateTime64(3)", "'1900-01-01 00:00:00.001'"}: func(r *Row) { r.Time(utc(1900, 1, 1, 0, 0, 0, 1_000_000)) },
	{"DateTime64(6, 'UTC')", "'2026-11-29 10:11:12.345678'"}: func(r *Row) {
		r.DateTime64(utc(2026, 11, 29, 10, 11, 12, 345_678_000).UnixMicro())
	},
	{"DateTime64(9, 'Asia/Tokyo')", "'2262-04-11 08:47:16.854775807'"}: func(r *Row) {
		r.Time(time.Date(2262, 4, 11, 8, 47, 16, 854775807, time.FixedZone("JST", 9*3600)))
	},
	{"DateTime64(0, 'Europe/Berlin')", "'2299-12-31 23:59:59'"}: func(r *Row) {
		r.Time(time.Date(2299, 12, 31, 23, 59, 59, 0, time.FixedZone("CET", 3600)))
	},
	{"Date", "'2100-01-01'"}:              func(r *Row) { r.Time(utc(2100, 1, 1, 13, 0, 0, 0)) },
	{"Date32", "'1900-01-01'"}:            func(r *Row) { r.Time(utc(1900, 1, 1, 23, 59, 0, 0)) },
	{"Date32", "'2299-12-31'"}:            func(r *Row) { r.Date32(int32(utc(2299, 12, 31, 0, 0, 0, 0).Unix() / 86400)) },
	{"Decimal32(2)", "'-12.34'"}:          func(r *Row) { r.Decimal(-1234) },
	{"Decimal64(4)", "'99999.0001'"}:      func(r *Row) { r.Decimal(999990001) },
	{"Decimal(18, 4)", "'-0.0001'"}:       func(r *Row) { r.Decimal(-1) },
	{"Decimal128(10)", "'-1.0000000001'"}: func(r *Row) { r.Decimal(-10000000001) },
	{"Decimal256(20)", "'12345678901234567890.12345678901234567890'"}: func(r *Row) {
		r.DecimalBig(bigInt("1234567890123456789012345678901234567890"))
	},
	{"Int128", "'-170141183460469231731687303715884105728'"}: func(r *Row) { r.BigInt(bigInt("-170141183460469231731687303715884105728")) },
	{"Int128", "'-1'"}: func(r *Row) { r.Int128(math.MaxUint64, -1) },
	{"UInt128", "'340282366920938463463374607431768211455'"}: func(r *Row) { r.UInt128(math.MaxUint64, math.MaxUint64) },
	{"Int256", "'-57896044618658097711785492504343953926634992332820282019728792003956564819968'"}: func(r *Row) {
		r.BigInt(new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 255)))
	},
	{"Int256", "'1'"}: func(r *Row) { r.BigInt(big.NewInt(1)) },
	{"UInt256", "'115792089237316195423570985008687907853269984665640564039457584007913129639935'"}: func(r *Row) {
		r.BigInt(new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1)))
	},
	{"Map(String, UInt64)", "map('a', 1, 'b', 2)"}: func(r *Row) { r.BeginMap(2).String("a").UInt64(1).String("b").UInt64(2) },
	{"Map(String, String)", "map()"}:               func(r *Row) { r.BeginMap(0) },
	{"Map(LowCardinality(String), Array(Nullable(Int32)))", "map('x', [1, NULL])"}: func(r *Row) {
		r.BeginMap(1).String("x").BeginArray(2).Int32(1).Null()
	},
	{"Tuple(UInt8, String)", "(1, 'x')"}: func(r *Row) { r.BeginTuple().UInt8(1).String("x") },
	{"Tuple(a Int64, b Nullable(String), c Array(UInt8))", "(-1, NULL, [1, 2])"}: func(r *Row) {
		r.BeginTuple().Int64(-1).Null().BeginArray(2).UInt8(1).UInt8(2)
	},
	{"Array(LowCardinality(Nullable(String)))", "['a', NULL, '']"}: func(r *Row) { r.BeginArray(3).String("a").Null().String("") },
	{"Array(Array(Nullable(UInt8)))", "[[1, NULL], []]"}: func(r *Row) {
		r.BeginArray(2).BeginArray(2).UInt8(1).Null().BeginArray(0)
	},
	{"Array(Nullable(DateTime64(3)))", "['2026-01-01 00:00:00.001', NULL]"}: func(r *Row) {
		r.BeginArray(2).Time(utc(2026, 1, 1, 0, 0, 0, 1_000_000)).Null()
	},
	{"Array(Tuple(String, Float64))", "[('a', 1.5)]"}: func(r *Row) { r.BeginArray(1).BeginTuple().String("a").Float64(1.5) },
	{"JSON", `'{"a":1,"b":"x"}'`}:                     func(r *Row) { r.String(`{"a":1,"b":"x"}`) },
}

func utc(y int, m time.Month, d, h, min, s, ns int) time.Time {
	return time.Date(y, m, d, h, min, s, ns, time.UTC)
}

func bigInt(s string) *big.Int {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic(s)
	}
	return v
}

// TestRowBinaryVectors writes every vector's value with the SDK and
// compares the bytes with the file's, which are ClickHouse's own.
func TestRowBinaryVectors(t *testing.T) {
	f, err := os.Open("../testdata/rowbinary.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		v := strings.Split(line, "\t")
		if len(v) != 3 {
			t.Fatalf("bad line %q", line)
		}
		write, ok := vectorWriters[[2]string{v[0], v[1]}]
		if !ok {
			t.Errorf("%s %s: no writer for this vector", v[0], v[1])
			continue
		}
		seen++
		got, msg := oneColumn(t, v[0], write)
		if msg != "" {
			t.Errorf("%s %s: %s", v[0], v[1], msg)
			continue
		}
		if hex.EncodeToString(got) != v[2] {
			t.Errorf("%s %s: SDK writes %x, ClickHouse %s", v[0], v[1], got, v[2])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(vectorWriters) {
		t.Errorf("%d vectors in the file, %d writers", seen, len(vectorWriters))
	}
}

// TestWriterRanges: values outside a type's range fail the record, naming
// the column, instead of wrapping into some other value.
func TestWriterRanges(t *testing.T) {
	tests := []struct {
		typ   string
		write func(*Row)
		want  string
	}{
		{"DateTime", func(r *Row) { r.Time(time.Time{}) }, "time 0001-01-01T00:00:00Z is outside the type's range 1970-01-01T00:00:00Z … 2106-02-07T06:28:15Z"},
		{"DateTime", func(r *Row) { r.Time(utc(2106, 2, 7, 6, 28, 16, 0)) }, "outside the type's range"},
		{"Nullable(DateTime)", func(r *Row) { r.Time(utc(1969, 12, 31, 23, 59, 59, 0)) }, "outside the type's range"},
		{"Date", func(r *Row) { r.Time(utc(2149, 6, 7, 0, 0, 0, 0)) }, "outside the type's range"},
		{"Date32", func(r *Row) { r.Time(utc(1899, 12, 31, 0, 0, 0, 0)) }, "outside the type's range"},
		{"DateTime64(3)", func(r *Row) { r.Time(time.Time{}) }, "outside the type's range 1900-01-01T00:00:00Z … 2299-12-31T23:59:59.999999999Z"},
		{"DateTime64(9)", func(r *Row) { r.Time(utc(2262, 4, 12, 0, 0, 0, 0)) }, "… 2262-04-11T23:47:16.854775807Z"},
		{"Decimal32(2)", func(r *Row) { r.Decimal(1_000_000_000) }, "unscaled value 1000000000 has more than 9 digits"},
		{"Decimal(4, 1)", func(r *Row) { r.Decimal(-10000) }, "more than 4 digits"},
		{"Decimal128(2)", func(r *Row) { r.DecimalBig(new(big.Int).Exp(big.NewInt(10), big.NewInt(38), nil)) }, "more than 38 digits"},
		{"Int128", func(r *Row) { r.BigInt(new(big.Int).Lsh(big.NewInt(1), 127)) }, "170141183460469231731687303715884105728 is out of range"},
		{"Int128", func(r *Row) {
			r.BigInt(new(big.Int).Sub(new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 127)), big.NewInt(1)))
		}, "is out of range"},
		{"UInt128", func(r *Row) { r.BigInt(big.NewInt(-1)) }, "-1 is out of range"},
		{"UInt256", func(r *Row) { r.BigInt(new(big.Int).Lsh(big.NewInt(1), 256)) }, "is out of range"},
		{"Map(String, UInt8)", func(r *Row) { r.BeginMap(1).UInt8(1) }, "expected String array element, got UInt8"},
		{"Map(String, UInt8)", func(r *Row) { r.BeginMap(1).String("k") }, "row ended after 0 of 1 columns"},
		{"Tuple(UInt8, String)", func(r *Row) { r.BeginTuple().UInt8(1).UInt8(2) }, "expected String array element, got UInt8"},
		{"UInt8", func(r *Row) { r.Time(time.Now()) }, "expected UInt8, got time"},
		{"Int64", func(r *Row) { r.Decimal(1) }, "expected Int64, got Decimal"},
	}
	for _, tt := range tests {
		got, err := oneColumn(t, tt.typ, tt.write)
		if err == "" {
			t.Errorf("%s: wrote % x, want error %q", tt.typ, got, tt.want)
			continue
		}
		if !strings.Contains(err, tt.want) || !strings.Contains(err, `column "c"`) {
			t.Errorf("%s: error %q\n\twant it to contain %q", tt.typ, err, tt.want)
		}
	}
}

// Time rounds down to the type's precision, before 1970 too: the tick or
// day ClickHouse 26.9 reads from the same time's text (it reads
// 1969-12-31 23:59:59.9995 into a DateTime64(3, 'UTC') as -1 ms).
func TestTimeBefore1970(t *testing.T) {
	for _, tt := range []struct {
		typ  string
		t    time.Time
		want int64 // ticks, or days
	}{
		{"DateTime64(3, 'UTC')", utc(1969, 12, 31, 23, 59, 59, 999_500_000), -1},
		{"DateTime64(0, 'UTC')", utc(1969, 12, 31, 23, 59, 58, 500_000_000), -2},
		{"DateTime64(6, 'UTC')", utc(1969, 12, 31, 23, 59, 59, 999_999_500), -1},
		{"DateTime64(9, 'UTC')", utc(1969, 12, 31, 23, 59, 59, 999_999_999), -1},
		{"DateTime64(3, 'UTC')", utc(1969, 12, 31, 23, 59, 58, 500_000_000), -1500},
		{"DateTime64(3, 'UTC')", time.Unix(-1, 999_500_000).In(time.FixedZone("X", -5*3600)), -1}, // the zone does not matter
		{"Date32", utc(1969, 12, 31, 23, 0, 0, 0), -1},
		{"Date32", utc(1969, 12, 31, 0, 0, 0, 0), -1},
		{"Date32", utc(1969, 12, 30, 23, 59, 59, 999_999_999), -2},
	} {
		got, msg := oneColumn(t, tt.typ, func(r *Row) { r.Time(tt.t) })
		if msg != "" {
			t.Errorf("%s %s: %s", tt.typ, tt.t, msg)
			continue
		}
		var v int64
		if len(got) == 8 {
			v = int64(binary.LittleEndian.Uint64(got))
		} else {
			v = int64(int32(binary.LittleEndian.Uint32(got)))
		}
		if v != tt.want {
			t.Errorf("%s %s: wrote %d, want %d", tt.typ, tt.t.Format(time.RFC3339Nano), v, tt.want)
		}
	}
}
