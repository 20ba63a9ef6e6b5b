package clickhouse

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

func TestBreaker(t *testing.T) {
	var b breaker
	t0 := time.Unix(1000, 0)
	const n, cool = 3, 10 * time.Second
	for i := range n - 1 {
		if b.failure(t0, n, cool) {
			t.Fatalf("opened after %d failures", i+1)
		}
		if !b.allow(t0) {
			t.Fatal("closed breaker refused")
		}
	}
	if !b.failure(t0, n, cool) {
		t.Fatal("not open after 3 consecutive failures")
	}
	if b.allow(t0.Add(cool - time.Millisecond)) {
		t.Fatal("open breaker allowed before the cool-down")
	}
	// Half-open: one trial, not two.
	if !b.allow(t0.Add(cool)) || b.allow(t0.Add(cool)) {
		t.Fatal("half-open breaker must allow exactly one trial")
	}
	// A failed trial reopens at once.
	if !b.failure(t0.Add(cool), n, cool) || b.allow(t0.Add(cool+time.Second)) {
		t.Fatal("failed trial did not reopen the breaker")
	}
	// A successful trial closes it and forgets the failures.
	t1 := t0.Add(2*cool + time.Second)
	if !b.allow(t1) {
		t.Fatal("no trial after the second cool-down")
	}
	b.success()
	if !b.allow(t1) || b.failure(t1, n, cool) {
		t.Fatal("success did not close the breaker")
	}
	// A success between failures resets the count.
	b.success()
	b.failure(t1, n, cool)
	b.failure(t1, n, cool)
	b.success()
	if b.failure(t1, n, cool) {
		t.Fatal("failures are not consecutive after a success")
	}
}

func TestShardPickRotatesPastOpenBreakers(t *testing.T) {
	reps := []*replica{{addr: "a"}, {addr: "b"}, {addr: "c"}}
	sh := &shard{replicas: reps}
	now := time.Unix(1000, 0)
	if sh.pick(now) != reps[0] {
		t.Fatal("first pick is not the first replica")
	}
	// A failure moves on to the next replica even before the breaker opens.
	reps[0].brk.failure(now, 2, time.Minute)
	sh.rotate(reps[0])
	if got := sh.pick(now); got != reps[1] {
		t.Fatalf("after a failure on a: %s", got.addr)
	}
	// b's breaker opens; c is next, and a stays usable (closed).
	reps[1].brk.failure(now, 1, time.Minute)
	sh.rotate(reps[1])
	if got := sh.pick(now); got != reps[2] {
		t.Fatalf("after b opened: %s", got.addr)
	}
	reps[2].brk.failure(now, 1, 30*time.Second)
	sh.rotate(reps[2])
	if got := sh.pick(now); got != reps[0] {
		t.Fatalf("after c opened: %s, want a (closed)", got.addr)
	}
	reps[0].brk.failure(now, 2, 2*time.Minute)
	sh.rotate(reps[0])
	// Every breaker open: the one that reopens first (c) rather than stall.
	if got := sh.pick(now); got != reps[2] {
		t.Fatalf("all open: %s, want c", got.addr)
	}
	// After c's cool-down it gets the half-open trial.
	if got := sh.pick(now.Add(31 * time.Second)); got != reps[2] {
		t.Fatalf("after c's cool-down: %s", got.addr)
	}
}

type rangeAck struct {
	topic       string
	part        int32
	first, last int64
}

func (rangeAck) Done() {}
func (a rangeAck) Range() (string, int32, int64, int64) {
	return a.topic, a.part, a.first, a.last
}

type plainAck struct{}

func (plainAck) Done() {}

