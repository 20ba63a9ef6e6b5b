package clickhouse_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestChunkTiming checks what OnChunkInserted says about each chunk: once
// per chunk with rows, before its acks are released, with Sealed at Send,
// Taken when an insert took it, Inserted when the server acknowledged it,
// in that order; a chunk inserted after failed attempts has their time,
// and their backoff, between Taken and Inserted.
func TestChunkTiming(t *testing.T) {
	f := &tableServer{down: true, landed: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s, err := clickhouse.New(context.Background(), clickhouse.Config{Transport: "http", HTTPAddr: srv.URL,
		InsertLinger: 5 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond,
		InsertsPerShard: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		c          *clickhouse.Chunk
		t          clickhouse.ChunkTiming
		ackedFirst int64
		at         time.Time
	}
	var (
		mu    sync.Mutex
		calls []seen
		acks  atomic.Int64
	)
	s.OnChunkInserted(func(c *clickhouse.Chunk, ct clickhouse.ChunkTiming) {
		mu.Lock()
		calls = append(calls, seen{c, ct, acks.Load(), time.Now()})
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-runDone
	}()
	tbl, err := s.Table(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}

	// The first chunk meets a server that is down for 100 ms.
	before := time.Now()
	first := chunkOf(t, s, tbl, 10, countAckT{&acks})
	if err := s.Send(ctx, first); err != nil {
		t.Fatal(err)
	}
	const down = 100 * time.Millisecond
	time.Sleep(down)
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	waitUntil(t, "the first chunk's ack", func() bool { return acks.Load() == 1 })
	// Then a chunk without rows (acked at once, no timing) and three
	// that land at the first attempt.
	if err := s.Send(ctx, clickhouse.NewChunk(s.NewBlock(tbl), []clickhouse.Ack{countAckT{&acks}})); err != nil {
		t.Fatal(err)
	}
	var later []*clickhouse.Chunk
	for range 3 {
		c := chunkOf(t, s, tbl, 10, countAckT{&acks})
		later = append(later, c)
		if err := s.Send(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every ack", func() bool { return acks.Load() == 5 })

	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 4 {
		t.Fatalf("OnChunkInserted called %d times, want once per chunk with rows (4)", len(calls))
	}
	want := append([]*clickhouse.Chunk{first}, later...)
	for i, c := range calls {
		if c.c != want[i] {
			t.Errorf("call %d: not the chunk sent %d-th", i, i)
		}
		ct := c.t
		if ct.Sealed.Before(before) || ct.Taken.Before(ct.Sealed) || ct.Inserted.Before(ct.Taken) || c.at.Before(ct.Inserted) {
			t.Errorf("call %d: sent after %v, sealed %v, taken %v, inserted %v, told %v: out of order", i,
				before.Format(time.StampMicro), ct.Sealed.Format(time.StampMicro), ct.Taken.Format(time.StampMicro),
				ct.Inserted.Format(time.StampMicro), c.at.Format(time.StampMicro))
		}
		if wantAcked := int64(i); i > 0 {
			// The chunk without rows was acked before the later ones.
			wantAcked++
			if c.ackedFirst != wantAcked {
				t.Errorf("call %d: %d acks released before it, want %d", i, c.ackedFirst, wantAcked)
			}
		} else if c.ackedFirst != 0 {
			t.Errorf("call 0 came after its ack was released")
		}
	}
	if d := calls[0].t.Inserted.Sub(calls[0].t.Taken); d < down-10*time.Millisecond {
		t.Errorf("the insert that met a server down for %s took %s from Taken to Inserted", down, d)
	}
	if d := calls[0].t.Taken.Sub(calls[0].t.Sealed); d > down/2 {
		t.Errorf("the first chunk waited %s in an empty queue", d)
	}
}

// TestOneInsertCollectsAtATime: with two workers per shard, chunks sealed
// while an insert is open all go into that insert; the second worker does
// not start an insert of its own that splits them (each would then wait
// out the long linger, with half the rows).
func TestOneInsertCollectsAtATime(t *testing.T) {
	f := &tableServer{landed: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	const chunks, rows = 6, 10
	s, err := clickhouse.New(context.Background(), clickhouse.Config{Transport: "http", HTTPAddr: srv.URL,
		InsertLinger: time.Minute, MaxInsertRows: chunks * rows, InsertsPerShard: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tbl := runEvents(t, s)
	var acks atomic.Int64
	for round := 1; round <= 2; round++ {
		for range chunks {
			if err := s.Send(context.Background(), chunkOf(t, s, tbl, rows, countAckT{&acks})); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, "every ack", func() bool { return acks.Load() == int64(round*chunks) })
		f.mu.Lock()
		inserts, landed := f.inserts, 0
		for _, n := range f.landed {
			landed += n
		}
		f.mu.Unlock()
		if inserts != round || landed != round*chunks*rows {
			t.Errorf("round %d: %d inserts of %d rows in all, want %d of %d rows each: one insert collects at a time",
				round, inserts, landed, round, chunks*rows)
		}
	}
}

// agedAck is an ack whose oldest record was written at t.
type agedAck struct {
	countAckT
	t time.Time
}

func (a agedAck) OldestRecord() time.Time { return a.t }

// backlogSink is a sink on f for the backlog tests, with a
// backlog_insert_linger of a minute.
func backlogSink(t *testing.T, f *tableServer, insertLinger, gap time.Duration, maxRows int) (*clickhouse.Sink, *clickhouse.Table) {
	t.Helper()
	s, err := clickhouse.New(context.Background(), clickhouse.Config{Transport: "http", HTTPAddr: "http://" + f.addr,
		InsertLinger: insertLinger, BacklogInsertLinger: time.Minute,
		MaxInsertRows: maxRows, InsertsPerShard: 2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if gap > 0 {
		clickhouse.SetBacklogGap(s, gap)
	}
	return s, runEvents(t, s)
}

// runEvents runs s until the test ends and returns its table "events".
func runEvents(t *testing.T, s *clickhouse.Sink) *clickhouse.Table {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runDone
	})
	tbl, err := s.Table(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// TestBacklogInsertLinger: an insert whose first chunk's records are older
// than backlog_insert_linger stays open for the chunks that follow; one of
// fresh records keeps insert_linger.
func TestBacklogInsertLinger(t *testing.T) {
	for _, c := range []struct {
		name       string
		age        time.Duration
		oneInsert  bool
		recordTime bool
	}{
		{"backlog", 2 * time.Minute, true, true},
		{"fresh", 0, false, true},
		{"no record time", 0, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &tableServer{landed: map[string]int{}}
			srv := httptest.NewServer(f)
			defer srv.Close()
			f.addr = srv.Listener.Addr().String()
			const chunks, rows = 3, 10
			// An insert_linger of a microsecond: an insert of fresh rows
			// takes only the chunk it starts with; a backlog one waits a
			// minute for each next chunk.
			s, tbl := backlogSink(t, f, time.Microsecond, time.Minute, chunks*rows)
			var acks atomic.Int64
			for i := range chunks {
				var ack clickhouse.Ack = countAckT{&acks}
				if c.recordTime {
					ack = agedAck{countAckT{&acks}, time.Now().Add(-c.age)}
				}
				if err := s.Send(context.Background(), chunkOf(t, s, tbl, rows, ack)); err != nil {
					t.Fatal(err)
				}
				if i < chunks-1 {
					// Past insert_linger: an insert of fresh rows is
					// sealed by now.
					time.Sleep(100 * time.Millisecond)
				}
			}
			waitUntil(t, "every ack", func() bool { return acks.Load() == chunks })
			f.mu.Lock()
			inserts := f.inserts
			f.mu.Unlock()
			if c.oneInsert && inserts != 1 {
				t.Errorf("%d inserts, want 1 that lingered for every chunk", inserts)
			}
			if !c.oneInsert && inserts < 2 {
				t.Errorf("%d inserts, want one per chunk (or at least 2): insert_linger is a microsecond", inserts)
			}
		})
	}
}

// TestBacklogInsertEndsWhenChunksStop: a backlog insert does not wait out
// its long linger once no chunk has come for insert_linger.
func TestBacklogInsertEndsWhenChunksStop(t *testing.T) {
	f := &tableServer{landed: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	f.addr = srv.Listener.Addr().String()
	s, tbl := backlogSink(t, f, 50*time.Millisecond, 0, 1_000_000)
	var acks atomic.Int64
	start := time.Now()
	if err := s.Send(context.Background(), chunkOf(t, s, tbl, 10, agedAck{countAckT{&acks}, time.Now().Add(-time.Hour)})); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the ack", func() bool { return acks.Load() == 1 })
	// The insert it must not be: one that waited out its whole backlog
	// linger. Anything sooner, however loaded the machine, is the gap.
	if took := time.Since(start); took >= time.Minute {
		t.Errorf("the insert took %s: it waited for its minute of backlog_insert_linger, not insert_linger (50ms) without a chunk", took)
	}
}
