package clickhouse_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// fakeServer answers the HTTP interface like a modern ClickHouse would, for
// what 18.16 cannot show: insert_deduplication_token and per-query
// settings. It fails the first insert, records every insert's parameters
// and headers, and decodes the bodies.
type fakeServer struct {
	knowsToken bool
	// answerEarly: the first insert is answered before its body is read.
	answerEarly bool
	mu          sync.Mutex
	inserts     []fakeInsert
}

type fakeInsert struct {
	params url.Values
	header http.Header
	ids    []uint64
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if f.answerEarly && strings.HasPrefix(q.Get("query"), "INSERT") {
		f.mu.Lock()
		first := len(f.inserts) == 0
		if first {
			f.inserts = append(f.inserts, fakeInsert{params: q})
		}
		f.mu.Unlock()
		if first {
			w.Header().Set("Connection", "close")
			http.Error(w, "Code: 252. DB::Exception: Too many parts", 500)
			return
		}
	}
	body, _ := io.ReadAll(r.Body)
	sql := q.Get("query")
	if sql == "" {
		sql = string(body)
	}
	switch {
	case strings.HasPrefix(sql, "SELECT version()"):
		io.WriteString(w, "24.8.1.1\n")
	case strings.Contains(sql, "system.settings"):
		if f.knowsToken {
			io.WriteString(w, "insert_deduplication_token\nasync_insert\n")
		}
	case strings.HasPrefix(sql, "SELECT engine, engine_full FROM system.tables"):
		io.WriteString(w, "Distributed\tDistributed(c, default, events_local, rand())\n")
	case strings.HasPrefix(sql, "DESCRIBE TABLE"):
		io.WriteString(w, "id\tUInt64\t\t\t\t\t\n")
	case strings.HasPrefix(sql, "INSERT INTO"):
		ins := fakeInsert{params: q, header: r.Header.Clone()}
		var err error
		if ins.ids, err = decodeIDs(body, q.Get("decompress") == "1"); err != nil {
			http.Error(w, "Code: 33. DB::Exception: "+err.Error(), 500)
			return
		}
		f.mu.Lock()
		f.inserts = append(f.inserts, ins)
		first := len(f.inserts) == 1
		f.mu.Unlock()
		if first {
			w.Header().Set("X-ClickHouse-Exception-Code", "999")
			http.Error(w, "Code: 999. DB::Exception: Coordination::Exception: Session expired", 500)
		}
	default:
		http.Error(w, "Code: 62. DB::Exception: Syntax error: "+sql, 400)
	}
}

// decodeIDs reads the UInt64 column "id" from a Native body.
func decodeIDs(body []byte, compressed bool) ([]uint64, error) {
	var r io.Reader = bytes.NewReader(body)
	if compressed {
		r = compress.NewReader(r)
	}
	pr := proto.NewReader(r)
	var ids []uint64
	for {
		var col proto.ColUInt64
		var blk proto.Block
		if err := blk.DecodeRawBlock(pr, 54451, proto.Results{{Name: "id", Data: &col}}); err != nil {
			if err == io.EOF || strings.Contains(err.Error(), "EOF") {
				return ids, nil
			}
			return nil, err
		}
		ids = append(ids, col...)
	}
}

type offsetAck struct {
	n           *atomic.Int64
	first, last int64
}

func (a offsetAck) Done() { a.n.Add(1) }
func (a offsetAck) Range() (string, int32, int64, int64) {
	return "events", 3, a.first, a.last
}

func fakeSink(t *testing.T, f *fakeServer, mod func(*clickhouse.Config)) (*clickhouse.Sink, *clickhouse.Table) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	cfg := clickhouse.Config{Transport: "http", HTTPAddr: srv.URL, User: "writer", Password: "s3cret",
		InsertLinger: 10 * time.Millisecond, RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	s, err := clickhouse.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	runSink(t, s)
	tbl, err := s.Table(context.Background(), "events")
	if err != nil {
		t.Fatal(err)
	}
	return s, tbl
}

