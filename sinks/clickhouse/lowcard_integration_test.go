package clickhouse_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestLowCardinalityAsSuchTo1816: sluice speaks 18.16's own revision
// (54412), from which the native protocol carries LowCardinality columns in
// their own serialization, and adds the client info ch-go leaves out at it.
// The server logs the inserts at 54412 (at 54031 it logs 54031, from the
// hello), and reads back every value of LowCardinality(String),
// LowCardinality(Nullable(String)) and Array(LowCardinality(String))
// columns, inserted in batch order and in key order, over plain and
// compressed connections.
func TestLowCardinalityAsSuchTo1816(t *testing.T) {
	ch := loggingServer(t, testinfra.Legacy)
	ctx := context.Background()
	const rows, parts = 3000, 3
	for _, compression := range []string{"none", "lz4"} {
		for _, sorted := range []bool{false, true} {
			table := fmt.Sprintf("lc_%s_%v", compression, sorted)
			if err := ch.Exec(ctx, "CREATE TABLE "+table+` (s LowCardinality(String), id UInt32,
				n LowCardinality(Nullable(String)), a Array(LowCardinality(String))) ENGINE = MergeTree ORDER BY (s, id)`); err != nil {
				t.Fatal(err)
			}
			s := newSink(t, ch, clickhouse.TransportNative, func(c *clickhouse.Config) { c.Compression = compression })
			tbl, err := s.Table(ctx, table)
			if err != nil {
				t.Fatal(err)
			}
			var blocks []*clickhouse.Block
			for p := range parts {
				blk := s.NewBlock(tbl)
				for i := p * rows / parts; i < (p+1)*rows/parts; i++ {
					row := appendStr(nil, "s"+strconv.Itoa(i%7))
					row = binary.LittleEndian.AppendUint32(row, uint32(i))
					if i%5 == 0 {
						row = append(row, 1) // NULL
					} else {
						row = appendStr(append(row, 0), strings.Repeat("n", i%3))
					}
					row = binary.AppendUvarint(row, uint64(i%4))
					for j := range i % 4 {
						row = appendStr(row, "a"+strconv.Itoa((i+j)%11))
					}
					if err := blk.AppendRow(row); err != nil {
						t.Fatal(err)
					}
				}
				blocks = append(blocks, blk)
			}
			insert := clickhouse.InsertParts
			if sorted {
				insert = clickhouse.InsertPartsSorted
			}
			if _, err := insert(ctx, s, tbl, blocks); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
			s.Close()
			got, err := ch.Query(ctx, "SELECT count(), sum(s = concat('s', toString(id % 7))), "+
				"sum(if(id % 5 = 0, isNull(n), n = multiIf(id % 3 = 0, '', id % 3 = 1, 'n', 'nn'))), "+
				"sum(length(a) = id % 4 AND arrayAll((x, j) -> x = concat('a', toString((id + j - 1) % 11)), a, arrayEnumerate(a))) "+
				"FROM "+table+" FORMAT TSV")
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%d\t%d\t%d\t%d\n", rows, rows, rows, rows); got != want {
				t.Errorf("%s: rows, and rows whose s, n and a are right: %q, want %q", table, got, want)
			}
		}
	}
	sql := "SELECT groupUniqArray(client_revision), groupUniqArray(client_name), count() FROM system.query_log WHERE " +
		ch.InsertsInto("lc_none_false") + " OR " + ch.InsertsInto("lc_lz4_true") + " FORMAT TSV"
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := ch.QueryLogged(qctx, sql, func(out string) bool { return strings.HasSuffix(out, "\t2\n") })
	if err != nil {
		t.Fatalf("the inserts' query_log entries: %v", err)
	}
	if want := "[54412]\t['clickhouse/ch-go sluice']\t2\n"; out != want {
		t.Errorf("the inserts' client revisions and names, and count: %q, want %q", out, want)
	}
}
