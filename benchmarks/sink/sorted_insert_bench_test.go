package sink_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/internal/testinfra"
)

// BenchmarkServerInsertSorted measures what the server spends on the
// sensor-batch workload's rows inserted in the table's key order (sensor,
// batch_ts, batch_id, event_seq), as sluice sends them (sort_rows: key),
// against the same rows in batch order, both with ch-go alone: per op, 40,000
// batches (2.94M rows) into a table of their own each, in inserts of
// 367,500 rows, the two orders in turn. The server skips its sort of a block
// it finds sorted (MergeTreeDataWriterBlocksAlreadySorted); the figures
// are the medians over the ops of the inserts' CPU per row, user time on
// 26.9 and user and system time on 18.16 (whose query_log does not split
// them), and of their ratio, and on 26.9 of the page faults per row.
// SERVER=18.16 runs it on 18.16.
//
//	go test -run '^$' -bench ServerInsertSorted -benchtime 4x ./benchmarks/sink/
//	SERVER=18.16 go test -run '^$' -bench ServerInsertSorted -benchtime 4x ./benchmarks/sink/
func BenchmarkServerInsertSorted(b *testing.B) {
	server, layout := testinfra.Modern, sensor.LayoutModern
	opts := ch.Options{Compression: ch.CompressionDisabled}
	if os.Getenv("SERVER") == "18.16" {
		server, layout, opts.ProtocolVersion = testinfra.Legacy, sensor.Layout18, 54031
	}
	o := testinfra.ClickHouseOptions{Server: server}
	o.ExtraConfig, o.ProfileSettings = testinfra.QueryLogConfig(server, 500*time.Millisecond)
	srv := testinfra.ClickHouseT(b, o)
	ctx := context.Background()
	opts.Address = srv.Addr
	c, err := ch.Dial(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	type row struct {
		h sensor.Batch
		r sensor.Row
	}
	var rows []row
	for h, r := range sensor.Rows(40_000, sensor.DrainSendTsUs) {
		rows = append(rows, row{*h, *r})
	}
	const perInsert = 367_500
	// run inserts the rows, each insert's in key order when sorted, and
	// returns the inserts' CPU and page faults per row.
	run := func(op int, sorted bool) (cpu, faults float64) {
		table := fmt.Sprintf("sorted_%d", op)
		execT(b, srv, layout.DDL(table))
		cols := sensor.NewNativeColumns(layout)
		for i := 0; i*perInsert < len(rows); i++ {
			part := slices.Clone(rows[i*perInsert : min((i+1)*perInsert, len(rows))])
			if sorted {
				slices.SortStableFunc(part, func(x, y row) int {
					return cmp.Or(strings.Compare(x.r.Sensor, y.r.Sensor), cmp.Compare(x.h.BatchTsMs, y.h.BatchTsMs),
						cmp.Compare(x.r.BatchID, y.r.BatchID), cmp.Compare(x.r.EventSeq, y.r.EventSeq))
				})
			}
			cols.Reset()
			for k := range part {
				cols.Append(&part[k].r, &part[k].h)
			}
			q := ch.Query{Body: "INSERT INTO " + table + " VALUES", Input: cols.Input()}
			if server == testinfra.Modern {
				q.Settings = []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("%s-%d", table, i), Important: true}}
			}
			if err := c.Do(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		// 18.16's query_log does not split user and system time.
		userTime := srv.EventSum("UserTimeMicroseconds")
		if server == testinfra.Legacy {
			userTime = srv.EventSum("UserTimeMicroseconds", "SystemTimeMicroseconds")
		}
		sql := fmt.Sprintf("SELECT sum(written_rows), sum(%s), sum(%s), count(), sum(%s) FROM system.query_log WHERE %s FORMAT TSV",
			userTime, srv.EventSum("SoftPageFaults"), srv.EventSum("MergeTreeDataWriterBlocksAlreadySorted"), srv.InsertsInto(table))
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		var inserts, alreadySorted int
		if _, err := srv.QueryLogged(qctx, sql, func(out string) bool {
			f := strings.Fields(out)
			if len(f) != 5 {
				return false
			}
			n, _ := strconv.Atoi(f[0])
			us, _ := strconv.ParseFloat(f[1], 64)
			pf, _ := strconv.ParseFloat(f[2], 64)
			inserts, _ = strconv.Atoi(f[3])
			alreadySorted, _ = strconv.Atoi(f[4])
			cpu, faults = us/float64(n), pf/float64(n)
			return n == len(rows)
		}); err != nil {
			b.Fatalf("%s: the inserts' query_log entries: %v", table, err)
		}
		// The comparison holds only if the server found the sorted inserts
		// sorted (one block each) and the others not.
		if sorted && alreadySorted != inserts || !sorted && alreadySorted == inserts {
			b.Fatalf("%s: %d of %d inserts found sorted by the server (sorted: %v)", table, alreadySorted, inserts, sorted)
		}
		execT(b, srv, "DROP TABLE "+table)
		return cpu, faults
	}
	var sortedUs, batchUs, ratio, sortedPF, batchPF []float64
	op := 0
	for b.Loop() {
		// Alternate which goes first.
		first := op%2 == 0
		var s, g, sf, gf float64
		if first {
			s, sf = run(op, true)
			g, gf = run(op+1, false)
		} else {
			g, gf = run(op, false)
			s, sf = run(op+1, true)
		}
		op += 2
		sortedUs, batchUs, ratio = append(sortedUs, s), append(batchUs, g), append(ratio, s/g)
		sortedPF, batchPF = append(sortedPF, sf), append(batchPF, gf)
	}
	b.ReportMetric(median(sortedUs), "sorted-server-µs/row")
	b.ReportMetric(median(batchUs), "batch-order-server-µs/row")
	b.ReportMetric(median(ratio), "sorted/batch-order")
	if server == testinfra.Modern {
		b.ReportMetric(median(sortedPF), "sorted-faults/row")
		b.ReportMetric(median(batchPF), "batch-order-faults/row")
	}
}