func sendIDs(t *testing.T, s *clickhouse.Sink, tbl *clickhouse.Table, from, to uint64, acks ...clickhouse.Ack) {
	t.Helper()
	b := s.NewBlock(tbl)
	for id := from; id < to; id++ {
		if err := b.AppendRow(binary.LittleEndian.AppendUint64(nil, id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Send(context.Background(), clickhouse.NewChunk(b, acks)); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPRetrySendsSameDedupToken: against a server that knows
// insert_deduplication_token, an insert carries a token derived from its
// offset ranges, and the retry after a failure carries the same token,
// rows and Idempotency-Key; credentials go in X-ClickHouse-User/Key.
func TestHTTPRetrySendsSameDedupToken(t *testing.T) {
	f := &fakeServer{knowsToken: true}
	s, tbl := fakeSink(t, f, func(c *clickhouse.Config) { c.Compression = "lz4" })
	var acked atomic.Int64
	sendIDs(t, s, tbl, 0, 1000, offsetAck{&acked, 100, 199})
	waitFor(t, func() bool { return acked.Load() == 1 }, 10*time.Second, "ack")
	f.mu.Lock()
	inserts := append([]fakeInsert(nil), f.inserts...)
	f.mu.Unlock()
	if len(inserts) != 2 {
		t.Fatalf("%d insert requests, want 2 (one failed, one retried)", len(inserts))
	}
	first, retry := inserts[0], inserts[1]
	tok := first.params.Get("insert_deduplication_token")
	if !strings.HasPrefix(tok, "sluice-") || retry.params.Get("insert_deduplication_token") != tok {
		t.Errorf("tokens %q then %q, want the same sluice- token", tok, retry.params.Get("insert_deduplication_token"))
	}
	if k := first.header.Get("Idempotency-Key"); k == "" || retry.header.Get("Idempotency-Key") != k {
		t.Errorf("Idempotency-Key %q then %q", k, retry.header.Get("Idempotency-Key"))
	}
	if first.header.Get("X-ClickHouse-User") != "writer" || first.header.Get("X-ClickHouse-Key") != "s3cret" {
		t.Errorf("credentials headers: %v", first.header)
	}
	if strings.Contains(first.params.Encode(), "s3cret") {
		t.Error("the password is in the URL")
	}
	if first.params.Get("decompress") != "1" || first.params.Get("query") != "INSERT INTO `default`.`events` (`id`) FORMAT Native" {
		t.Errorf("params %v", first.params)
	}
	if len(first.ids) != 1000 || !slices.Equal(retry.ids, first.ids) {
		t.Errorf("bodies held %d and %d ids, want the same 1000", len(first.ids), len(retry.ids))
	}
	for i, id := range first.ids {
		if id != uint64(i) {
			t.Errorf("body id %d is %d", i, id)
			break
		}
	}

	// Other offsets, other token.
	sendIDs(t, s, tbl, 0, 1000, offsetAck{&acked, 200, 299})
	waitFor(t, func() bool { return acked.Load() == 2 }, 10*time.Second, "second ack")
	f.mu.Lock()
	last := f.inserts[len(f.inserts)-1]
	f.mu.Unlock()
	if next := last.params.Get("insert_deduplication_token"); next == tok || next == "" {
		t.Errorf("a different offset range got token %q", next)
	}
}

// TestHTTPSettingsOnlyWhereKnown: no token to a server without the setting
// (like 18.16) or for acks without offsets; insert_distributed_sync=1 with
// routing distributed and distributed_sync; no compression parameter with
// compression none, nor by default to a server on loopback.
func TestHTTPSettingsOnlyWhereKnown(t *testing.T) {
	var acked atomic.Int64
	old := &fakeServer{knowsToken: false}
	s, tbl := fakeSink(t, old, nil)
	sendIDs(t, s, tbl, 0, 10, offsetAck{&acked, 1, 10})
	waitFor(t, func() bool { return acked.Load() == 1 }, 10*time.Second, "ack")

	modern := &fakeServer{knowsToken: true}
	s2, tbl2 := fakeSink(t, modern, func(c *clickhouse.Config) {
		c.Routing = clickhouse.RoutingDistributed
		c.DistributedSync = true
		c.Compression = "none"
	})
	sendIDs(t, s2, tbl2, 0, 10, countAck{&acked})
	waitFor(t, func() bool { return acked.Load() == 2 }, 10*time.Second, "ack")

	for name, ins := range map[string]fakeInsert{"old server": old.inserts[1], "no offsets": modern.inserts[1]} {
		if ins.params.Has("insert_deduplication_token") {
			t.Errorf("%s: token sent: %v", name, ins.params)
		}
	}
	if p := modern.inserts[1].params; p.Get("insert_distributed_sync") != "1" || p.Has("decompress") {
		t.Errorf("distributed sync, no compression: params %v", p)
	}
	if p := old.inserts[1].params; p.Has("decompress") {
		t.Errorf("default compression to a loopback server: params %v", p)
	}
	if old.inserts[1].params.Has("insert_distributed_sync") {
		t.Errorf("insert_distributed_sync sent without distributed_sync")
	}
	// async_insert=0 goes only to a server that knows the setting.
	if p := modern.inserts[1].params; p.Get("async_insert") != "0" {
		t.Errorf("modern server: async_insert %q, want 0: params %v", p.Get("async_insert"), p)
	}
	if p := old.inserts[1].params; p.Has("async_insert") {
		t.Errorf("old server: async_insert sent: params %v", p)
	}
	if len(modern.inserts[1].ids) != 10 {
		t.Errorf("uncompressed body held %d ids", len(modern.inserts[1].ids))
	}
}

// TestHTTPEarlyAnswer: the server answers the first (streaming) insert
// before reading its body; net/http may go on reading that body while the
// sink retries. The retry must carry the same rows and nothing may race
// (run with -race).
func TestHTTPEarlyAnswer(t *testing.T) {
	f := &fakeServer{answerEarly: true}
	s, tbl := fakeSink(t, f, func(c *clickhouse.Config) { c.InsertLinger = 200 * time.Millisecond })
	var acked atomic.Int64
	for i := range 20 {
		sendIDs(t, s, tbl, uint64(i*500), uint64(i*500+500), countAck{&acked})
	}
	waitFor(t, func() bool { return acked.Load() == 20 }, 20*time.Second, "acks")
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := map[uint64]int{}
	for _, ins := range f.inserts[1:] {
		for _, id := range ins.ids {
			seen[id]++
		}
	}
	if len(seen) != 10000 {
		t.Errorf("%d distinct ids reached the server, want 10000", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("id %d inserted %d times", id, n)
			break
		}
	}
}

// TestSendAfterClose: Send after Close is an error, not a panic, and Run
// returns nil once what was queued before Close is inserted and acked.
func TestSendAfterClose(t *testing.T) {
	f := &fakeServer{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s, err := clickhouse.New(context.Background(), clickhouse.Config{Transport: "http", HTTPAddr: srv.URL,
		InsertLinger: 10 * time.Millisecond, RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := s.Table(context.Background(), "events")
	if err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	sendIDs(t, s, tbl, 0, 100, countAck{&acked}) // queued before Run starts
	s.Close()
	if err := s.Send(context.Background(), clickhouse.NewChunk(s.NewBlock(tbl), nil)); err != clickhouse.ErrClosed {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Table(context.Background(), "other"); err != clickhouse.ErrClosed {
		t.Errorf("Table after Close: %v, want ErrClosed", err)
	}
	if err := s.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if acked.Load() != 1 {
		t.Errorf("%d acks, want 1: Close must still insert what was queued", acked.Load())
	}
}

// TestSegmentChunksInsertAlone: exactly-once segment chunks are never
// merged, however long the insert lingers: each is one insert whose token
// comes from its segment and table only, so a replay of a segment that
// rebuilds other rows carries the first insert's token, and another
// segment gets another. The inserts ask dependent materialized views to
// deduplicate too.
func TestSegmentChunksInsertAlone(t *testing.T) {
	f := &fakeServer{knowsToken: true}
	s, tbl := fakeSink(t, f, func(c *clickhouse.Config) { c.InsertLinger = time.Second })
	var acked atomic.Int64
	send := func(segment string, from, to uint64) {
		b := s.NewBlock(tbl)
		for id := from; id < to; id++ {
			if err := b.AppendRow(binary.LittleEndian.AppendUint64(nil, id)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Send(context.Background(), clickhouse.NewSegmentChunk(b, []clickhouse.Ack{offsetAck{&acked, 0, 0}}, segment)); err != nil {
			t.Fatal(err)
		}
	}
	send("events/3/0-100/sha", 0, 100)
	send("events/3/100-200/sha", 100, 200)
	send("events/3/0-100/sha", 500, 510) // a replay that made other rows
	waitFor(t, func() bool { return acked.Load() == 3 }, 10*time.Second, "acks")
	f.mu.Lock()
	inserts := append([]fakeInsert(nil), f.inserts[1:]...) // the first attempt failed and was retried
	f.mu.Unlock()
	if len(inserts) != 3 {
		t.Fatalf("%d successful inserts, want one per segment chunk (3)", len(inserts))
	}
	// The shard's workers insert concurrently: find each chunk's insert by
	// its first id.
	slices.SortFunc(inserts, func(a, b fakeInsert) int { return int(a.ids[0]) - int(b.ids[0]) })
	tok := func(i int) string { return inserts[i].params.Get("insert_deduplication_token") }
	for i, want := range [][2]uint64{{0, 100}, {100, 200}, {500, 510}} {
		ids := inserts[i].ids
		if len(ids) != int(want[1]-want[0]) || ids[0] != want[0] {
			t.Errorf("insert %d carried %d ids from %d, want [%d, %d)", i, len(ids), ids[0], want[0], want[1])
		}
		if !strings.HasPrefix(tok(i), "sluice-seg-") {
			t.Errorf("insert %d token %q, want a segment token", i, tok(i))
		}
		if inserts[i].params.Get("deduplicate_blocks_in_dependent_materialized_views") != "1" {
			t.Errorf("insert %d params %v: no deduplicate_blocks_in_dependent_materialized_views=1", i, inserts[i].params)
		}
	}
	if tok(0) != tok(2) {
		t.Errorf("a replay of the same segment got token %q, the first insert %q", tok(2), tok(0))
	}
	if tok(0) == tok(1) {
		t.Errorf("two segments share token %q", tok(0))
	}
}
