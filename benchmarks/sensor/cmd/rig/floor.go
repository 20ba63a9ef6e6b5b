package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/internal/testinfra"
)

// insertFloor is the floor arm: the drain's rows, computed by the
// reference transform in the rig's process, inserted with ch-go straight
// into a table of the same layout, in inserts of the size sluice's drain
// made (or floorInsertRows). It is what the server spends on these rows
// when nothing but a plain client stands before it: the yardstick for the
// server's CPU per row under sluice's inserts. On 26.9 the LowCardinality
// columns go as LowCardinality, on 18.16 as String at protocol revision
// 54031, as sluice sends them to each; uncompressed, as sluice's default
// compression (auto) sends to a server on loopback.
type insertFloor struct {
	Rows           int64   `json:"rows"`
	Inserts        int     `json:"inserts"`
	RowsPerInsert  int     `json:"rows_per_insert"`
	ElapsedS       float64 `json:"elapsed_s"`
	ClickHouseCPUS float64 `json:"clickhouse_cpu_s"`
	// ClickHouseCPUUsPerRow is the server's CPU from the first insert to
	// the last one's acknowledgement (the inserts and whatever merging
	// they caused meanwhile) per row, in microseconds: the drain's
	// clickhouse_cpu_s per row compares with it.
	ClickHouseCPUUsPerRow float64         `json:"clickhouse_cpu_us_per_row"`
	Server                *serverCounters `json:"server,omitempty"`
	GatesPass             bool            `json:"gates_pass"`
	Gates                 []sensor.Gate   `json:"gates"`
	Error                 string          `json:"error,omitempty"`
}

// floorInsertRows is the floor's insert size when the drain did not run.
const floorInsertRows = 250_000

func (r *rig) floor(ctx context.Context, rowsPerInsert int) *insertFloor {
	e := r.env
	batches := r.prof.drainBatches
	want := sensor.Expect(batches, sensor.DrainSendTsUs)
	f := &insertFloor{Rows: int64(want.Rows), RowsPerInsert: rowsPerInsert}
	if f.RowsPerInsert <= 0 {
		f.RowsPerInsert = floorInsertRows
	}
	const table = "se_floor"
	// The drain's merges must not count as the floor's.
	if err := e.waitMergesIdle(ctx, 2*time.Minute); err != nil {
		f.Error = err.Error()
		return f
	}
	if err := e.ch.Exec(ctx, e.layout.DDL(table)); err != nil {
		f.Error = err.Error()
		return f
	}
	opts := ch.Options{Address: e.ch.Addr, Compression: ch.CompressionDisabled}
	modern := e.server == testinfra.Modern
	if !modern {
		// 18.16 needs the old revision's client info (sinks/clickhouse).
		opts.ProtocolVersion = 54031
	}
	c, err := ch.Dial(ctx, opts)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	defer c.Close()
	cols := sensor.NewNativeColumns(e.layout)
	ch0, _ := cpuSeconds(e.chPID)
	start := time.Now()
	send := func() error {
		if cols.Rows() == 0 {
			return nil
		}
		q := ch.Query{Body: "INSERT INTO " + table + " VALUES", Input: cols.Input()}
		if modern {
			// As sluice's inserts on 26.9 carry one: the server then
			// names the part from the token rather than hashing its rows
			// for the table's deduplication window.
			q.Settings = []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("floor-%d", f.Inserts), Important: true}}
		}
		err := c.Do(ctx, q)
		f.Inserts++
		cols.Reset()
		return err
	}
	for h, row := range sensor.Rows(batches, sensor.DrainSendTsUs) {
		cols.Append(row, h)
		if cols.Rows() >= f.RowsPerInsert {
			if err = send(); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = send()
	}
	if err != nil {
		f.Error = err.Error()
		return f
	}
	// Every row has landed once the last insert is acknowledged: the
	// server's CPU up to here compares with the drain's up to its last row.
	ch1, _ := cpuSeconds(e.chPID)
	f.ElapsedS = time.Since(start).Seconds()
	f.ClickHouseCPUS = ch1 - ch0
	f.ClickHouseCPUUsPerRow = f.ClickHouseCPUS * 1e6 / float64(f.Rows)
	_, werr := e.watch(ctx, watchSpec{table: table, expected: f.Rows, pid: os.Getpid(), start: start,
		quietFor: 2 * time.Second, stallFor: 90 * time.Second})
	if werr != nil {
		f.Error = werr.Error()
	}
	gates, _, gerr := e.gate(ctx, table, want, 0)
	if gerr != nil {
		f.Error = join(f.Error, "gates: "+gerr.Error())
	}
	f.Gates, f.GatesPass = gates, gerr == nil && sensor.AllPass(gates)
	f.Server = e.serverCounters(ctx, table)
	return f
}

func (f *insertFloor) summary() string {
	s := fmt.Sprintf("ch-go/%d rows in %d inserts of %d: clickhouse %.1f CPU-s (%.2f µs per row); gates pass %v; %s",
		f.Rows, f.Inserts, f.RowsPerInsert, f.ClickHouseCPUS, f.ClickHouseCPUUsPerRow, f.GatesPass, f.Server)
	if f.Error != "" {
		s += "; ERROR: " + f.Error
	}
	return s
}

// waitMergesIdle waits until the server runs no merge, at most max.
func (e *env) waitMergesIdle(ctx context.Context, max time.Duration) error {
	deadline := time.Now().Add(max)
	for {
		out, err := e.query(ctx, "SELECT count() FROM system.merges")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "0" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("merges still running after %s: %s", max, strings.TrimSpace(out))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
