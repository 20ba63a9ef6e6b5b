package clickhouse_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// testCluster is two local ClickHouse servers that know each other as the
// clusters:
//   - w12: shard 1 = a (weight 1), shard 2 = b (weight 2);
//   - w11: shard 1 = a, shard 2 = b, equal weights;
//   - rep: shard 1 = replicas [a port nobody listens on, a], shard 2 = b.
//
// Inserts through Distributed tables are synchronous
// (insert_distributed_sync=1 in the profile), so they can be compared at
// once.
type testCluster struct {
	a, b *testinfra.ClickHouse
	dead string // the address of rep's unreachable replica
}

func startCluster(t testing.TB) *testCluster {
	t.Helper()
	ports, err := testinfra.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	replica := func(port int) string {
		return fmt.Sprintf("<replica><host>127.0.0.1</host><port>%d</port></replica>", port)
	}
	a, b, dead := replica(ports[0]), replica(ports[2]), replica(ports[4])
	remote := fmt.Sprintf(`
<w12><shard><weight>1</weight>%[1]s</shard><shard><weight>2</weight>%[2]s</shard></w12>
<w11><shard>%[1]s</shard><shard>%[2]s</shard></w11>
<rep><shard>%[3]s%[1]s</shard><shard>%[2]s</shard></rep>`, a, b, dead)
	opts := func(tcp, http int) testinfra.ClickHouseOptions {
		return testinfra.ClickHouseOptions{TCPPort: tcp, HTTPPort: http, RemoteServers: remote,
			ProfileSettings: "<insert_distributed_sync>1</insert_distributed_sync>"}
	}
	c := &testCluster{dead: fmt.Sprintf("127.0.0.1:%d", ports[4])}
	c.a = testinfra.ClickHouseT(t, opts(ports[0], ports[1]))
	c.b = testinfra.ClickHouseT(t, opts(ports[2], ports[3]))
	return c
}

func (c *testCluster) both(t testing.TB, sql string) {
	t.Helper()
	for _, s := range []*testinfra.ClickHouse{c.a, c.b} {
		if err := s.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", s.Addr, err)
		}
	}
}

// sinkConfig is a sink config for the cluster over transport, reading the
// cluster and Distributed tables from server a.
func (c *testCluster) sinkConfig(transport, routing string) clickhouse.Config {
	return clickhouse.Config{
		Transport: transport, Addr: c.a.Addr, HTTPAddr: c.a.HTTPAddr, Routing: routing,
		InsertLinger: 20 * time.Millisecond, ChunkLinger: 20 * time.Millisecond,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, ConnectTimeout: 2 * time.Second,
		Cluster: clickhouse.ClusterConfig{HTTPAddrs: map[string]string{c.a.Addr: c.a.HTTPAddr, c.b.Addr: c.b.HTTPAddr}},
	}
}

const routedColumns = "id UInt64, tags Array(String), s String, n Int64, u UInt32, i8 Int8, u8 UInt8, d Date, lc LowCardinality(String)"

// routedRow encodes a row of routedColumns in RowBinary.
func routedRow(rng *rand.Rand, id uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, id)
	tags := rng.IntN(3)
	b = binary.AppendUvarint(b, uint64(tags))
	for range tags {
		b = appendStr(b, strings.Repeat("t", rng.IntN(5)))
	}
	s := strconv.FormatUint(rng.Uint64(), 36)
	b = appendStr(b, s[:rng.IntN(len(s)+1)])
	b = binary.LittleEndian.AppendUint64(b, uint64(rng.Int64()-rng.Int64()))
	b = binary.LittleEndian.AppendUint32(b, rng.Uint32())
	b = append(b, byte(rng.IntN(256)))
	b = append(b, byte(rng.IntN(256)))
	b = binary.LittleEndian.AppendUint16(b, uint16(rng.IntN(30000)))
	return appendStr(b, []string{"GET", "PUT", "POST"}[rng.IntN(3)])
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// sendRows sends rows in chunks of chunkRows and waits until every chunk
// is acked.
func sendRows(t testing.TB, s *clickhouse.Sink, table *clickhouse.Table, rows [][]byte, chunkRows int) {
	t.Helper()
	ctx := context.Background()
	var acked atomic.Int64
	chunks := 0
	for start := 0; start < len(rows); start += chunkRows {
		b := s.NewBlock(table)
		for _, r := range rows[start:min(start+chunkRows, len(rows))] {
			if err := b.AppendRow(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{countAck{&acked}})); err != nil {
			t.Fatal(err)
		}
		chunks++
	}
	waitFor(t, func() bool { return acked.Load() == int64(chunks) }, 30*time.Second, "acks")
}

