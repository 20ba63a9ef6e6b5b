package clickhouse_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// joinedValues are, per type, values whose rows go over several parts of
// one insert: empty arrays and maps, NULLs and repeated LowCardinality
// values among them, so that some part holds only empty arrays or NULLs.
var joinedValues = []struct {
	typ    string
	values []string
}{
	{"UInt64", []string{"1", "18446744073709551615", "0"}},
	{"String", []string{"'a'", "''", "'ccc'"}},
	{"Nullable(Int64)", []string{"NULL", "-5", "NULL"}},
	{"LowCardinality(String)", []string{"'a'", "'b'", "'a'", "''"}},
	{"LowCardinality(Nullable(String))", []string{"NULL", "'x'", "'x'", "NULL", "''"}},
	{"LowCardinality(FixedString(2))", []string{"'ab'", "'cd'"}},
	{"Array(UInt8)", []string{"[]", "[1, 2]", "[]", "[3]"}},
	{"Array(LowCardinality(String))", []string{"['a']", "[]", "[]", "['b', 'a', 'c']", "[]"}},
	{"Array(LowCardinality(Nullable(String)))", []string{"[]", "['a', NULL, '']", "[]", "[NULL]"}},
	{"Array(Array(Nullable(UInt8)))", []string{"[[1, NULL], []]", "[[]]", "[[2], [NULL]]"}},
	{"Map(String, UInt64)", []string{"map()", "map('a', 1, 'b', 2)", "map()", "map('c', 3)"}},
	{"Map(LowCardinality(String), Array(Nullable(Int32)))", []string{"map('x', [1, NULL])", "map()", "map('y', [])"}},
	{"Tuple(a Int64, b Nullable(String), c Array(UInt8))", []string{"(1, NULL, [])", "(2, 'x', [3, 4])", "(3, '', [])"}},
	{"DateTime64(3)", []string{"'2026-01-01 00:00:00.001'", "'1970-01-01 00:00:00.000'"}},
}

// TestJoinedInsert: an insert whose parts are all at hand (one whose
// deduplication token covers them, or a retry) goes as one block over the
// native protocol, its columns joined part by part; on each server and
// over each transport, rows spread over parts of 1, 3, 2 and 1 rows read
// back as the server reads the literals, in one part.
func TestJoinedInsert(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		// Each statement and insert is bounded by the sink's and the
		// server's own timeouts, not by a clock of the test's.
		ctx := t.Context()
		checked := 0
		for i, tv := range joinedValues {
			if missing := missingOn(ch, tv.typ); len(missing) > 0 {
				continue
			}
			// Seven rows over parts of 1, 3, 2 and 1 rows, the values in turn.
			var vs []vector
			for r := range 7 {
				v := vector{typ: tv.typ, literal: tv.values[r%len(tv.values)]}
				rb, err := serverRowBinary(ch, v)
				if err != nil {
					t.Fatalf("%s %s: %v", v.typ, v.literal, err)
				}
				v.rowBinary = []byte(rb)
				vs = append(vs, v)
			}
			want, err := ch.Query(ctx, literalsQuery(tv.typ, vs))
			if err != nil {
				t.Fatalf("%s: %v", tv.typ, err)
			}
			for _, tr := range transports {
				if tr == clickhouse.TransportHTTP && ch.Server == testinfra.Legacy && sentAsInnerType(tv.typ) {
					continue // refused up front (TestRowBinaryVectors)
				}
				table := fmt.Sprintf("joined_%s_%d", tr, i)
				if err := ch.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id UInt32, v %s) ENGINE = MergeTree ORDER BY id", table, tv.typ)); err != nil {
					t.Fatalf("%s: %v", tv.typ, err)
				}
				s := newSink(t, ch, tr, nil)
				tbl, err := s.Table(ctx, table)
				if err != nil {
					t.Fatalf("%s over %s: %v", tv.typ, tr, err)
				}
				var blocks []*clickhouse.Block
				at := 0
				for _, n := range []int{1, 3, 2, 1} {
					b := s.NewBlock(tbl)
					for r := at; r < at+n; r++ {
						row := binary.LittleEndian.AppendUint32(nil, uint32(r))
						if err := b.AppendRow(append(row, vs[r].rowBinary...)); err != nil {
							t.Fatalf("%s %s: %v", tv.typ, vs[r].literal, err)
						}
					}
					blocks = append(blocks, b)
					at += n
				}
				sent, err := clickhouse.InsertParts(ctx, s, tbl, blocks)
				if err != nil {
					t.Fatalf("%s over %s: %v", tv.typ, tr, err)
				}
				if tr == clickhouse.TransportNative && sent != 1 {
					t.Errorf("%s over native: the insert of 4 parts went as %d blocks, want 1", tv.typ, sent)
				}
				got, err := ch.Query(ctx, fmt.Sprintf("SELECT v FROM %s ORDER BY id FORMAT TSV", table))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("%s over %s: read back\n%q\nwant\n%q", tv.typ, tr, got, want)
				}
				parts, err := ch.Query(ctx, fmt.Sprintf("SELECT count() FROM system.parts WHERE table = '%s' AND active", table))
				if err != nil {
					t.Fatal(err)
				}
				if strings.TrimSpace(parts) != "1" {
					t.Errorf("%s over %s: %s parts, want the insert's one", tv.typ, tr, strings.TrimSpace(parts))
				}
				s.Close()
				checked++
			}
		}
		if checked == 0 {
			t.Fatal("no type checked")
		}
		t.Logf("ClickHouse %s: %d type and transport pairs inserted joined", ch.Version, checked)
	})
}
