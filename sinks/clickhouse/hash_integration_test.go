package clickhouse

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/internal/chtype"
	"github.com/sluicehq/sluice/internal/testinfra"
)

// TestCityHash64MatchesServer compares the sink's cityHash64 of a sharding
// key, read from RowBinary exactly as routing reads it, with the server's
// cityHash64 of the same value, for 300 values of every supported key
// type. ClickHouse hashes integers with intHash64, not CityHash of their
// bytes; this is the test that would catch a wrong formula.
func TestCityHash64MatchesServer(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	ctx := context.Background()
	const n = 300
	// Values: the low bits of a hash (negative for signed types), plus the
	// edges of each type.
	for _, tc := range []struct {
		typ  string
		expr string // of number
	}{
		{"UInt8", "toUInt8(cityHash64(number))"},
		{"UInt16", "toUInt16(cityHash64(number))"},
		{"UInt32", "toUInt32(cityHash64(number))"},
		{"UInt64", "cityHash64(number)"},
		{"Int8", "toInt8(cityHash64(number))"},
		{"Int16", "toInt16(cityHash64(number))"},
		{"Int32", "toInt32(cityHash64(number))"},
		{"Int64", "toInt64(cityHash64(number))"},
		{"Date", "toDate(toUInt16(cityHash64(number)) % 40000)"},
		{"DateTime", "toDateTime(toUInt32(cityHash64(number)))"},
		// Lengths 0..129 cover every CityHash code path (0-16, 17-32,
		// 33-64, longer).
		{"String", "substring(arrayStringConcat(arrayMap(i -> hex(cityHash64(number + i)), range(9))), 1, number % 130)"},
		{"FixedString(20)", "toFixedString(substring(hex(cityHash64(number)), 1, number % 21), 20)"},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			sql := fmt.Sprintf("SELECT x, cityHash64(x) FROM (SELECT %s AS x FROM system.numbers LIMIT %d) FORMAT RowBinary", tc.expr, n)
			if tc.typ[0] == 'U' || tc.typ[0] == 'I' {
				// The edges: 0, 1, the type's minimum and maximum.
				sql = fmt.Sprintf("SELECT x, cityHash64(x) FROM (SELECT arrayJoin(arrayConcat([to%[1]s(0), to%[1]s(1)], [to%[1]s(-1)], [to%[1]s(%[2]s)])) AS x UNION ALL SELECT %[3]s AS x FROM system.numbers LIMIT %[4]d) FORMAT RowBinary",
					tc.typ, edge(tc.typ), tc.expr, n)
			}
			out, err := ch.Query(ctx, sql)
			if err != nil {
				t.Fatal(err)
			}
			r, err := newRoute("t", []Column{{Name: "x", Type: tc.typ}}, "cityHash64(x)", []int{1, 1})
			if err != nil {
				t.Fatal(err)
			}
			skip, err := chtype.Parse(tc.typ)
			if err != nil {
				t.Fatal(err)
			}
			data := []byte(out)
			rows := 0
			for pos := 0; pos < len(data); rows++ {
				w, err := skip.Skip(data[pos:])
				if err != nil {
					t.Fatalf("row %d: %v", rows, err)
				}
				value := data[pos : pos+w]
				want := binary.LittleEndian.Uint64(data[pos+w:])
				pos += w + 8
				got, err := r.keyValue(value, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("cityHash64(%s %x) = %d in Go, %d on the server", tc.typ, value, got, want)
				}
			}
			if rows < n {
				t.Errorf("compared %d values, want at least %d", rows, n)
			}
		})
	}
}

// edge is a large value of an integer type as a SQL literal (its maximum
// for unsigned types, its minimum for signed ones).
func edge(typ string) string {
	return map[string]string{
		"UInt8": "255", "UInt16": "65535", "UInt32": "4294967295", "UInt64": "18446744073709551615",
		"Int8": "-128", "Int16": "-32768", "Int32": "-2147483648", "Int64": "-9223372036854775808",
	}[typ]
}

// TestServerSettingsDetected checks which per-insert settings the sink
// finds on each server over both transports: none on 18.16 (over native no
// per-query setting reaches it; over HTTP it knows none), all of
// insert_deduplication_token, async_insert and
// input_format_native_allow_types_conversion on 26.9.
func TestServerSettingsDetected(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		ctx := context.Background()
		for _, tr := range []string{TransportNative, TransportHTTP} {
			s, err := New(ctx, Config{Transport: tr, Addr: ch.Addr, HTTPAddr: ch.HTTPAddr}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := int32(0) // 18.16 over native: not asked
			switch {
			case ch.Server == testinfra.Modern:
				want = settingsAsked | settingDedupToken | settingAsyncInsert | settingNativeConversion
			case tr == TransportHTTP:
				want = settingsAsked
			}
			got := s.serverSettings(ctx, s.endpoint)
			if got != want || s.dedupSupported(ctx, s.endpoint) != (want&settingDedupToken != 0) {
				t.Errorf("%s: settings %b, want %b", tr, got, want)
			}
			s.Close()
		}
	})
}
