package clickhouse_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestRetriedInsertDeduplicated makes an insert's outcome unknown to the
// sink: the server writes the rows, but the proxy swallows its answer and
// then drops the connection, so the sink retries the insert unchanged.
//
// On 26.9, into a MergeTree with non_replicated_deduplication_window, the
// retry carries the same insert_deduplication_token and the server drops it:
// the rows are there once, and system.query_log shows both INSERTs with the
// token, async_insert=0, and the second one's deduplicated block. On 18.16,
// which has neither the token nor the table setting, the documented
// behaviour is at least once: the retry leaves every row twice.
func TestRetriedInsertDeduplicated(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		for _, tr := range transports {
			t.Run(tr, func(t *testing.T) { testRetriedInsertDeduplicated(t, ch, tr) })
		}
	})
}

func testRetriedInsertDeduplicated(t *testing.T, ch *testinfra.ClickHouse, transport string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dedup := ch.Capabilities().DedupToken
	table := "retried_" + transport
	ddl := fmt.Sprintf("CREATE TABLE %s (id UInt64, payload String) ENGINE = MergeTree ORDER BY id", table)
	if dedup {
		ddl += " SETTINGS non_replicated_deduplication_window = 100"
	}
	if err := ch.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	target := ch.Addr
	if transport == clickhouse.TransportHTTP {
		target = ch.HTTPAddr
	}
	proxy, err := testinfra.StartProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	s := newSink(t, ch, transport, func(c *clickhouse.Config) {
		c.Addr, c.HTTPAddr = proxy.Addr, proxy.Addr
		c.RetryMin, c.RetryMax = 50*time.Millisecond, 500*time.Millisecond
	})
	var (
		mu     sync.Mutex
		events []string
	)
	s.OnInsert(func(e *clickhouse.InsertEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, fmt.Sprintf("attempt %d: %d rows, err %v", e.Attempt, e.Rows, e.Err))
	})
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	tbl, err := s.Table(ctx, table)
	if err != nil {
		t.Fatal(err)
	}

	// Random payloads, so that compression leaves the insert far larger
	// than the proxy's threshold; the handshake and metadata queries stay
	// far below it.
	const rows = 20000
	b := s.NewBlock(tbl)
	payload := make([]byte, 16)
	for id := range uint64(rows) {
		_, _ = rand.Read(payload)
		row := binary.LittleEndian.AppendUint64(nil, id)
		if err := b.AppendRow(appendStr(row, hex.EncodeToString(payload))); err != nil {
			t.Fatal(err)
		}
	}
	proxy.SwallowResponsesAfter(64 << 10)
	var acked atomic.Int64
	if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{
		offsetAck{n: &acked, first: 1000, last: 1000 + rows - 1}})); err != nil {
		t.Fatal(err)
	}
	// The server has the rows; the sink has not heard.
	waitFor(t, func() bool { return queryT(t, ch, "SELECT count() FROM "+table) == fmt.Sprint(rows) }, time.Minute,
		"the first attempt's rows")
	if acked.Load() != 0 {
		t.Fatal("the chunk was acked although the server's answer was swallowed")
	}
	proxy.SwallowResponsesAfter(0)
	proxy.DropConnections()
	waitFor(t, func() bool { return acked.Load() == 1 }, time.Minute, "the retried insert's ack")
	s.Close()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("insert attempts: %s", strings.Join(events, "; "))
	mu.Unlock()

	got := queryT(t, ch, "SELECT count(), uniqExact(id) FROM "+table)
	want := fmt.Sprintf("%d\t%d", rows, rows) // deduplicated
	if !dedup {
		want = fmt.Sprintf("%d\t%d", 2*rows, rows) // at least once: every row twice
	}
	if got != want {
		t.Fatalf("ClickHouse %s: (count, uniqExact) = %q, want %q", ch.Version, got, want)
	}
	t.Logf("ClickHouse %s: %d rows sent, table has (count, uniqExact) = %s", ch.Version, rows, got)
	if !ch.Capabilities().QueryLog {
		return
	}
	// Both attempts' entries, however long the server takes to log them
	// (a minute bounds a server that never does).
	logCtx, logCancel := context.WithTimeout(context.Background(), time.Minute)
	defer logCancel()
	log, err := ch.QueryLogged(logCtx, fmt.Sprintf(`SELECT Settings['insert_deduplication_token'], Settings['async_insert'],
		written_rows, ProfileEvents['DuplicatedInsertedBlocks']
		FROM system.query_log
		WHERE type = 'QueryFinish' AND query_kind = 'Insert' AND has(tables, 'default.%s')
		ORDER BY event_time_microseconds`, table), func(out string) bool { return strings.Count(out, "\n") >= 2 })
	if err != nil {
		t.Fatalf("query_log's entries of the first attempt and its retry: %v", err)
	}
	log = strings.TrimSpace(log)
	t.Logf("system.query_log (token, async_insert, written_rows, DuplicatedInsertedBlocks):\n%s", log)
	lines := strings.Split(log, "\n")
	if len(lines) != 2 {
		t.Fatalf("query_log has %d finished INSERTs into %s, want the first attempt and its retry", len(lines), table)
	}
	first, retry := strings.Split(lines[0], "\t"), strings.Split(lines[1], "\t")
	if !strings.HasPrefix(first[0], "sluice-") || retry[0] != first[0] {
		t.Errorf("tokens %q and %q: want one sluice token on both attempts", first[0], retry[0])
	}
	if first[1] != "0" || retry[1] != "0" {
		t.Errorf("async_insert %q, %q: want 0 on both attempts", first[1], retry[1])
	}
	if first[2] != fmt.Sprint(rows) || first[3] != "0" || retry[3] == "0" {
		t.Errorf("first attempt wrote %s rows with %s duplicate blocks, retry %s duplicate blocks: want %d, 0, > 0",
			first[2], first[3], retry[3], rows)
	}
}
