package sink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// ceilingRows is the work of one insert run of BenchmarkSinkCeiling.
const ceilingRows = 1_000_000

// BenchmarkSinkCeiling inserts 1M synthetic 10-column rows into an
// ENGINE = Null table: through raw ch-go (pre-built columns, one
// connection, one INSERT streaming 100,000-row blocks: the ceiling), and
// through the sink over native and over HTTP, decoding every row from
// RowBinary, from a fresh sink closed at the end of each op (so the time
// ends with the last insert, not with its linger). The sub-benchmarks
// report each path's rows/s and allocations (a fresh sink's, pools cold);
// "steady-allocs-native" those of a warm, long-lived sink; "interleaved"
// runs raw, sink native, sink native with inserts_per_shard 1 (one
// connection, like raw) and sink HTTP back to back in every op and reports
// the medians of the per-op figures and of the sink/raw ratios, which holds up on a machine
// whose load changes during the run.
func BenchmarkSinkCeiling(b *testing.B) {
	srv := testinfra.ClickHouseT(b)
	execT(b, srv, "CREATE TABLE ceiling ("+columns10+") ENGINE = Null")
	ds := rowsData()
	raw := func(b *testing.B, c *ch.Client) time.Duration {
		input := ds.input()
		sent := len(ds.rows)
		start := time.Now()
		err := c.Do(context.Background(), ch.Query{
			Body:  "INSERT INTO ceiling (ts, id, user_id, host, path, status, latency, bytes, tags, msg) VALUES",
			Input: input,
			OnInput: func(context.Context) error {
				if sent >= ceilingRows {
					return io.EOF
				}
				sent += len(ds.rows)
				return nil
			},
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	cfgFor := func(transport string) clickhouse.Config {
		return clickhouse.Config{Transport: transport, Addr: srv.Addr, HTTPAddr: srv.HTTPAddr, ChunkBytes: chunkBytesEnv()}
	}
	rps := func(d time.Duration) float64 { return ceilingRows / d.Seconds() }

	b.Run("chgo-raw", func(b *testing.B) {
		c := dialRaw(b, srv.Addr)
		defer c.Close()
		b.SetBytes(ceilingRows * ds.rowBytes())
		b.ReportAllocs()
		var total time.Duration
		for range b.N {
			total += raw(b, c)
		}
		b.ReportMetric(float64(b.N)*ceilingRows/total.Seconds(), "rows/s")
	})
	for _, transport := range []string{clickhouse.TransportNative, clickhouse.TransportHTTP} {
		b.Run("sink-"+transport, func(b *testing.B) {
			b.SetBytes(ceilingRows * ds.rowBytes())
			b.ReportAllocs()
			var total time.Duration
			for range b.N {
				d, _, _ := drainRun(b, cfgFor(transport), "ceiling", ds, ceilingRows, 1)
				total += d
			}
			b.ReportMetric(float64(b.N)*ceilingRows/total.Seconds(), "rows/s")
		})
	}
	// steady-allocs: one sink kept across ops, its block pool warm, as in a
	// long-running pipeline; only its allocation figures mean anything
	// (its time includes waiting out the last insert's linger).
	b.Run("steady-allocs-native", func(b *testing.B) {
		s := newSink(b, cfgFor(clickhouse.TransportNative))
		tbl, err := s.Table(context.Background(), "ceiling")
		if err != nil {
			b.Fatal(err)
		}
		pump(b, s, tbl, ds, ceilingRows, 1)
		b.SetBytes(ceilingRows * ds.rowBytes())
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			pump(b, s, tbl, ds, ceilingRows, 1)
		}
	})
	b.Run("interleaved", func(b *testing.B) {
		c := dialRaw(b, srv.Addr)
		defer c.Close()
		b.SetBytes(4 * ceilingRows * ds.rowBytes())
		one := cfgFor(clickhouse.TransportNative)
		one.InsertsPerShard = 1 // one connection, like the raw loop
		var r, n, n1, h, nr, n1r, hr []float64
		for range b.N {
			rawD := raw(b, c)
			natD, _, _ := drainRun(b, cfgFor(clickhouse.TransportNative), "ceiling", ds, ceilingRows, 1)
			nat1D, _, _ := drainRun(b, one, "ceiling", ds, ceilingRows, 1)
			httpD, _, _ := drainRun(b, cfgFor(clickhouse.TransportHTTP), "ceiling", ds, ceilingRows, 1)
			r, n, n1, h = append(r, rps(rawD)), append(n, rps(natD)), append(n1, rps(nat1D)), append(h, rps(httpD))
			nr = append(nr, 100*rawD.Seconds()/natD.Seconds())
			n1r = append(n1r, 100*rawD.Seconds()/nat1D.Seconds())
			hr = append(hr, 100*rawD.Seconds()/httpD.Seconds())
		}
		b.ReportMetric(median(r), "raw-rows/s")
		b.ReportMetric(median(n), "native-rows/s")
		b.ReportMetric(median(n1), "native1conn-rows/s")
		b.ReportMetric(median(h), "http-rows/s")
		b.ReportMetric(median(nr), "native-%raw")
		b.ReportMetric(median(n1r), "native1conn-%raw")
		b.ReportMetric(median(hr), "http-%raw")
	})
}

// BenchmarkRowPerInsert compares one INSERT per row (ch-go, one connection)
// with the sink's batches, into the same MergeTree table on the same
// server with the same rows, and reports rows/s and the server's CPU: ms of
// server CPU per 1,000 rows and cores used.
func BenchmarkRowPerInsert(b *testing.B) {
	srv := testinfra.ClickHouseT(b)
	execT(b, srv, "CREATE TABLE per_row ("+columns10+") ENGINE = MergeTree ORDER BY (ts, id)")
	ds := rowsData()
	report := func(b *testing.B, rows int, wall, cpu time.Duration) {
		b.ReportMetric(float64(rows)/wall.Seconds(), "rows/s")
		b.ReportMetric(float64(cpu.Milliseconds())*1000/float64(rows), "srv-cpu-ms/krow")
		b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "srv-cpu-%")
	}

	b.Run("one-row-per-insert", func(b *testing.B) {
		const rows = 300
		c := dialRaw(b, srv.Addr)
		defer c.Close()
		one := proto.Input{}
		b.SetBytes(rows * ds.rowBytes())
		b.ResetTimer()
		var wall, cpu time.Duration
		for range b.N {
			cpu0, t0 := serverCPU(b, srv), time.Now()
			for i := range rows {
				one = oneRow(ds, i, one)
				if err := c.Do(context.Background(), ch.Query{
					Body:  "INSERT INTO per_row (ts, id, user_id, host, path, status, latency, bytes, tags, msg) VALUES",
					Input: one,
				}); err != nil {
					b.Fatal(err)
				}
			}
			wall += time.Since(t0)
			cpu += serverCPU(b, srv) - cpu0
		}
		report(b, b.N*rows, wall, cpu)
	})
	b.Run("sink-batches", func(b *testing.B) {
		const rows = 500_000
		b.SetBytes(rows * ds.rowBytes())
		b.ReportAllocs()
		var wall, cpu time.Duration
		for range b.N {
			cpu0 := serverCPU(b, srv)
			d, _, _ := drainRun(b, clickhouse.Config{Addr: srv.Addr}, "per_row", ds, rows, 1)
			wall += d
			cpu += serverCPU(b, srv) - cpu0
		}
		report(b, b.N*rows, wall, cpu)
	})
}

// oneRow fills in with row i of ds as one-row columns.
func oneRow(ds *dataset, i int, in proto.Input) proto.Input {
	var (
		ts      proto.ColDateTime
		id      proto.ColUInt64
		user    proto.ColUInt64
		host    proto.ColStr
		path    proto.ColStr
		status  proto.ColUInt16
		latency proto.ColFloat64
		size    proto.ColUInt64
		tags    = proto.NewArray[string](new(proto.ColStr))
		msg     proto.ColStr
	)
	ts.Append(ds.ts.Row(i))
	id.Append(ds.id.Row(i))
	user.Append(ds.user.Row(i))
	host.Append(ds.host.Row(i))
	path.Append(ds.path.Row(i))
	status.Append(ds.status.Row(i))
	latency.Append(ds.latency.Row(i))
	size.Append(ds.size.Row(i))
	tags.Append(ds.tags.Row(i))
	msg.Append(ds.msg.Row(i))
	return proto.Input{
		{Name: "ts", Data: &ts}, {Name: "id", Data: &id}, {Name: "user_id", Data: &user},
		{Name: "host", Data: &host}, {Name: "path", Data: &path}, {Name: "status", Data: &status},
		{Name: "latency", Data: &latency}, {Name: "bytes", Data: &size}, {Name: "tags", Data: tags},
		{Name: "msg", Data: &msg},
	}
}

// BenchmarkDistributedVsDirect writes the same rows into a two-shard
// cluster of two local servers: through a Distributed table with
// synchronous inserts (insert_distributed_sync=1 in the profile), and
// straight into the shards' local tables by the sink (routing shards).
// "latency" sends one 1 MiB chunk at a time and waits for its ack (the
// insert's round trip); "throughput" saturates the sink.
func BenchmarkDistributedVsDirect(b *testing.B) {
	ports, err := testinfra.FreePorts(4)
	if err != nil {
		b.Fatal(err)
	}
	remote := fmt.Sprintf(`<two><shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>`+
		`<shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard></two>`, ports[0], ports[2])
	var servers []*testinfra.ClickHouse
	for i := range 2 {
		srv := testinfra.ClickHouseT(b, testinfra.ClickHouseOptions{TCPPort: ports[2*i], HTTPPort: ports[2*i+1],
			RemoteServers: remote, ProfileSettings: "<insert_distributed_sync>1</insert_distributed_sync>"})
		execT(b, srv, "CREATE TABLE events_local ("+columns10+") ENGINE = MergeTree ORDER BY (ts, id)")
		servers = append(servers, srv)
	}
	execT(b, servers[0], "CREATE TABLE events AS events_local ENGINE = Distributed(two, default, events_local, cityHash64(user_id))")
	ds := rowsData()
	for _, mode := range []struct{ name, routing string }{
		{"distributed-sync", clickhouse.RoutingDistributed},
		{"direct-to-local", clickhouse.RoutingShards},
	} {
		cfg := clickhouse.Config{Addr: servers[0].Addr, Routing: mode.routing}
		for _, size := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/latency-%dKiB", mode.name, size>>10), func(b *testing.B) {
				c := cfg
				c.InsertLinger = time.Millisecond
				c.ChunkBytes = 64 << 20 // pump seals each chunk by row count
				s := newSink(b, c)
				tbl, err := s.Table(context.Background(), "events")
				if err != nil {
					b.Fatal(err)
				}
				const chunks = 40
				rowsPerChunk := size / int(ds.rowBytes())
				b.SetBytes(int64(chunks*rowsPerChunk) * ds.rowBytes())
				b.ResetTimer()
				var all []time.Duration
				var wall time.Duration
				for range b.N {
					for range chunks {
						// One chunk in flight at a time: its ack latency is
						// the insert's round trip.
						d, lat := pump(b, s, tbl, ds, rowsPerChunk, 1)
						wall += d
						all = append(all, lat.d...)
					}
				}
				l := &latencies{d: all}
				b.ReportMetric(float64(b.N*chunks*rowsPerChunk)/wall.Seconds(), "rows/s")
				b.ReportMetric(float64(l.quantile(0.5).Microseconds())/1000, "ms/insert-p50")
				b.ReportMetric(float64(l.quantile(0.99).Microseconds())/1000, "ms/insert-p99")
			})
		}
		b.Run(mode.name+"/throughput", func(b *testing.B) {
			const rows = 1_000_000
			b.SetBytes(rows * ds.rowBytes())
			b.ReportAllocs()
			var wall time.Duration
			var lats []time.Duration
			for range b.N {
				d, lat, _ := drainRun(b, cfg, "events", ds, rows, 2)
				wall += d
				lats = append(lats, lat.d...)
			}
			l := &latencies{d: lats}
			b.ReportMetric(float64(b.N*rows)/wall.Seconds(), "rows/s")
			b.ReportMetric(float64(l.quantile(0.99).Microseconds())/1000, "ms/flush-p99")
		})
	}
}

