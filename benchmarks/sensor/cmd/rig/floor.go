package main

import (
	"context"
	"errors"
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
// into a table of the same layout, in inserts of the sizes sluice's drain
// made, in its order (or of floorInsertRows): the same blocks, each as one
// Native block. It is what the server spends on these rows
// when nothing but a plain client stands before it: the yardstick for the
// server's CPU per row under sluice's inserts. On 26.9 the LowCardinality
// columns go as LowCardinality, on 18.16 as String at protocol revision
// 54031, as sluice sends them to each; uncompressed, as sluice's default
// compression (auto) sends to a server on loopback.
type insertFloor struct {
	Rows           int64   `json:"rows"`
	Inserts        int     `json:"inserts"`
	RowsPerInsert  int     `json:"rows_per_insert"` // on average
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

// floorSizes is the rows of each of the floor's inserts of rows rows: the
// drain's insert sizes in their order, those of no rows left out (an
// insert the server deduplicated), from the first again should they come
// short of rows, and the last cut to what is left; floorInsertRows each
// when the drain made none.
func floorSizes(rows int64, drain []int64) []int64 {
	var sizes []int64
	for _, n := range drain {
		if n > 0 {
			sizes = append(sizes, n)
		}
	}
	if len(sizes) == 0 {
		sizes = []int64{floorInsertRows}
	}
	var plan []int64
	for left := rows; left > 0; {
		n := min(sizes[len(plan)%len(sizes)], left)
		plan = append(plan, n)
		left -= n
	}
	return plan
}

func (r *rig) floor(ctx context.Context, sizes []int64) *insertFloor {
	// The drain's merges must not count as the floor's.
	if err := r.env.waitMergesIdle(ctx, 2*time.Minute); err != nil {
		return &insertFloor{Error: err.Error()}
	}
	return r.chgoInserts(ctx, "se_floor", sizes, 0)
}

// chgoInserts inserts the drain's rows with ch-go into a new table of the
// layout, insert i of sizes[i] rows (floorInsertRows if none), at most
// at rowsPerSec rows per second when it is above 0, and gates them.
func (r *rig) chgoInserts(ctx context.Context, table string, sizes []int64, rowsPerSec float64) *insertFloor {
	e := r.env
	batches := r.prof.drainBatches
	want := sensor.Expect(batches, sensor.DrainSendTsUs)
	f := &insertFloor{Rows: int64(want.Rows)}
	plan := floorSizes(f.Rows, sizes)
	f.RowsPerInsert = int(f.Rows / int64(max(1, len(plan))))
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
	sent := 0
	send := func() error {
		if cols.Rows() == 0 {
			return nil
		}
		if rowsPerSec > 0 {
			// Paced: the insert goes when the rows before it would have at
			// rowsPerSec, as the drain's come.
			sent += cols.Rows()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Until(start.Add(time.Duration(float64(sent) / rowsPerSec * float64(time.Second))))):
			}
		}
		q := ch.Query{Body: "INSERT INTO " + table + " VALUES", Input: cols.Input()}
		if modern {
			// As sluice's inserts on 26.9 carry one: the server then
			// names the part from the token rather than hashing its rows
			// for the table's deduplication window.
			q.Settings = []ch.Setting{{Key: "insert_deduplication_token", Value: fmt.Sprintf("%s-%d", table, f.Inserts), Important: true}}
		}
		err := c.Do(ctx, q)
		f.Inserts++
		cols.Reset()
		return err
	}
	for h, row := range sensor.Rows(batches, sensor.DrainSendTsUs) {
		cols.Append(row, h)
		if f.Inserts < len(plan) && cols.Rows() >= int(plan[f.Inserts]) {
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

// besideFloor is the floor arm run again beside a second drain: while
// sluice drains the Avro topic once more, into a table of its own, ch-go
// inserts the drain's rows into another, in inserts of the first drain's
// size and at its rate, so that the server runs both sets of inserts under
// the same load (the pipeline's processes, both arms' merges). After the
// drain, the floor arm runs alone, and its inserts come out cheaper for
// that alone: the same sluice code measured 1.08 to 1.66 of it in runs of
// one day (benchmarks/README.md).
type besideFloor struct {
	Drain *drainFigures `json:"drain"`
	Floor *insertFloor  `json:"floor"`
}

func (r *rig) floorBeside(ctx context.Context, sizes []int64, rowsPerSec float64) *besideFloor {
	e := r.env
	d := &drainFigures{System: "sluice", Format: "avro", Topic: "sensor_avro", Table: "se_drain_beside", Batches: r.prof.drainBatches}
	want := sensor.Expect(d.Batches, sensor.DrainSendTsUs)
	b := &besideFloor{Drain: d}
	r.runSluice(ctx, d, e.avroWasm, int64(want.Rows), func() sensor.Expectation { return want }, func(ctx context.Context) error {
		b.Floor = r.chgoInserts(ctx, "se_floor_beside", sizes, rowsPerSec)
		if b.Floor.Error != "" {
			return errors.New(b.Floor.Error)
		}
		return nil
	})
	if b.Floor == nil {
		b.Floor = &insertFloor{Error: "not run: " + d.Error}
	}
	return b
}

// insertRatio is the server's CPU per row for the drain's inserts over the
// floor's, from query_log, with their figures in µs, and whether both have
// them.
func insertRatio(d *drainFigures, f *insertFloor) (ratio, drainUs, floorUs, slack float64, ok bool) {
	if f == nil || d == nil || f.Error != "" || !f.GatesPass || d.Error != "" || d.Server == nil || f.Server == nil ||
		d.Server.InsertedRows == 0 || f.Server.InsertedRows == 0 {
		return 0, 0, 0, 0, false
	}
	// The inserts' own CPU, from query_log: the merges they cause depend
	// on the parts' sizes, which are the same, and on how long the arm
	// lasts, which is not.
	drainUs = d.Server.InsertCPUSeconds * 1e6 / float64(d.Server.InsertedRows)
	floorUs = f.Server.InsertCPUSeconds * 1e6 / float64(f.Server.InsertedRows)
	// query_log's CPU is in microseconds; allow one per insert.
	slack = float64(d.Server.Inserts) / float64(d.Server.InsertedRows)
	return drainUs / floorUs, drainUs, floorUs, slack, true
}

// userSplit is ", of which user a / b" for two arms' inserts, each's user
// CPU per row in µs, when both have ProfileEvents (26.9): the system time
// is the rest, and it moves with what the kernel has to do for the
// server's memory rather than with what the client sent
// (benchmarks/README.md).
func userSplit(a, b *serverCounters) string {
	user := func(c *serverCounters) (float64, bool) {
		us, ok := c.InsertEvents["UserTimeMicroseconds"]
		return float64(us) / float64(c.InsertedRows), ok && c.InsertedRows > 0
	}
	ua, oka := user(a)
	ub, okb := user(b)
	if !oka || !okb {
		return ""
	}
	return fmt.Sprintf(", of which user %.3f / %.3f", ua, ub)
}

func (f *insertFloor) summary() string {
	s := fmt.Sprintf("ch-go/%d rows in %d inserts of %d on average: clickhouse %.1f CPU-s (%.2f µs per row); gates pass %v; %s",
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
