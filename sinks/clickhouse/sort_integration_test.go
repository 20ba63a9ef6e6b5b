package clickhouse_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestInsertsGoInKeyOrder: rows sent out of the table's key order, in
// several chunks of one insert, reach the server in that order (the
// server counts each block it found sorted in
// MergeTreeDataWriterBlocksAlreadySorted), land as they were, and keep
// the order they came in among equal keys: a ReplacingMergeTree keeps the
// last of them. With sort_rows: off the server sorts them itself. On
// both servers, over the native protocol, plain and compressed.
func TestInsertsGoInKeyOrder(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		ch := loggingServer(t, server)
		for _, tc := range []struct {
			sortRows, compression string
			sorted                bool
		}{
			{"", "none", true}, {"", "lz4", true}, {"off", "none", false},
		} {
			name := "key"
			if tc.sortRows != "" {
				name = tc.sortRows
			}
			t.Run(name+"/"+tc.compression, func(t *testing.T) {
				testInsertsGoInKeyOrder(t, ch, "key_order_"+name+"_"+tc.compression, tc.sortRows, tc.compression, tc.sorted)
			})
		}
	})
}

func testInsertsGoInKeyOrder(t *testing.T, ch *testinfra.ClickHouse, table, sortRows, compression string, sorted bool) {
	ctx := context.Background()
	replacing := table + "_replacing"
	for name, engine := range map[string]string{table: "MergeTree", replacing: "ReplacingMergeTree"} {
		if err := ch.Exec(ctx, "CREATE TABLE "+name+" (g String, n Int32, id UInt32, v String) ENGINE = "+engine+" ORDER BY (g, n)"); err != nil {
			t.Fatal(err)
		}
	}
	s := newSink(t, ch, clickhouse.TransportNative, func(c *clickhouse.Config) {
		c.SortRows, c.Compression = sortRows, compression
		// One insert takes every chunk.
		c.InsertLinger, c.ChunkLinger = 2*time.Second, 10*time.Millisecond
	})
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	tbl, err := s.Table(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	rtbl, err := s.Table(ctx, replacing)
	if err != nil {
		t.Fatal(err)
	}
	// 4,000 rows in 4 chunks, keys in random order with repeats: among
	// each key's rows the last sent has the highest id.
	const rows, chunks = 4000, 4
	rng := rand.New(rand.NewPCG(1, 2))
	var acked atomic.Int64
	last := map[string]uint32{}
	for c := range chunks {
		blk, rblk := s.NewBlock(tbl), s.NewBlock(rtbl)
		for i := range rows / chunks {
			id := uint32(c*rows/chunks + i)
			g := "g" + strconv.Itoa(rng.IntN(50))
			n := int32(rng.IntN(20) - 10)
			v := fmt.Sprintf("v%d", id)
			row := append([]byte{byte(len(g))}, g...)
			row = binary.LittleEndian.AppendUint32(row, uint32(n))
			row = binary.LittleEndian.AppendUint32(row, id)
			row = append(append(row, byte(len(v))), v...)
			if err := blk.AppendRow(row); err != nil {
				t.Fatal(err)
			}
			if err := rblk.AppendRow(row); err != nil {
				t.Fatal(err)
			}
			last[fmt.Sprintf("%s\t%d", g, n)] = id
		}
		for _, b := range []*clickhouse.Block{blk, rblk} {
			if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{countAck{&acked}})); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitAcked(t, &acked, 2*chunks)
	st := s.Stats()
	s.Close()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	got, err := ch.Query(ctx, "SELECT count(), uniqExact(id), sum(id), sum(toUInt64(substring(v, 2)) = id) FROM "+table+" FORMAT TSV")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d\t%d\t%d\t%d\n", rows, rows, rows*(rows-1)/2, rows); got != want {
		t.Fatalf("count, distinct ids, their sum, rows whose v is their id: %q, want %q", got, want)
	}
	written, sortedParts := alreadySorted(t, ch, table)
	if want := map[bool]int{true: written, false: 0}[sorted]; sortedParts != want || sorted != (st.SortedInserts > 0) {
		t.Fatalf("the server found %d of %d parts sorted, the sink sorted %d inserts; want them sorted: %v", sortedParts, written, st.SortedInserts, sorted)
	}
	// The last row sent of each key is the one a ReplacingMergeTree keeps.
	if err := ch.Exec(ctx, "OPTIMIZE TABLE "+replacing+" FINAL"); err != nil {
		t.Fatal(err)
	}
	out, err := ch.Query(ctx, "SELECT g, n, id FROM "+replacing+" FORMAT TSV")
	if err != nil {
		t.Fatal(err)
	}
	kept := strings.Split(strings.TrimSpace(out), "\n")
	if len(kept) != len(last) {
		t.Fatalf("%d keys kept, want %d", len(kept), len(last))
	}
	for _, line := range kept {
		i := strings.LastIndexByte(line, '\t')
		if id, want := line[i+1:], strconv.Itoa(int(last[line[:i]])); id != want {
			t.Fatalf("key %q kept id %s, want the last sent, %s", line[:i], id, want)
		}
	}
}