func queryT(t testing.TB, ch *testinfra.ClickHouse, sql string) string {
	t.Helper()
	out, err := ch.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

func runSink(t testing.TB, s *clickhouse.Sink) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; err != nil {
			t.Errorf("sink Run: %v", err)
		}
	})
}

// TestShardRoutingMatchesDistributed writes the same rows twice: straight
// into the shards' local tables by the sink (routing shards), and through
// a Distributed table with the same sharding key by the server (routing
// distributed, synchronous). On each shard both local tables must hold
// exactly the same rows, for every supported kind of key and for weights
// 1:2 and 1:1, over both transports.
func TestShardRoutingMatchesDistributed(t *testing.T) {
	c := startCluster(t)
	keys := []struct{ name, expr string }{
		{"city_string", "cityHash64(s)"},
		{"city_int64", "cityHash64(n)"},
		{"city_uint8", "cityHash64(u8)"},
		{"city_date", "cityHash64(d)"},
		{"bare_uint32", "u"},
		{"bare_int8", "i8"},
		{"bare_uint64_id", "id"},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]byte, 3000)
	for i := range rows {
		rows[i] = routedRow(rng, uint64(i))
	}
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			direct, err := clickhouse.New(context.Background(), c.sinkConfig(transport, clickhouse.RoutingShards), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			runSink(t, direct)
			via, err := clickhouse.New(context.Background(), c.sinkConfig(transport, clickhouse.RoutingDistributed), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			runSink(t, via)
			for _, cluster := range []string{"w12", "w11"} {
				for _, key := range keys {
					if cluster == "w11" && key.name != "city_string" && key.name != "bare_int8" {
						continue
					}
					name := fmt.Sprintf("%s_%s_%s", transport, cluster, key.name)
					t.Run(cluster+"/"+key.name, func(t *testing.T) {
						c.both(t, fmt.Sprintf("CREATE TABLE %s_direct (%s) ENGINE = MergeTree ORDER BY id", name, routedColumns))
						c.both(t, fmt.Sprintf("CREATE TABLE %s_via (%s) ENGINE = MergeTree ORDER BY id", name, routedColumns))
						if err := c.a.Exec(context.Background(), fmt.Sprintf(
							"CREATE TABLE %[1]s_dd AS %[1]s_direct ENGINE = Distributed(%[2]s, default, %[1]s_direct, %[3]s)", name, cluster, key.expr)); err != nil {
							t.Fatal(err)
						}
						if err := c.a.Exec(context.Background(), fmt.Sprintf(
							"CREATE TABLE %[1]s_dv AS %[1]s_via ENGINE = Distributed(%[2]s, default, %[1]s_via, %[3]s)", name, cluster, key.expr)); err != nil {
							t.Fatal(err)
						}
						dt, err := direct.Table(context.Background(), name+"_dd")
						if err != nil {
							t.Fatal(err)
						}
						if dt.Shards() != 2 || clickhouse.InsertTable(dt) != "default."+name+"_direct" {
							t.Fatalf("routing: %d shards into %s", dt.Shards(), clickhouse.InsertTable(dt))
						}
						vt, err := via.Table(context.Background(), name+"_dv")
						if err != nil {
							t.Fatal(err)
						}
						sendRows(t, direct, dt, rows, 700)
						sendRows(t, via, vt, rows, 700)
						var onA int
						for i, srv := range []*testinfra.ClickHouse{c.a, c.b} {
							got := queryT(t, srv, fmt.Sprintf("SELECT count(), sum(cityHash64(id, tags, s, n, u, i8, u8, d, lc)) FROM %s_direct", name))
							want := queryT(t, srv, fmt.Sprintf("SELECT count(), sum(cityHash64(id, tags, s, n, u, i8, u8, d, lc)) FROM %s_via", name))
							if got != want {
								t.Errorf("shard %d: direct-to-local has (count, checksum) %s, the Distributed table put %s", i+1, got, want)
							}
							if i == 0 {
								onA, _ = strconv.Atoi(strings.Fields(got)[0])
							}
						}
						total := queryT(t, c.a, fmt.Sprintf("SELECT count() FROM %s_dd", name))
						if total != "3000" {
							t.Errorf("%s rows through the Distributed table's view, want 3000", total)
						}
						// Weights 1:2 put about a third of the rows on shard 1.
						lo, hi := 850, 1150
						if cluster == "w11" {
							lo, hi = 1350, 1650
						}
						if onA < lo || onA > hi {
							t.Errorf("shard 1 has %d of 3000 rows; want %d..%d for %s", onA, lo, hi, cluster)
						}
					})
				}
			}
			// rand(): the shard choice cannot be compared row by row; the
			// split must follow the weights and nothing may be lost.
			t.Run("w12/rand", func(t *testing.T) {
				name := transport + "_w12_rand"
				c.both(t, fmt.Sprintf("CREATE TABLE %s_direct (%s) ENGINE = MergeTree ORDER BY id", name, routedColumns))
				if err := c.a.Exec(context.Background(), fmt.Sprintf(
					"CREATE TABLE %[1]s_dd AS %[1]s_direct ENGINE = Distributed(w12, default, %[1]s_direct, rand())", name)); err != nil {
					t.Fatal(err)
				}
				dt, err := direct.Table(context.Background(), name+"_dd")
				if err != nil {
					t.Fatal(err)
				}
				sendRows(t, direct, dt, rows, 500)
				onA, _ := strconv.Atoi(queryT(t, c.a, "SELECT count() FROM "+name+"_direct"))
				onB, _ := strconv.Atoi(queryT(t, c.b, "SELECT count() FROM "+name+"_direct"))
				if onA+onB != 3000 || onA < 850 || onA > 1150 {
					t.Errorf("rand() with weights 1:2: %d + %d rows", onA, onB)
				}
				if u := queryT(t, c.a, "SELECT uniqExact(id) FROM "+name+"_dd"); u != "3000" {
					t.Errorf("%s distinct ids, want 3000", u)
				}
			})
		})
	}
}

