package clickhouse_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// tableServer is a fake ClickHouse HTTP interface whose tables each have
// one UInt64 column "id". An insert into a table named in broken fails
// with UNKNOWN_TABLE (permanent); while down is set every insert fails
// with a retryable error. It counts the rows that landed per table.
type tableServer struct {
	mu     sync.Mutex
	broken map[string]bool
	down   bool
	landed map[string]int
	// inserts counts the inserts that landed.
	inserts int
	addr    string // host:port, for tests that need it before a sink
}

func (f *tableServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	sql := r.URL.Query().Get("query")
	if sql == "" {
		sql = string(body)
	}
	switch {
	case strings.HasPrefix(sql, "SELECT version()"):
		io.WriteString(w, "24.8.1.1\n")
	case strings.Contains(sql, "system.settings"):
		io.WriteString(w, "0\n")
	case strings.HasPrefix(sql, "SELECT engine, engine_full FROM system.tables"):
		io.WriteString(w, "MergeTree\tMergeTree ORDER BY id\n")
	case strings.HasPrefix(sql, "DESCRIBE TABLE"):
		io.WriteString(w, "id\tUInt64\t\t\t\t\t\n")
	case strings.HasPrefix(sql, "INSERT INTO"):
		table := strings.NewReplacer("`", "", `"`, "").Replace(strings.Fields(sql)[2])
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.down:
			http.Error(w, "Code: 999. DB::Exception: Coordination::Exception: Session expired", 500)
		case f.broken[table]:
			w.Header().Set("X-ClickHouse-Exception-Code", "60")
			http.Error(w, "Code: 60. DB::Exception: Table "+table+" doesn't exist", 404)
		default:
			ids, err := decodeIDs(body, r.URL.Query().Get("decompress") == "1")
			if err != nil {
				http.Error(w, "Code: 33. DB::Exception: "+err.Error(), 500)
				return
			}
			f.landed[table] += len(ids)
			f.inserts++
		}
	default:
		http.Error(w, "Code: 62. DB::Exception: Syntax error: "+sql, 400)
	}
}

func (f *tableServer) rows(table string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.landed[table]
}

type countAckT struct{ n *atomic.Int64 }

func (a countAckT) Done() { a.n.Add(1) }

func chunkOf(t *testing.T, s *clickhouse.Sink, tbl *clickhouse.Table, n int, acks ...clickhouse.Ack) *clickhouse.Chunk {
	t.Helper()
	b := s.NewBlock(tbl)
	for id := range n {
		if err := b.AppendRow(binary.LittleEndian.AppendUint64(nil, uint64(id))); err != nil {
			t.Fatal(err)
		}
	}
	return clickhouse.NewChunk(b, acks)
}

// sinkRun is a sink's Run in a goroutine; its result can be read many
// times.
type sinkRun struct {
	done chan struct{}
	err  error
}

func (r *sinkRun) ended() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func startTableSink(t *testing.T, f *tableServer, mod func(*clickhouse.Config)) (*clickhouse.Sink, *sinkRun) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg := clickhouse.Config{Transport: "http", HTTPAddr: srv.URL, InsertLinger: 5 * time.Millisecond,
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, PermanentRetryInterval: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	s, err := clickhouse.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &sinkRun{done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.err = s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-run.done
	})
	return s, run
}

// waitUntil polls cond until it holds; the test's own timeout bounds it.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPermanentErrorParksOnlyItsTable: an insert that fails permanently
// (here: a dropped table) neither stops the sink nor is dropped. Its rows
// stay unacked and are retried; other tables keep landing meanwhile;
// Failing names the table; once the table is back, the held rows land and
// are acked exactly once. Before, Run returned the error and the pipeline
// stopped for every tenant.
func TestPermanentErrorParksOnlyItsTable(t *testing.T) {
	f := &tableServer{broken: map[string]bool{"default.broken": true}, landed: map[string]int{}}
	s, done := startTableSink(t, f, nil)
	ctx := context.Background()
	good, err := s.Table(ctx, "good")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := s.Table(ctx, "broken")
	if err != nil {
		t.Fatal(err)
	}
	var goodAcks, badAcks atomic.Int64
	if err := s.Send(ctx, chunkOf(t, s, bad, 10, countAckT{&badAcks})); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the broken table to be reported", func() bool { return strings.Contains(s.Failing(), "broken") })
	for range 5 {
		if err := s.Send(ctx, chunkOf(t, s, good, 100, countAckT{&goodAcks})); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the good table's rows", func() bool { return goodAcks.Load() == 5 })
	if got := f.rows("default.good"); got != 500 {
		t.Errorf("good table has %d rows, want 500", got)
	}
	if n := badAcks.Load(); n != 0 {
		t.Fatalf("the broken table's chunk was acked %d times without landing", n)
	}
	if got := clickhouse.ParkedRows(s, bad); got != 10 {
		t.Errorf("ParkedRows = %d, want 10", got)
	}
	if done.ended() {
		t.Fatalf("Run returned while a table was broken: %v", done.err)
	}
	f.mu.Lock()
	f.broken = nil
	f.mu.Unlock()
	waitUntil(t, "the held rows to land", func() bool { return badAcks.Load() == 1 })
	if got := f.rows("default.broken"); got != 10 {
		t.Errorf("broken table has %d rows after it came back, want 10", got)
	}
	waitUntil(t, "Failing to clear", func() bool { return s.Failing() == "" })
	if got := clickhouse.ParkedRows(s, bad); got != 0 {
		t.Errorf("ParkedRows = %d after landing, want 0", got)
	}
}

// TestCloseWhileSendWaits: Close while a Send waits for room in a full
// queue (the server is down) makes that Send return ErrClosed, acks
// nothing, and Run ends once cancelled. Before, Close closed the queue
// under the waiting Send, which panicked with "send on closed channel".
func TestCloseWhileSendWaits(t *testing.T) {
	f := &tableServer{down: true, landed: map[string]int{}}
	s, done := startTableSink(t, f, func(c *clickhouse.Config) {
		c.QueueCapacity = 1
		c.InsertsPerShard = 1
	})
	ctx := context.Background()
	tbl, err := s.Table(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	var acks, sentOK atomic.Int64
	sent := make(chan error, 1)
	go func() {
		// The worker's failing insert takes what comes during its linger;
		// then one chunk fills the queue and the next Send waits. Send until
		// then, however many chunks the linger takes: a fixed count can all
		// fit into the first insert, and the queue never fills.
		for {
			if err := s.Send(ctx, chunkOf(t, s, tbl, 10, countAckT{&acks})); err != nil {
				sent <- err
				return
			}
			sentOK.Add(1)
		}
	}()
	waitUntil(t, "a full queue", s.QueueFull)
	select {
	case err := <-sent:
		t.Fatalf("Send returned %v while the queue was full", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.Close()
	if err := <-sent; err != clickhouse.ErrClosed {
		t.Fatalf("waiting Send returned %v, want ErrClosed", err)
	}
	if n := acks.Load(); n != 0 {
		t.Errorf("%d chunks acked while the server was down", n)
	}
	time.Sleep(20 * time.Millisecond)
	if done.ended() {
		t.Fatalf("Run returned while chunks were still queued and the server down: %v", done.err)
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	<-done.done
	if done.err != nil {
		t.Fatalf("Run after Close and recovery: %v", done.err)
	}
	if n, want := acks.Load(), sentOK.Load(); n != want || n == 0 {
		t.Errorf("%d chunks acked after recovery, want the %d sent before Close", n, want)
	}
}