// waitAcked waits until want chunks are acked, failing only when none is
// for 2 minutes: a loaded machine is slow, not stuck.
func waitAcked(t *testing.T, acked *atomic.Int64, want int64) {
	t.Helper()
	last, moved := acked.Load(), time.Now()
	for n := last; n < want; n = acked.Load() {
		if n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			t.Fatalf("%d of %d chunks acked, none for 2 minutes", n, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loggingServer starts a server that logs every query.
func loggingServer(t *testing.T, server testinfra.Server) *testinfra.ClickHouse {
	t.Helper()
	opts := testinfra.ClickHouseOptions{Server: server}
	opts.ExtraConfig, opts.ProfileSettings = testinfra.QueryLogConfig(server, 500*time.Millisecond)
	return testinfra.ClickHouseT(t, opts)
}

// alreadySorted is how many parts the inserts into table wrote and how
// many of them the server found sorted, from their query_log
// ProfileEvents.
func alreadySorted(t *testing.T, ch *testinfra.ClickHouse, table string) (written, sorted int) {
	t.Helper()
	sql := fmt.Sprintf("SELECT count(), sum(%s), sum(%s) FROM system.query_log WHERE %s FORMAT TSV",
		ch.EventSum("MergeTreeDataWriterBlocks"), ch.EventSum("MergeTreeDataWriterBlocksAlreadySorted"), ch.InsertsInto(table))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := ch.QueryLogged(ctx, sql, func(out string) bool {
		f := strings.Fields(out)
		if len(f) != 3 || f[0] == "0" {
			return false
		}
		written, _ = strconv.Atoi(f[1])
		sorted, _ = strconv.Atoi(f[2])
		return true
	})
	if err != nil {
		t.Fatalf("the inserts' query_log entries: %v", err)
	}
	if written == 0 {
		t.Fatalf("the inserts into %s wrote no part, by their query_log", table)
	}
	return written, sorted
}

// TestSortedInsertInBlocks: over a compressed connection an insert of more
// than 8 MiB goes in key order as several blocks, consecutive slices of
// the order, and the server, which joins them before it writes the part,
// finds that part sorted. On both servers.
func TestSortedInsertInBlocks(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		ch := loggingServer(t, server)
		ctx := context.Background()
		const table, rows, parts = "sorted_blocks", 6000, 3
		if err := ch.Exec(ctx, "CREATE TABLE "+table+" (g String, n Int32, id UInt32, v String) ENGINE = MergeTree ORDER BY (g, n)"); err != nil {
			t.Fatal(err)
		}
		s := newSink(t, ch, clickhouse.TransportNative, func(c *clickhouse.Config) { c.Compression = "lz4" })
		defer s.Close()
		tbl, err := s.Table(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(3, 4))
		pad := strings.Repeat("x", 2000) // 12 MB of rows in all
		var blocks []*clickhouse.Block
		for p := range parts {
			blk := s.NewBlock(tbl)
			for i := range rows / parts {
				g := "g" + strconv.Itoa(rng.IntN(100))
				v := fmt.Sprintf("%s%d", pad, p*rows/parts+i)
				row := append([]byte{byte(len(g))}, g...)
				row = binary.LittleEndian.AppendUint32(row, uint32(rng.IntN(1000)))
				row = binary.LittleEndian.AppendUint32(row, uint32(p*rows/parts+i))
				row = binary.AppendUvarint(row, uint64(len(v)))
				row = append(row, v...)
				if err := blk.AppendRow(row); err != nil {
					t.Fatal(err)
				}
			}
			blocks = append(blocks, blk)
		}
		n, err := clickhouse.InsertPartsSorted(ctx, s, tbl, blocks)
		if err != nil {
			t.Fatal(err)
		}
		if n < 2 {
			t.Fatalf("the insert went as %d block, want several of at most 8 MiB", n)
		}
		got, err := ch.Query(ctx, "SELECT count(), uniqExact(id), sum(toUInt64(substring(v, 2001)) = id) FROM "+table+" FORMAT TSV")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%d\t%d\t%d\n", rows, rows, rows); got != want {
			t.Fatalf("count, distinct ids, rows whose v ends in their id: %q, want %q", got, want)
		}
		if written, sorted := alreadySorted(t, ch, table); sorted != written {
			t.Fatalf("the server found %d of the %d parts of %d blocks sorted", sorted, written, n)
		}
	})
}