func TestDedupToken(t *testing.T) {
	tbl := testTable(t)
	mk := func(name string, acks ...Ack) *part {
		b := tbl.NewBlock()
		seven := uint64(7)
		if err := b.AppendRow(row(1, name, &seven, nil, 1)); err != nil {
			t.Fatal(err)
		}
		return &part{chunk: NewChunk(b, acks), sub: b.parts[0]}
	}
	var w worker
	a1 := rangeAck{"logs", 0, 100, 199}
	a2 := rangeAck{"logs", 1, 5, 9}
	base := w.dedupToken(tbl, []*part{mk("x", a1), mk("y", a2)})
	if !strings.HasPrefix(base, "sluice-") || len(base) != len("sluice-")+32 {
		t.Fatalf("token %q", base)
	}
	if again := w.dedupToken(tbl, []*part{mk("x", a1), mk("y", a2)}); again != base {
		t.Errorf("same insert, different token: %s vs %s", again, base)
	}
	for name, parts := range map[string][]*part{
		"other rows":      {mk("x", a1), mk("z", a2)},
		"other offsets":   {mk("x", rangeAck{"logs", 0, 100, 200}), mk("y", a2)},
		"other partition": {mk("x", rangeAck{"logs", 2, 100, 199}), mk("y", a2)},
		"other order":     {mk("y", a2), mk("x", a1)},
	} {
		if tok := w.dedupToken(tbl, parts); tok == base || tok == "" {
			t.Errorf("%s: token %q", name, tok)
		}
	}
	if tok := w.dedupToken(tbl, []*part{mk("x", a1), mk("y", plainAck{})}); tok != "" {
		t.Errorf("an ack without OffsetRange still gave token %q", tok)
	}
	if tok := w.dedupToken(tbl, []*part{mk("x")}); tok != "" {
		t.Errorf("a chunk without acks gave token %q", tok)
	}
}

func TestClassify(t *testing.T) {
	perm := func(err error) bool { return errors.As(classify(err), new(*PermanentError)) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unknown table", &ch.Exception{Code: proto.ErrUnknownTable}, true},
		{"type mismatch", &ch.Exception{Code: proto.ErrTypeMismatch}, true},
		{"too large string", &ch.Exception{Code: proto.ErrTooLargeStringSize}, true},
		{"auth", &ch.Exception{Code: proto.ErrAuthenticationFailed}, true},
		{"wrong password", &ch.Exception{Code: proto.ErrWrongPassword}, true},
		{"replica read-only", &ch.Exception{Code: proto.ErrTableIsReadOnly}, false},
		{"too many parts", &ch.Exception{Code: proto.ErrTooManyParts}, false},
		{"query memory", &ch.Exception{Code: proto.ErrMemoryLimitExceeded, Message: "Memory limit (for query) exceeded"}, true},
		{"total memory", &ch.Exception{Code: proto.ErrMemoryLimitExceeded, Message: "Memory limit (total) exceeded"}, false},
		{"network", errors.New("dial tcp: connection refused"), false},
		{"http unknown table", newServerError(404, "", []byte("Code: 60, e.displayText() = DB::Exception: Table default.x doesn't exist.")), true},
		{"http unknown user", newServerError(500, "", []byte("Code: 192, e.displayText() = DB::Exception: Unknown user nobody")), true},
		{"http header code", newServerError(500, "516", []byte("Code: 516. DB::Exception: default: Authentication failed")), true},
		{"http 503 from a proxy", newServerError(503, "", []byte("upstream unavailable")), false},
		{"http 401 from a proxy", newServerError(401, "", []byte("unauthorized")), true},
		{"http server shutting down", newServerError(500, "", []byte("Code: 210, e.displayText() = DB::NetException: Connection reset")), false},
	} {
		if got := perm(tc.err); got != tc.want {
			t.Errorf("%s: permanent = %v, want %v", tc.name, got, tc.want)
		}
	}
	if se := newServerError(500, "", []byte("Code: 60. DB::Exception: x")); se.Code != 60 {
		t.Errorf("modern body: code %d", se.Code)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"native needs addr", Config{}, "clickhouse.addr is required"},
		{"addr as a URL", Config{Addr: "http://h:8123"}, "is a URL; give the native protocol's host:port"},
		{"addr without port", Config{Addr: "h"}, "want host:port of the native protocol"},
		{"http needs http_addr", Config{Transport: "http", Addr: "h:9000"}, "clickhouse.http_addr is required"},
		{"bad transport", Config{Transport: "grpc", Addr: "h:1"}, "clickhouse.transport"},
		{"bad http_addr", Config{Transport: "http", HTTPAddr: "nohost"}, "clickhouse.http_addr"},
		{"ftp url", Config{Transport: "http", HTTPAddr: "ftp://h:1"}, "scheme"},
		{"plain url with tls", Config{Transport: "http", HTTPAddr: "http://h:1", TLS: true}, "clickhouse.tls is on"},
		{"bad routing", Config{Addr: "h:1", Routing: "magic"}, "clickhouse.routing"},
		{"bad dedup", Config{Addr: "h:1", DedupToken: "always"}, "clickhouse.dedup_token"},
		{"negative breaker", Config{Addr: "h:1", Cluster: ClusterConfig{BreakerFailures: -1}}, "clickhouse.cluster.breaker_failures"},
		{"bad http_addrs key", Config{Addr: "h:1", Cluster: ClusterConfig{HTTPAddrs: map[string]string{"h": "h:8123"}}}, "clickhouse.cluster.http_addrs"},
		{"ca without tls", Config{Addr: "h:1", TLSCAFile: "/x"}, "clickhouse.tls_ca_file"},
		{"retry order", Config{Addr: "h:1", RetryMin: time.Second, RetryMax: time.Millisecond}, "clickhouse.retry_max"},
		{"bad compression", Config{Addr: "h:1", Compression: "gzip"}, "clickhouse.compression: \"gzip\" is not one of auto"},
		{"ok native", Config{Addr: "h:9000"}, ""},
		{"ok https url", Config{Transport: "http", HTTPAddr: "https://h:8443/ch"}, ""},
	} {
		err := tc.cfg.Validate()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.err)
		}
	}
	c := Config{Addr: "h:9000"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Transport != "native" || c.Routing != "endpoint" || c.DedupToken != "auto" || c.Compression != "auto" || c.ChunkBytes != 1<<20 ||
		c.QueueCapacity != 8 || c.InsertsPerShard != 2 || c.Cluster.BreakerFailures != 3 || c.Cluster.BreakerCooldown != 30*time.Second {
		t.Errorf("defaults: %+v", c)
	}
}

