package clickhouse_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestServerOutageLosesNothing streams rows while the server is stopped for
// a while and started again: every chunk sent is acked, once, and the table
// ends with every id exactly once (count = uniqExact = rows sent). Over the
// native protocol the inserts go in key order (sort_rows), retries too. The
// native variant's outage is 20 s; the HTTP one's 6 s. It runs on each
// server of the matrix.
func TestServerOutageLosesNothing(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		for _, tc := range []struct {
			transport string
			outage    time.Duration
		}{
			{clickhouse.TransportNative, 20 * time.Second},
			{clickhouse.TransportHTTP, 6 * time.Second},
		} {
			t.Run(fmt.Sprintf("%s/%s", tc.transport, tc.outage), func(t *testing.T) {
				testOutage(t, server, tc.transport, tc.outage)
			})
		}
	})
}

func testOutage(t *testing.T, server testinfra.Server, transport string, outage time.Duration) {
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: server})
	ctx := context.Background()
	// Where the server takes insert_deduplication_token, the table keeps a
	// window of them, so that an insert the server committed while its
	// answer was lost in the outage is dropped when retried: there every
	// row lands exactly once. 18.16 has no token: such a retry lands its
	// rows twice (at least once), and only loss fails the test.
	ddl := "CREATE TABLE stream (id UInt64, s String) ENGINE = MergeTree ORDER BY id"
	exact := ch.Capabilities().DedupToken
	if exact {
		ddl += " SETTINGS non_replicated_deduplication_window = 1000"
	}
	if err := ch.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, ch, transport, func(c *clickhouse.Config) {
		c.QueueCapacity = 4
		c.InsertLinger = 20 * time.Millisecond
		c.RetryMin = 50 * time.Millisecond
		c.RetryMax = time.Second
		c.DialTimeout = time.Second
	})
	// The insert observer sees every attempt: the failed ones during the
	// outage, and successful ones carrying every row exactly once.
	var (
		obsMu                 sync.Mutex
		okRows, failedEvents  int
		maxAttempt, zeroAcked int
	)
	s.OnInsert(func(e *clickhouse.InsertEvent) {
		obsMu.Lock()
		defer obsMu.Unlock()
		if e.Err != nil {
			failedEvents++
		} else {
			okRows += e.Rows
		}
		maxAttempt = max(maxAttempt, e.Attempt)
		n := 0
		e.Acks(func(clickhouse.Ack) bool { n++; return true })
		if n == 0 || e.Table != "default.stream" || !e.End.After(e.Start) {
			zeroAcked++
		}
	})
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	tbl, err := s.Table(ctx, "stream")
	if err != nil {
		t.Fatal(err)
	}

	// The producer sends 200-row chunks every 10 ms until told to stop;
	// Send blocks while the queue is full (the outage).
	var (
		acked, sentChunks atomic.Int64
		sentRows          atomic.Uint64
		stop              = make(chan struct{})
		produced          = make(chan error, 1)
		blocked           atomic.Int64 // longest Send, ms
	)
	go func() {
		var id uint64
		for {
			select {
			case <-stop:
				produced <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
			b := s.NewBlock(tbl)
			// A chunk's ids go from high to low, so that over the native
			// protocol the inserts are put in key order (sort_rows) before
			// they are sent, on every attempt.
			for k := range uint64(200) {
				row := binary.LittleEndian.AppendUint64(nil, id+199-k)
				row = appendStr(row, fmt.Sprintf("row-%d", id+199-k))
				if err := b.AppendRow(row); err != nil {
					produced <- err
					return
				}
			}
			id += 200
			start := time.Now()
			if err := s.Send(ctx, clickhouse.NewChunk(b, []clickhouse.Ack{countAck{&acked}})); err != nil {
				produced <- err
				return
			}
			if ms := time.Since(start).Milliseconds(); ms > blocked.Load() {
				blocked.Store(ms)
			}
			sentChunks.Add(1)
			sentRows.Store(id)
		}
	}()

	time.Sleep(2 * time.Second)
	before := acked.Load()
	stopping := time.Now()
	if err := ch.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("server stopped in %s", stopped.Sub(stopping).Round(100*time.Millisecond))
	time.Sleep(outage)
	if s.Failing() == "" {
		t.Error("Failing() is empty during the outage")
	}
	if err := s.Ping(ctx, time.Second); err == nil {
		t.Error("Ping succeeded during the outage")
	}
	if err := ch.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("server down for %s", time.Since(stopped).Round(100*time.Millisecond))
	time.Sleep(2 * time.Second)
	close(stop)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	s.Close()
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("sink did not drain within 60s of Close")
	}

	rows := sentRows.Load()
	st := s.Stats()
	if msg := s.Failing(); msg != "" {
		t.Errorf("Failing() after recovery: %s", msg)
	}
	// A loaded machine may take a while to answer: ask again, each ping
	// bounded as the one during the outage.
	waitFor(t, func() bool { return s.Ping(ctx, time.Second) == nil }, time.Minute, "a ping after recovery")
	obsMu.Lock()
	if uint64(okRows) != rows || failedEvents != int(st.InsertErrors) || maxAttempt < 2 || zeroAcked != 0 {
		t.Errorf("observer: %d rows in successful attempts (want %d), %d failed attempts (stats %d), max attempt %d, %d malformed events",
			okRows, rows, failedEvents, st.InsertErrors, maxAttempt, zeroAcked)
	}
	obsMu.Unlock()
	if len(st.Tables) != 1 || st.Tables[0].Name != "default.stream" || uint64(st.Tables[0].InsertedRows) != rows {
		t.Errorf("table stats %+v, want default.stream with %d rows", st.Tables, rows)
	}
	t.Logf("%d rows in %d chunks; %d acked before the outage; longest Send %d ms; stats %+v",
		rows, sentChunks.Load(), before, blocked.Load(), st)
	if acked.Load() != sentChunks.Load() {
		t.Errorf("%d chunks acked, %d sent", acked.Load(), sentChunks.Load())
	}
	if st.InsertErrors == 0 {
		t.Error("no insert failed: the outage did not hit the sink")
	}
	// Every chunk is out of key order: over the native protocol every
	// insert's successful attempt is sorted, over HTTP none.
	wantSorted := int64(0)
	if transport == clickhouse.TransportNative {
		wantSorted = st.Inserts
	}
	if st.SortedInserts != wantSorted || st.Inserts == 0 {
		t.Errorf("%d of %d inserts sorted over %s, want %d", st.SortedInserts, st.Inserts, transport, wantSorted)
	}
	if blocked.Load() < outage.Milliseconds()/2 {
		t.Errorf("Send never blocked for long (%d ms): no backpressure during the outage", blocked.Load())
	}
	if exact {
		got := queryT(t, ch, "SELECT count(), uniqExact(id), min(id), max(id) FROM stream")
		if want := fmt.Sprintf("%d\t%d\t0\t%d", rows, rows, rows-1); got != want {
			t.Errorf("(count, uniqExact, min, max) = %q, want %q", got, want)
		}
		return
	}
	got := queryT(t, ch, "SELECT uniqExact(id), min(id), max(id) FROM stream")
	if want := fmt.Sprintf("%d\t0\t%d", rows, rows-1); got != want {
		t.Errorf("LOSS: (uniqExact, min, max) = %q, want %q", got, want)
	}
	t.Logf("%s rows landed twice (no deduplication token on this server)", queryT(t, ch, "SELECT count() - uniqExact(id) FROM stream"))
}
