package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// typeCases are the column types sluice encodes, with values to round-trip.
// Types the server does not know (18.16 lacks Bool, IPv4/IPv6 and
// DateTime64) are detected and reported, not silently passed.
var typeCases = []struct {
	typ    string
	values []string // SQL literals
}{
	{"UInt8", []string{"0", "255"}},
	{"UInt16", []string{"0", "65535"}},
	{"UInt32", []string{"0", "4294967295"}},
	{"UInt64", []string{"0", "18446744073709551615"}},
	{"Int8", []string{"-128", "127"}},
	{"Int16", []string{"-32768", "32767"}},
	{"Int32", []string{"-2147483648", "2147483647"}},
	{"Int64", []string{"-9223372036854775808", "9223372036854775807"}},
	{"Float32", []string{"-1.5", "3.25"}},
	{"Float64", []string{"-1e300", "2.718281828459045"}},
	{"String", []string{"''", "'tab\\there ünïcødé'"}},
	{"FixedString(4)", []string{"'abcd'", "'x'"}},
	{"LowCardinality(String)", []string{"'a'", "'bb'"}},
	{"LowCardinality(Nullable(String))", []string{"NULL", "'x'", "''"}},
	{"Nullable(String)", []string{"NULL", "'x'"}},
	{"Nullable(Int32)", []string{"-7", "NULL"}},
	{"Array(String)", []string{"[]", "['a','b','c']"}},
	{"Array(Nullable(UInt16))", []string{"[1,NULL,3]", "[]"}},
	{"Array(Array(Int8))", []string{"[[1],[],[2,3]]", "[]"}},
	{"Array(LowCardinality(String))", []string{"['a','b','a']", "[]", "['']"}},
	{"Array(LowCardinality(Nullable(String)))", []string{"[NULL,'x','x']", "[]", "[NULL]"}},
	{"Date", []string{"'1970-01-02'", "'2026-11-29'"}},
	{"DateTime", []string{"'2026-11-29 10:11:12'", "'1971-01-01 00:00:00'"}},
	{"UUID", []string{"'00000000-0000-0000-0000-000000000000'", "'f47ac10b-58cc-4372-a567-0e02b2c3d479'"}},
	{"Enum8('a' = 1, 'b' = -2)", []string{"'a'", "'b'"}},
	{"Enum16('x' = 1000, 'y' = -1000)", []string{"'y'", "'x'"}},
	{"Decimal(18, 4)", []string{"-12.3456", "99999.0001"}},
	{"IPv4", []string{"'10.1.2.3'", "'255.255.255.255'"}},
	{"IPv6", []string{"'::1'", "'2001:db8::ff00:42:8329'"}},
	{"Bool", []string{"true", "false"}},
	{"DateTime64(3)", []string{"'2026-11-29 10:11:12.345'", "'2000-01-01 00:00:00.001'"}},
}

// transports are the ways the sink inserts; integration tests run for each.
var transports = []string{clickhouse.TransportNative, clickhouse.TransportHTTP}

func newSink(t testing.TB, ch *testinfra.ClickHouse, transport string, mod func(*clickhouse.Config)) *clickhouse.Sink {
	t.Helper()
	cfg := clickhouse.Config{Transport: transport, Addr: ch.Addr, HTTPAddr: ch.HTTPAddr,
		InsertLinger: 50 * time.Millisecond, ChunkLinger: 50 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	s, err := clickhouse.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type countAck struct{ n *atomic.Int64 }

func (a countAck) Done() { a.n.Add(1) }

// TestTypesRoundTrip takes each type's values as RowBinary from the server
// itself, decodes them into a block, inserts the block through the sink and
// checks the server reads back the same values, over each transport and
// compression.
// It runs on each server of the matrix; a type the server does not know
// must be one the server is documented to lack.
func TestTypesRoundTrip(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		for _, tc := range []struct{ transport, compression string }{
			{"native", "lz4"}, {"native", "zstd"}, {"native", "none"},
			{"http", "lz4"}, {"http", "zstd"}, {"http", "none"},
		} {
			t.Run(tc.transport+"/"+tc.compression, func(t *testing.T) {
				testTypesRoundTrip(t, ch, tc.transport, tc.compression)
			})
		}
	})
}