// TestCompressionFor: auto sends to a loopback server uncompressed and to
// any other with LZ4; an explicit method applies to every server.
func TestCompressionFor(t *testing.T) {
	for _, tc := range []struct{ method, addr, want string }{
		{"auto", "127.0.0.1:9000", "none"},
		{"auto", "127.3.2.1:9000", "none"},
		{"auto", "localhost:9000", "none"},
		{"auto", "LocalHost:8123", "none"},
		{"auto", "[::1]:9000", "none"},
		{"auto", "::1", "none"},
		{"auto", "127.0.0.1", "none"},
		{"auto", "10.0.0.7:9000", "lz4"},
		{"auto", "ch-1.example.com:9000", "lz4"},
		{"auto", "localhost.example.com:9000", "lz4"},
		{"auto", "[2001:db8::1]:9000", "lz4"},
		{"lz4", "127.0.0.1:9000", "lz4"},
		{"zstd", "localhost:9000", "zstd"},
		{"none", "10.0.0.7:9000", "none"},
	} {
		if got := compressionFor(tc.method, tc.addr); got != tc.want {
			t.Errorf("compressionFor(%q, %q) = %q, want %q", tc.method, tc.addr, got, tc.want)
		}
	}
}

// BenchmarkDedupToken: the token of an insert of 8 parts of 2,000 rows,
// as each attempt of an insert derives it.
func BenchmarkDedupToken(b *testing.B) {
	tbl := testTable(b)
	var parts []*part
	for p := range 8 {
		blk := tbl.NewBlock()
		for i := range 2000 {
			n := uint64(i)
			if err := blk.AppendRow(row(uint32(i), fmt.Sprintf("host-%d", i%50), &n, []string{"a", "bb"}, 1)); err != nil {
				b.Fatal(err)
			}
		}
		parts = append(parts, &part{chunk: NewChunk(blk, []Ack{rangeAck{"logs", int32(p), 0, 1999}}), sub: blk.parts[0]})
	}
	var w worker
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if w.dedupToken(tbl, parts) == "" {
			b.Fatal("no token")
		}
	}
}