// BenchmarkSinkSweep measures throughput and flush latency (Send to ack
// of a chunk) while four producers saturate the sink, over chunk_bytes
// (64 KiB … 4 MiB), queue_capacity (1 … 256), inserts_per_shard ×
// insert_linger and max_insert_bytes, into a MergeTree table, and prints
// markdown tables of the medians of three runs. Each run produces for
// 1 s + SWEEP_SECONDS (default 3) and counts only the acks after the
// first second. It ignores b.N: run it with -benchtime 1x (about 4 min).
func BenchmarkSinkSweep(b *testing.B) {
	measure := 3 * time.Second
	if v, err := strconv.Atoi(os.Getenv("SWEEP_SECONDS")); err == nil && v > 0 {
		measure = time.Duration(v) * time.Second
	}
	const runs, producers, warm = 3, 4, time.Second
	srv := testinfra.ClickHouseT(b)
	ds := rowsData()
	table := 0
	measureCfg := func(mod func(*clickhouse.Config)) (rps float64, p50, p99 time.Duration, inserts float64) {
		var rs, ins []float64
		var p50s, p99s []time.Duration
		for range runs {
			table++
			name := fmt.Sprintf("sweep_%d", table)
			execT(b, srv, "CREATE TABLE "+name+" ("+columns10+") ENGINE = MergeTree ORDER BY (ts, id)")
			cfg := clickhouse.Config{Addr: srv.Addr}
			mod(&cfg)
			s := newSinkNoCleanup(b, cfg)
			tbl, err := s.sink.Table(context.Background(), name)
			if err != nil {
				b.Fatal(err)
			}
			r, q50, q99 := pumpFor(b, s.sink, tbl, ds, producers, warm, measure)
			st := s.sink.Stats()
			s.close(b)
			rs, p50s, p99s = append(rs, r), append(p50s, q50), append(p99s, q99)
			ins = append(ins, float64(st.Inserts)/(warm+measure).Seconds())
			execT(b, srv, "DROP TABLE "+name)
		}
		return median(rs), median(p50s), median(p99s), median(ins)
	}
	row := func(sb *strings.Builder, label string, rps float64, p50, p99 time.Duration, inserts float64) {
		fmt.Fprintf(sb, "| %s | %.0f | %d | %d | %.1f |\n", label, rps, p50.Milliseconds(), p99.Milliseconds(), inserts)
	}
	header := "| %s | rows/s | flush p50 ms | flush p99 ms | inserts/s |\n|---|---|---|---|---|\n"
	for range b.N {
		var out strings.Builder
		fmt.Fprintf(&out, "\n%d producers, %s measured after %s, medians of %d runs, MergeTree, native; defaults unless stated\n\n",
			producers, measure, warm, runs)
		fmt.Fprintf(&out, header, "chunk_bytes")
		for _, kib := range []int{64, 256, 1024, 4096} {
			r, p50, p99, n := measureCfg(func(c *clickhouse.Config) { c.ChunkBytes = kib << 10 })
			row(&out, fmt.Sprintf("%d KiB", kib), r, p50, p99, n)
		}
		fmt.Fprintf(&out, "\n"+header, "queue_capacity")
		for _, q := range []int{1, 4, 8, 16, 64, 256} {
			r, p50, p99, n := measureCfg(func(c *clickhouse.Config) { c.QueueCapacity = q })
			row(&out, strconv.Itoa(q), r, p50, p99, n)
		}
		fmt.Fprintf(&out, "\n"+header, "inserts_per_shard × insert_linger")
		for _, ips := range []int{1, 2, 4} {
			for _, linger := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond} {
				r, p50, p99, n := measureCfg(func(c *clickhouse.Config) { c.InsertsPerShard, c.InsertLinger = ips, linger })
				row(&out, fmt.Sprintf("%d × %s", ips, linger), r, p50, p99, n)
			}
		}
		fmt.Fprintf(&out, "\n"+header, "max_insert_bytes")
		for _, mib := range []int{16, 64, 128} {
			r, p50, p99, n := measureCfg(func(c *clickhouse.Config) { c.MaxInsertBytes = mib << 20 })
			row(&out, fmt.Sprintf("%d MiB", mib), r, p50, p99, n)
		}
		fmt.Print(out.String())
	}
}

type runningSink struct {
	sink *clickhouse.Sink
	done chan error
}

func newSinkNoCleanup(b testing.TB, cfg clickhouse.Config) *runningSink {
	b.Helper()
	s, err := clickhouse.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	r := &runningSink{sink: s, done: make(chan error, 1)}
	go func() { r.done <- s.Run(context.Background()) }()
	return r
}

func (r *runningSink) close(b testing.TB) {
	r.sink.Close()
	if err := <-r.done; err != nil {
		b.Fatal(err)
	}
}