// typesMissingOn are the typeCases types each server lacks.
var typesMissingOn = map[testinfra.Server]string{
	testinfra.Legacy: "IPv4 IPv6 Bool DateTime64(3)",
	testinfra.Modern: "",
}

func testTypesRoundTrip(t *testing.T, ch *testinfra.ClickHouse, transport, compression string) {
	ctx := context.Background()
	s := newSink(t, ch, transport, func(c *clickhouse.Config) { c.Compression = compression })
	prefix := transport + "_" + compression + "_"
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()

	var acked atomic.Int64
	tested, unsupported := 0, []string{}
	for i, tc := range typeCases {
		src, dst := fmt.Sprintf("%ssrc%d", prefix, i), fmt.Sprintf("%sdst%d", prefix, i)
		ddl := "CREATE TABLE %s (id UInt32, v %s) ENGINE = MergeTree ORDER BY id"
		if err := ch.Exec(ctx, fmt.Sprintf(ddl, src, tc.typ)); err != nil {
			if strings.Contains(err.Error(), "Unknown data type") || strings.Contains(err.Error(), "UNKNOWN_TYPE") {
				unsupported = append(unsupported, tc.typ)
				continue
			}
			t.Fatalf("%s: %v", tc.typ, err)
		}
		if err := ch.Exec(ctx, fmt.Sprintf(ddl, dst, tc.typ)); err != nil {
			t.Fatal(err)
		}
		for j, v := range tc.values {
			if err := ch.Exec(ctx, fmt.Sprintf("INSERT INTO %s VALUES (%d, %s)", src, j, v)); err != nil {
				t.Fatalf("%s value %s: %v", tc.typ, v, err)
			}
		}
		table, err := s.Table(ctx, dst)
		if err != nil {
			t.Fatalf("%s: %v", tc.typ, err)
		}
		block := s.NewBlock(table)
		for j := range tc.values {
			row, err := ch.Query(ctx, fmt.Sprintf("SELECT id, v FROM %s WHERE id = %d FORMAT RowBinary", src, j))
			if err != nil {
				t.Fatal(err)
			}
			if err := block.AppendRow([]byte(row)); err != nil {
				t.Fatalf("%s value %s: %v", tc.typ, tc.values[j], err)
			}
		}
		if err := s.Send(ctx, clickhouse.NewChunk(block, []clickhouse.Ack{countAck{&acked}})); err != nil {
			t.Fatal(err)
		}
		tested++
		waitFor(t, func() bool { return acked.Load() == int64(tested) }, 20*time.Second, "insert of "+tc.typ)
		want, err := ch.Query(ctx, fmt.Sprintf("SELECT id, v FROM %s ORDER BY id FORMAT TSV", src))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ch.Query(ctx, fmt.Sprintf("SELECT id, v FROM %s ORDER BY id FORMAT TSV", dst))
		if err != nil {
			t.Fatal(err)
		}
		if got != want || strings.Count(got, "\n") != len(tc.values) {
			t.Errorf("%s: round trip\n got %q\nwant %q", tc.typ, got, want)
		}
	}
	t.Logf("round-tripped %d types; not known to ClickHouse %s: %v", tested, ch.Version, unsupported)
	if got, want := strings.Join(unsupported, " "), typesMissingOn[ch.Server]; got != want {
		t.Errorf("types ClickHouse %s does not know: %q, want %q", ch.Version, got, want)
	}
	s.Close()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

func waitFor(t testing.TB, cond func() bool, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSchemaErrors(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, testSchemaErrorsOn)
}

func testSchemaErrorsOn(t *testing.T, ch *testinfra.ClickHouse) {
	ctx := context.Background()
	if err := ch.Exec(ctx, "CREATE TABLE nested_tuple (id UInt8, t AggregateFunction(uniq, UInt64)) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	if err := ch.Exec(ctx, "CREATE TABLE computed (a UInt32, b UInt32 MATERIALIZED a * 2, c UInt32 ALIAS a + 1, d UInt32 DEFAULT a + 10) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) { testSchemaErrors(t, ch, tr) })
	}
}

