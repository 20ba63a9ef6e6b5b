package sink_test

import (
	"context"
	"fmt"
	"io"
	"iter"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// Sizes of BenchmarkServerInsertCPU's inserts: the sensor drain's (a
// 26.9 quick-profile drain made inserts of about 326,000 to 367,500 rows),
// the sink's from chunks of about the default chunk_bytes.
const (
	serverInsertBatches = 10_000 // 735,000 rows
	serverInsertRows    = 367_500
	serverInsertBlock   = 12_250
)

// BenchmarkServerInsertCPU measures what the server spends on the
// sensor-batch workload's rows inserted by the sink, against the same rows
// inserted by ch-go alone (the rig's floor arm), on ClickHouse 26.9 with
// the workload's modern table, with nothing else running: per op each
// path inserts 735,000 rows into a table of its own, in inserts of 367,500
// rows, each with an insert_deduplication_token (the sink's acks carry
// offset ranges, as the engine's do). The sink's come from chunks of
// 12,250 rows, one insert at a time; ch-go sends each insert as one
// block, as the floor arm does (SERVER_INSERT_CHGO_BLOCK=12250 sends
// blocks of a chunk's rows instead). The figures are
// the medians over the ops of the server's user+system CPU per row for
// the inserts (query_log ProfileEvents), and of their ratio: the rig's
// drain-against-floor target in isolation, where the pipeline's own load
// does not share the cores.
//
//	go test -run '^$' -bench ServerInsertCPU -benchtime 5x ./benchmarks/sink/
func BenchmarkServerInsertCPU(b *testing.B) {
	srv := testinfra.ClickHouseT(b, testinfra.ClickHouseOptions{Server: testinfra.Modern})
	ctx := context.Background()
	var rows [][]byte
	for h, r := range sensor.Rows(serverInsertBatches, sensor.DrainSendTsUs) {
		rows = append(rows, sensor.AppendRowBinary(nil, h, r))
	}
	c, err := ch.Dial(ctx, ch.Options{Address: srv.Addr, Compression: ch.CompressionDisabled})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cfg := clickhouse.Config{Addr: srv.Addr, HTTPAddr: srv.HTTPAddr, MaxInsertRows: serverInsertRows,
		InsertsPerShard: 1, InsertLinger: time.Minute}
	var sinkUs, chgoUs, ratio []float64
	op := 0
	for b.Loop() {
		// Alternate which goes first: a server's first inserts cost more.
		var s, g float64
		if op%2 == 0 {
			s, g = sinkInsertCPU(b, srv, cfg, op, rows), chgoInsertCPU(b, srv, c, op)
		} else {
			g, s = chgoInsertCPU(b, srv, c, op), sinkInsertCPU(b, srv, cfg, op, rows)
		}
		sinkUs, chgoUs, ratio = append(sinkUs, s), append(chgoUs, g), append(ratio, s/g)
		op++
	}
	b.ReportMetric(median(sinkUs), "sink-server-µs/row")
	b.ReportMetric(median(chgoUs), "chgo-server-µs/row")
	b.ReportMetric(median(ratio), "sink/chgo")
}

// offsetAck is an ack with an offset range, as the engine's acks are: the
// sink sends a deduplication token only for chunks whose acks all have one.
type offsetAck struct {
	n     *atomic.Int64
	first int64
}

func (a offsetAck) Done()                                { a.n.Add(1) }
func (a offsetAck) Range() (string, int32, int64, int64) { return "sensor", 0, a.first, a.first + 1 }

// sinkInsertCPU inserts rows through a fresh sink into a new table and
// returns the server's CPU per row for its inserts, in µs.
func sinkInsertCPU(b *testing.B, srv *testinfra.ClickHouse, cfg clickhouse.Config, op int, rows [][]byte) float64 {
	b.Helper()
	table := fmt.Sprintf("insert_cpu_sink_%d", op)
	execT(b, srv, sensor.LayoutModern.DDL(table))
	rs := newSinkNoCleanup(b, cfg)
	defer rs.close(b)
	s := rs.sink
	tbl, err := s.Table(context.Background(), table)
	if err != nil {
		b.Fatal(err)
	}
	var acked atomic.Int64
	chunks := 0
	for start := 0; start < len(rows); start += serverInsertBlock {
		blk := s.NewBlock(tbl)
		for _, r := range rows[start:min(start+serverInsertBlock, len(rows))] {
			if err := blk.AppendRow(r); err != nil {
				b.Fatal(err)
			}
		}
		ack := offsetAck{&acked, int64(start)}
		if err := s.Send(context.Background(), clickhouse.NewChunk(blk, []clickhouse.Ack{ack})); err != nil {
			b.Fatal(err)
		}
		chunks++
	}
	// Wait on progress: fail only when no chunk is acked for 2 minutes.
	last, moved := acked.Load(), time.Now()
	for n := last; n < int64(chunks); n = acked.Load() {
		if n != last {
			last, moved = n, time.Now()
		} else if time.Since(moved) > 2*time.Minute {
			b.Fatalf("%d of %d chunks acked, none for 2 minutes", n, chunks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return insertCPUPerRow(b, srv, table, len(rows))
}

// chgoInsertCPU inserts the same rows with ch-go into a new table and
// returns the server's CPU per row for its inserts, in µs.
func chgoInsertCPU(b *testing.B, srv *testinfra.ClickHouse, c *ch.Client, op int) float64 {
	b.Helper()
	table := fmt.Sprintf("insert_cpu_chgo_%d", op)
	execT(b, srv, sensor.LayoutModern.DDL(table))
	next, stop := iter.Pull2(sensor.Rows(serverInsertBatches, sensor.DrainSendTsUs))
	defer stop()
	cols := sensor.NewNativeColumns(sensor.LayoutModern)
	block := serverInsertRows
	if n, err := strconv.Atoi(os.Getenv("SERVER_INSERT_CHGO_BLOCK")); err == nil && n > 0 {
		block = n
	}
	fill := func() bool {
		cols.Reset()
		for cols.Rows() < block {
			h, r, ok := next()
			if !ok {
				break
			}
			cols.Append(r, h)
		}
		return cols.Rows() > 0
	}
	total := 0
	for i := 0; fill(); i++ {
		inInsert := 0
		err := c.Do(context.Background(), ch.Query{
			Body:     "INSERT INTO " + table + " VALUES",
			Input:    cols.Input(),
			Settings: []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("%s-%d", table, i), Important: true}},
			OnInput: func(context.Context) error {
				inInsert += cols.Rows()
				total += cols.Rows()
				if inInsert >= serverInsertRows {
					cols.Reset() // ch-go sends rows left in the input at io.EOF
					return io.EOF
				}
				if !fill() {
					return io.EOF
				}
				return nil
			},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return insertCPUPerRow(b, srv, table, total)
}

// insertCPUPerRow is the server's user+system CPU for the inserts into
// table, per row, in µs, after checking they wrote rows rows.
func insertCPUPerRow(b *testing.B, srv *testinfra.ClickHouse, table string, rows int) float64 {
	b.Helper()
	// Every insert's entry, however long the server takes to log them (a
	// minute bounds a server that never does).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var us float64
	_, err := srv.QueryLogged(ctx, fmt.Sprintf(`SELECT sum(written_rows),
  sum(ProfileEvents['UserTimeMicroseconds'] + ProfileEvents['SystemTimeMicroseconds'])
FROM system.query_log WHERE type = 'QueryFinish' AND query_kind = 'Insert' AND has(tables, 'default.%s') FORMAT TSV`, table),
		func(out string) bool {
			f := strings.Fields(out)
			if len(f) != 2 {
				return false
			}
			n, err1 := strconv.Atoi(f[0])
			v, err2 := strconv.ParseFloat(f[1], 64)
			us = v
			return err1 == nil && err2 == nil && n == rows
		})
	if err != nil {
		b.Fatalf("%s: the inserts' query_log entries, %d rows wanted: %v", table, rows, err)
	}
	execT(b, srv, "DROP TABLE "+table+" SYNC")
	return us / float64(rows)
}