// TestShardRoutingRejects checks the startup errors of routing shards.
func TestShardRoutingRejects(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	c.both(t, "CREATE TABLE loc (id UInt64, s String, f Float64) ENGINE = MergeTree ORDER BY id")
	if err := c.b.Exec(ctx, "CREATE TABLE drifted (id UInt64, s String, f Float32) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"CREATE TABLE by_float AS loc ENGINE = Distributed(w12, default, loc, cityHash64(f))",
		"CREATE TABLE by_expr AS loc ENGINE = Distributed(w12, default, loc, id % 7)",
		"CREATE TABLE no_local AS loc ENGINE = Distributed(w12, default, missing, id)",
		"CREATE TABLE drifted (id UInt64, s String, f Float64) ENGINE = MergeTree ORDER BY id",
		"CREATE TABLE by_drifted AS loc ENGINE = Distributed(w12, default, drifted, id)",
	} {
		if err := c.a.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	s, err := clickhouse.New(ctx, c.sinkConfig("native", clickhouse.RoutingShards), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for table, want := range map[string]string{
		"loc":        "needs a Distributed table, not MergeTree",
		"by_float":   "column type Float64",
		"by_expr":    "not a single column",
		"no_local":   "local table default.missing on shard 1 of cluster w12",
		"by_drifted": "column f is Float32",
	} {
		_, err := s.Table(ctx, table)
		var perm *clickhouse.PermanentError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want a PermanentError with %q", table, err, want)
		}
	}
	d, err := clickhouse.New(ctx, c.sinkConfig("http", clickhouse.RoutingDistributed), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Table(ctx, "loc"); err == nil || !strings.Contains(err.Error(), "routing distributed needs a Distributed table") {
		t.Errorf("routing distributed into a MergeTree: %v", err)
	}
}

// TestReplicaRotationAndNoReroute uses cluster rep, whose shard 1 lists an
// unreachable replica first: the sink must move to shard 1's other replica
// and open the dead one's breaker. Then shard 2's only server stops: its
// rows must wait for it, never go to shard 1, and arrive once it is back.
func TestReplicaRotationAndNoReroute(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	for _, transport := range transports {
		t.Run(transport, func(t *testing.T) {
			name := "rot_" + transport
			c.both(t, fmt.Sprintf("CREATE TABLE %s (%s) ENGINE = MergeTree ORDER BY id", name, routedColumns))
			if err := c.a.Exec(ctx, fmt.Sprintf("CREATE TABLE %[1]s_d AS %[1]s ENGINE = Distributed(rep, default, %[1]s, cityHash64(s))", name)); err != nil {
				t.Fatal(err)
			}
			cfg := c.sinkConfig(transport, clickhouse.RoutingShards)
			cfg.Cluster.BreakerFailures = 1
			cfg.Cluster.BreakerCooldown = time.Hour
			cfg.InsertsPerShard = 1
			cfg.Cluster.HTTPAddrs[c.dead] = c.dead
			s, err := clickhouse.New(ctx, cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			runSink(t, s)
			tbl, err := s.Table(ctx, name+"_d")
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, 4))
			rows := make([][]byte, 2000)
			for i := range rows {
				rows[i] = routedRow(rng, uint64(i))
			}
			sendRows(t, s, tbl, rows[:1000], 250)
			st := s.Stats()
			if st.BreakerOpens != 1 || st.Shards[0].OpenBreakers != 1 || st.Shards[0].Replica != c.a.Addr {
				t.Errorf("after the dead replica: %+v", st)
			}
			// Each server holds exactly its shard's rows: equal weights, so
			// shard 1 gets cityHash64(s) % 2 = 0.
			checkShards := func(want int) {
				t.Helper()
				onA := queryT(t, c.a, fmt.Sprintf("SELECT count(), countIf(cityHash64(s) %% 2 != 0) FROM %s", name))
				onB := queryT(t, c.b, fmt.Sprintf("SELECT count(), countIf(cityHash64(s) %% 2 != 1) FROM %s", name))
				a, _ := strconv.Atoi(strings.Fields(onA)[0])
				b, _ := strconv.Atoi(strings.Fields(onB)[0])
				if strings.Fields(onA)[1] != "0" || strings.Fields(onB)[1] != "0" || a+b != want {
					t.Errorf("shard 1 (count, misrouted) = %s, shard 2 = %s; want %d rows", onA, onB, want)
				}
			}
			checkShards(1000)

			// Shard 2 goes away; shard 1 keeps taking its rows.
			if err := c.b.Stop(); err != nil {
				t.Fatal(err)
			}
			var acked atomic.Int64
			b := s.NewBlock(tbl)
			for _, r := range rows[1000:] {
				if err := b.AppendRow(r); err != nil {
					t.Fatal(err)
				}
			}
			shard1Rows := clickhouse.PartRows(b)[0]
			before, _ := strconv.Atoi(queryT(t, c.a, "SELECT count() FROM "+name))
			if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{countAck{&acked}})); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool {
				n, _ := strconv.Atoi(queryT(t, c.a, "SELECT count() FROM "+name))
				return n == before+shard1Rows
			}, 10*time.Second, "shard 1's rows")
			time.Sleep(time.Second)
			if acked.Load() != 0 {
				t.Error("the chunk was acked while shard 2 had not inserted its part")
			}
			if n, _ := strconv.Atoi(queryT(t, c.a, "SELECT count() FROM "+name)); n != before+shard1Rows {
				t.Errorf("shard 1 has %d rows, want %d: shard 2's rows were rerouted", n, before+shard1Rows)
			}
			if err := c.b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return acked.Load() == 1 }, 30*time.Second, "the chunk's ack after shard 2 came back")
			checkShards(2000)
		})
	}
}
