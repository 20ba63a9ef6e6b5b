package testinfra

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestClickHouse(t *testing.T) {
	t.Parallel()
	EachServer(t, testClickHouse)
}

func testClickHouse(t *testing.T, server Server) {
	start := time.Now()
	c := ClickHouseT(t, ClickHouseOptions{Server: server})
	t.Logf("ClickHouse %s ready in %v (tcp %s, http %s)", c.Version, time.Since(start).Round(time.Millisecond), c.Addr, c.HTTPAddr)
	if c.Server != server || c.Version.Major != map[Server]int{Legacy: 18, Modern: 26}[server] {
		t.Fatalf("asked for %s, got server %s version %s", server, c.Server, c.Version)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	version, err := c.Query(ctx, "SELECT version()")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server version %s", strings.TrimSpace(version))

	for _, q := range []string{
		"CREATE TABLE events (id UInt64, name LowCardinality(String), at DateTime) ENGINE = MergeTree ORDER BY id",
		"INSERT INTO events SELECT number, concat('n', toString(number % 7)), toDateTime(1700000000 + number) FROM system.numbers LIMIT 1000",
	} {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Insert(ctx, "INSERT INTO events FORMAT TabSeparated",
		strings.NewReader("1000\tx\t2023-11-14 22:13:20\n1001\ty\t2023-11-14 22:13:21\n")); err != nil {
		t.Fatal(err)
	}
	const want = "1002\t1001\t9\n" // names n0…n6, x, y
	check := func(when string) {
		t.Helper()
		got, err := c.Query(ctx, "SELECT count(), max(id), uniqExact(name) FROM events")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got != want {
			t.Fatalf("%s: got %q, want %q", when, got, want)
		}
	}
	check("before restart")

	// The server's own process, which has done the work above.
	if cpu, err := CPUTime(c.PID()); err != nil || cpu <= 0 {
		t.Fatalf("CPUTime(PID %d) = %v, %v; want the server's CPU time", c.PID(), cpu, err)
	}

	// A server error carries the server's message.
	_, err = c.Query(ctx, "SELECT * FROM no_such_table")
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("query of a missing table: err = %v, want the server's message", err)
	}

	stop := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("ClickHouse stopped in %v", time.Since(stop).Round(time.Millisecond))
	if pid := c.PID(); pid != 0 {
		t.Errorf("PID of a stopped server: %d", pid)
	}
	if _, err := c.Query(ctx, "SELECT 1"); err == nil {
		t.Fatal("query succeeded on a stopped server")
	}
	restart := time.Now()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("ClickHouse restarted in %v", time.Since(restart).Round(time.Millisecond))
	check("after restart")
	if err := c.Start(ctx); err == nil {
		t.Fatal("Start on a running server succeeded")
	}

	// A crash (SIGKILL) keeps the inserted data too.
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check("after kill and restart")
}

func TestClickHouseRemoteServers(t *testing.T) {
	t.Parallel()
	EachServer(t, testClickHouseRemoteServers)
}

func testClickHouseRemoteServers(t *testing.T, server Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shard2 := ClickHouseT(t, ClickHouseOptions{Server: server})
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	cluster := fmt.Sprintf(`<two_shards>
  <shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>
  <shard><replica><host>127.0.0.1</host><port>%d</port></replica></shard>
</two_shards>`, ports[0], shard2.TCPPort)
	shard1 := ClickHouseT(t, ClickHouseOptions{Server: server, TCPPort: ports[0], HTTPPort: ports[1], RemoteServers: cluster})
	for _, c := range []*ClickHouse{shard1, shard2} {
		if err := c.Exec(ctx, "CREATE TABLE local (id UInt64) ENGINE = MergeTree ORDER BY id"); err != nil {
			t.Fatal(err)
		}
	}
	if err := shard1.Exec(ctx, "CREATE TABLE dist AS local ENGINE = Distributed(two_shards, default, local, id)"); err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO dist SELECT number FROM system.numbers LIMIT 100"
	if server == Modern {
		// Under clickhouse-local an asynchronous insert into a Distributed
		// table did not reach the shards in 2 minutes; a synchronous one does.
		insert += " SETTINGS insert_distributed_sync = 1"
	}
	if err := shard1.Exec(ctx, insert); err != nil {
		t.Fatal(err)
	}
	// Distributed inserts are asynchronous on 18.16; wait for both shards.
	for {
		a, err1 := shard1.Query(ctx, "SELECT count() FROM local")
		b, err2 := shard2.Query(ctx, "SELECT count() FROM local")
		total, err3 := shard1.Query(ctx, "SELECT count() FROM dist")
		if err := errors.Join(err1, err2, err3); err != nil {
			t.Fatal(err)
		}
		if a == "50\n" && b == "50\n" && total == "100\n" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("shard counts %q + %q (dist %q), want 50 + 50", a, b, total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestKafka(t *testing.T) {
	t.Parallel()
	start := time.Now()
	k := KafkaT(t)
	t.Logf("Kafka ready in %v (%s)", time.Since(start).Round(time.Millisecond), k.Addr)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topic, n = "events", 100
	if err := k.CreateTopic(ctx, topic, 4); err != nil {
		t.Fatal(err)
	}
	if err := k.CreateTopic(ctx, topic, 4); err == nil {
		t.Fatal("creating an existing topic succeeded")
	}

	prod, err := k.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value-%03d", i)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	prod.Close()

	consumeAll := func(when string) {
		t.Helper()
		cl, err := k.NewClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		seen := map[string]string{}
		partitions := map[int32]bool{}
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for len(seen) < n {
			fs := cl.PollFetches(cctx)
			if cctx.Err() != nil {
				t.Fatalf("%s: consumed %d of %d records: %v", when, len(seen), n, cctx.Err())
			}
			fs.EachError(func(topic string, p int32, err error) {
				t.Fatalf("%s: fetch %s/%d: %v", when, topic, p, err)
			})
			fs.EachRecord(func(r *kgo.Record) {
				if prev, dup := seen[string(r.Key)]; dup {
					t.Fatalf("%s: duplicate key %s (%s, %s)", when, r.Key, prev, r.Value)
				}
				seen[string(r.Key)] = string(r.Value)
				partitions[r.Partition] = true
			})
		}
		for i := range n {
			if got, want := seen[fmt.Sprintf("k%d", i)], fmt.Sprintf("value-%03d", i); got != want {
				t.Fatalf("%s: record k%d = %q, want %q", when, i, got, want)
			}
		}
		if len(partitions) != 4 {
			t.Fatalf("%s: records came from %d partitions, want 4", when, len(partitions))
		}
	}
	consumeAll("before restart")

	stop := time.Now()
	if err := k.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Kafka stopped in %v", time.Since(stop).Round(time.Millisecond))
	restart := time.Now()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("Kafka restarted in %v", time.Since(restart).Round(time.Millisecond))
	consumeAll("after restart")

	// Auto-created topics get KafkaOptions.Partitions (default 4).
	auto, err := k.NewClient(kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	r := auto.ProduceSync(ctx, &kgo.Record{Topic: "auto-created", Value: []byte("x")})
	if err := r.FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestClickHouseStartFailureShowsLog(t *testing.T) {
	t.Parallel()
	EachServer(t, func(t *testing.T, server Server) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := StartClickHouse(ctx, ClickHouseOptions{Server: server, ExtraConfig: "<this is not xml"})
		if err == nil {
			t.Fatal("a broken config started")
		}
		t.Logf("error (expected): %v", err)
		if !strings.Contains(err.Error(), "tail of") || !strings.Contains(err.Error(), "SAXParseException") {
			t.Fatalf("error has no log tail: %v", err)
		}
	})
}

// TestClickHousePortInUse: a server whose port is taken fails to start
// with an error that says so, instead of answering on someone else's port.
func TestClickHousePortInUse(t *testing.T) {
	SkipShort(t)
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = StartClickHouse(ctx, ClickHouseOptions{Server: Modern, TCPPort: busy.Addr().(*net.TCPAddr).Port})
	if err == nil {
		t.Fatal("ClickHouse 26.9 started on a port in use")
	}
	t.Logf("error (expected): %v", err)
	if !strings.Contains(err.Error(), "before answering") || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("error does not report the early exit and the log: %v", err)
	}
}

// TestModernCapabilities checks what the 26.9 server reports and that its
// query log shows the settings a query carried.
func TestModernCapabilities(t *testing.T) {
	t.Parallel()
	c := ClickHouseT(t, ClickHouseOptions{Server: Modern, ProfileSettings: "<max_threads>3</max_threads>"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	caps := c.Capabilities()
	if !caps.QuerySettings || !caps.DedupToken || !caps.AsyncInsert || !caps.QueryLog ||
		!c.HasType("DateTime64") || !c.HasType("Map") || !c.HasType("JSON") || !c.HasType("Int256") {
		t.Fatalf("26.9 capabilities: %+v", caps)
	}
	// The build's defaults differ from a packaged server's: async inserts on.
	if got, err := c.Query(ctx, "SELECT getSetting('async_insert'), getSetting('max_threads'), timezone()"); err != nil || got != "true\t3\tEtc/UTC\n" {
		t.Fatalf("settings = %q, %v; want async_insert on, the profile's max_threads 3, time zone UTC", got, err)
	}
	if err := c.Exec(ctx, "SELECT 42 AS answer SETTINGS log_comment = 'probe', max_threads = 1"); err != nil {
		t.Fatal(err)
	}
	got, err := c.QueryLogged(ctx, "SELECT Settings['max_threads'] FROM system.query_log WHERE log_comment = 'probe' AND type = 'QueryFinish'",
		func(out string) bool { return out != "" })
	if err != nil || got != "1\n" {
		t.Fatalf("query_log Settings['max_threads'] = %q, %v; want 1", got, err)
	}
	// An entry that never comes: QueryLogged gives up when its context ends.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if _, err := c.QueryLogged(short, "SELECT count() FROM system.query_log WHERE log_comment = 'never'",
		func(out string) bool { return out != "0\n" }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("QueryLogged of an entry that never comes: %v, want the context's deadline", err)
	}
}

func TestLegacyCapabilities(t *testing.T) {
	t.Parallel()
	c := ClickHouseT(t, ClickHouseOptions{Server: Legacy})
	caps := c.Capabilities()
	if caps.QuerySettings || caps.DedupToken || caps.AsyncInsert || caps.QueryLog || len(caps.Types) != 0 {
		t.Fatalf("18.16 capabilities: %+v", caps)
	}
}

func TestKafkaStartFailure(t *testing.T) {
	SkipShort(t)
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = StartKafka(ctx, KafkaOptions{Port: busy.Addr().(*net.TCPAddr).Port})
	if err == nil {
		t.Fatal("Kafka started on a port in use")
	}
	t.Logf("error (expected): %v", err)
	if !strings.Contains(err.Error(), "before answering") || !strings.Contains(err.Error(), "tail of") {
		t.Fatalf("error does not report the early exit and the log: %v", err)
	}
}

// TestClickHouseKafkaEngine checks that the two services work together and
// that the generated config makes ClickHouse's Kafka engine read a new
// consumer group from the earliest offset (18.16 defaults to the latest).
func TestClickHouseKafkaEngine(t *testing.T) {
	t.Parallel()
	k := KafkaT(t)
	EachServer(t, func(t *testing.T, server Server) { testClickHouseKafkaEngine(t, server, k) })
}

func testClickHouseKafkaEngine(t *testing.T, server Server, k *Kafka) {
	c := ClickHouseT(t, ClickHouseOptions{Server: server})
	topic := "in-" + strings.ReplaceAll(string(server), ".", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if err := k.CreateTopic(ctx, topic, 2); err != nil {
		t.Fatal(err)
	}
	prod, err := k.NewClient(kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 10 {
		// Produced before ClickHouse's consumer group exists.
		if err := prod.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, `{"id":%d,"s":"v%d"}`, i, i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		"CREATE TABLE queue (id UInt64, s String) ENGINE = Kafka('" + k.Addr + "', '" + topic + "', 'ch', 'JSONEachRow')",
		"CREATE TABLE dst (id UInt64, s String) ENGINE = MergeTree ORDER BY id",
		"CREATE MATERIALIZED VIEW mv TO dst AS SELECT id, s FROM queue",
	} {
		if err := c.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for {
		got, err := c.Query(ctx, "SELECT count(), sum(id), max(s) FROM dst")
		if err != nil {
			t.Fatal(err)
		}
		if got == "10\t45\tv9\n" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("ClickHouse consumed %q, want 10 rows", got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestQueryLogOfInserts: with QueryLogConfig the server logs every query,
// InsertsInto picks the inserts into one table and not those into a table
// whose name starts with it, bare or quoted, and EventSum sums their
// ProfileEvents. On both servers.
func TestQueryLogOfInserts(t *testing.T) {
	EachServer(t, func(t *testing.T, server Server) {
		opts := ClickHouseOptions{Server: server}
		opts.ExtraConfig, opts.ProfileSettings = QueryLogConfig(server, 200*time.Millisecond)
		c := ClickHouseT(t, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, sql := range []string{
			"CREATE TABLE t (x UInt32) ENGINE = MergeTree ORDER BY x",
			"CREATE TABLE t_more (x UInt32) ENGINE = MergeTree ORDER BY x",
			"INSERT INTO t VALUES (1), (2)",
			"INSERT INTO `default`.`t` (x) VALUES (3)",
			"INSERT INTO t_more VALUES (4), (5), (6), (7)",
			"INSERT INTO default.t_more (x) VALUES (8)",
		} {
			if err := c.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		for table, want := range map[string]string{"t": "2\t3\t3\n", "t_more": "2\t5\t5\n"} {
			got, err := c.QueryLogged(ctx, fmt.Sprintf("SELECT count(), sum(written_rows), sum(%s) FROM system.query_log WHERE %s FORMAT TSV",
				c.EventSum("InsertedRows"), c.InsertsInto(table)), func(out string) bool { return out == want })
			if err != nil {
				t.Fatalf("the inserts into %s (count, rows, InsertedRows) = %q, want %q: %v", table, got, want, err)
			}
		}
	})
}