func testSchemaErrors(t *testing.T, ch *testinfra.ClickHouse, transport string) {
	ctx := context.Background()
	s := newSink(t, ch, transport, nil)

	_, err := s.Table(ctx, "absent")
	var perm *clickhouse.PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "default.absent") {
		t.Errorf("missing table: err = %v, want a PermanentError naming default.absent", err)
	}

	// A type sluice cannot encode names the table, column and type.
	_, err = s.Table(ctx, "nested_tuple")
	if err == nil || !strings.Contains(err.Error(), "default.nested_tuple column t") || !strings.Contains(err.Error(), "AggregateFunction(uniq, UInt64)") {
		t.Errorf("unsupported type: err = %v", err)
	}

	// MATERIALIZED and ALIAS columns are left to the server.
	tbl, err := s.Table(ctx, "computed")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range tbl.Insert {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, ","); got != "a,d" {
		t.Errorf("insert columns = %s, want a,d", got)
	}
}

// TestTypeMismatchStopsLoudly inserts a block whose column no longer
// matches the table (the table changed after discovery): the sink stops with
// a permanent error naming the table instead of retrying forever.
//
// On servers that convert a block's columns to the table's types (26.9),
// the conversion's parse error (CANNOT_READ_ARRAY_FROM_TEXT here) is as
// permanent as 18.16's type mismatch.
func TestTypeMismatchStopsLoudly(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, func(t *testing.T, ch *testinfra.ClickHouse) {
		for _, tr := range transports {
			t.Run(tr, func(t *testing.T) { testTypeMismatchStopsLoudly(t, ch, tr) })
		}
	})
}

func testTypeMismatchStopsLoudly(t *testing.T, ch *testinfra.ClickHouse, transport string) {
	ctx := context.Background()
	if err := ch.Exec(ctx, "CREATE TABLE drift (a UInt32, s String) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, ch, transport, nil)
	tbl, err := s.Table(ctx, "drift")
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Exec(ctx, "DROP TABLE drift"); err != nil {
		t.Fatal(err)
	}
	defer ch.Exec(ctx, "DROP TABLE drift")
	if err := ch.Exec(ctx, "CREATE TABLE drift (a UInt32, s Array(UInt8)) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	b := s.NewBlock(tbl)
	if err := b.AppendRow([]byte{1, 0, 0, 0, 1, 'x'}); err != nil {
		t.Fatal(err)
	}
	var (
		lastErr  atomic.Value
		failures atomic.Int64
	)
	s.OnInsert(func(e *clickhouse.InsertEvent) {
		if e.Err != nil {
			lastErr.Store(e.Err.Error())
			failures.Add(1)
		}
	})
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()
	if err := s.Send(ctx, clickhouse.NewChunk(b, nil)); err != nil {
		t.Fatal(err)
	}
	// A permanent error parks the insert (its rows held, unacked) after one
	// attempt and the sink goes on; a retryable one would be retried with
	// backoff and never parked. Counting attempts, not time, holds on a
	// loaded machine.
	for !strings.Contains(s.Failing(), "default.drift") || clickhouse.ParkedRows(s, tbl) != 1 {
		if failures.Load() >= 3 {
			t.Fatalf("a type mismatch was retried %d times instead of parked as permanent; last error: %v", failures.Load(), lastErr.Load())
		}
		select {
		case err := <-runDone:
			t.Fatalf("Run returned on a type mismatch (%v); it must park the insert and go on", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if msg := s.Failing(); !strings.Contains(msg, "held after a permanent error") {
		t.Errorf("Failing() = %q, want it to say the rows are held after a permanent error", msg)
	}
}

// TestAuthFailureStopsAtOnce: a wrong password is a PermanentError at New,
// not a retry until connect_timeout, over both transports.
func TestAuthFailureStopsAtOnce(t *testing.T) {
	testinfra.EachClickHouse(t, testinfra.ClickHouseOptions{}, testAuthFailureStopsAtOnce)
}

func testAuthFailureStopsAtOnce(t *testing.T, ch *testinfra.ClickHouse) {
	for _, tr := range transports {
		start := time.Now()
		_, err := clickhouse.New(context.Background(), clickhouse.Config{Transport: tr, Addr: ch.Addr, HTTPAddr: ch.HTTPAddr,
			User: "default", Password: "wrong", ConnectTimeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
		var perm *clickhouse.PermanentError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), "193") && !strings.Contains(strings.ToLower(err.Error()), "password") {
			t.Errorf("%s: err = %v, want a PermanentError about the password", tr, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %s to fail", tr, d)
		}
	}
}
