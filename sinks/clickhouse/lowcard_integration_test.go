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

// TestConvertedTableOnItsOwn: on 18.16, a table with a LowCardinality the
// sink sends as its inner type (LowCardinality(FixedString(2))) fails the
// server's header check once and then goes at revision 54031, where the
// server converts, while a table of LowCardinality(String) on the same
// worker connection keeps 18.16's revision: every row lands, and the
// server's query_log shows which revision each insert came at, and that
// only the first of the converted table's inserts was tried at 54412.
func TestConvertedTableOnItsOwn(t *testing.T) {
	ch := loggingServer(t, testinfra.Legacy)
	ctx := context.Background()
	for _, ddl := range []string{
		"CREATE TABLE fx (id UInt32, v LowCardinality(FixedString(2))) ENGINE = MergeTree ORDER BY id",
		"CREATE TABLE ls (id UInt32, v LowCardinality(String)) ENGINE = MergeTree ORDER BY id",
	} {
		if err := ch.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	s := newSink(t, ch, clickhouse.TransportNative, nil)
	defer s.Close()
	tables := map[string]*clickhouse.Table{}
	for _, name := range []string{"fx", "ls"} {
		tbl, err := s.Table(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		tables[name] = tbl
	}
	c, err := clickhouse.OpenConn(ctx, s, tables["fx"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const rows = 100
	for round := range 2 {
		for _, name := range []string{"fx", "ls"} {
			blk := s.NewBlock(tables[name])
			for i := range rows {
				row := binary.LittleEndian.AppendUint32(nil, uint32(round*rows+i))
				if name == "fx" {
					row = append(row, 'a', byte('a'+i%26))
				} else {
					row = appendStr(row, "v"+strconv.Itoa(i%26))
				}
				if err := blk.AppendRow(row); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Insert(ctx, tables[name], []*clickhouse.Block{blk}); err != nil {
				t.Fatalf("%s, round %d: %v", name, round, err)
			}
		}
	}
	for name, want := range map[string]string{"fx": "200\t26\n", "ls": "200\t26\n"} {
		if got, err := ch.Query(ctx, "SELECT count(), uniqExact(v) FROM "+name+" FORMAT TSV"); err != nil || got != want {
			t.Errorf("%s: rows and distinct values %q, %v; want %q", name, got, err, want)
		}
	}
	// 18.16 logs the insert the check cut short as finished, with no row
	// written; fx's second insert goes at 54031 straight away.
	for name, want := range map[string]string{
		"fx": "[(54031,100),(54031,100),(54412,0)]\t3\n",
		"ls": "[(54412,100),(54412,100)]\t2\n",
	} {
		sql := "SELECT arraySort(groupArray((client_revision, written_rows))), count() FROM system.query_log WHERE " +
			ch.InsertsInto(name) + " FORMAT TSV"
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := ch.QueryLogged(qctx, sql, func(out string) bool { return strings.HasSuffix(out, want[strings.IndexByte(want, '\t'):]) })
		cancel()
		if err != nil || out != want {
			t.Errorf("%s: the inserts' client revisions and rows written, and their count: %q, %v; want %q", name, out, err, want)
		}
	}
}
