package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// logsTable is the schema the host passes for schema.sql.
var logsTable = sluicetest.Table{Name: "logs", Columns: []sluicetest.Column{
	{Name: "ts", Type: "DateTime"},
	{Name: "service", Type: "LowCardinality(String)"},
	{Name: "level", Type: "LowCardinality(String)"},
	{Name: "template", Type: "String"},
	{Name: "fingerprint", Type: "UInt64"},
	{Name: "msg", Type: "String"},
	{Name: "attrs.key", Type: "Array(String)"},
	{Name: "attrs.value", Type: "Array(String)"},
}}

func sampleRecords(t testing.TB) []sluicetest.Record {
	f, err := os.Open("sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []sluicetest.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		recs = append(recs, sluicetest.Record{
			Offset:    int64(len(recs)),
			Timestamp: 1714564815000, // 2024-05-01T12:00:15Z
			Value:     bytes.Clone(sc.Bytes()),
		})
	}
	return recs
}

func newInstance(t testing.TB, tables ...sluicetest.Table) *sluice.Instance {
	in := sluice.NewInstance(&module{})
	if msg := in.Init(sluicetest.InitPayload(nil, tables)); msg != "" {
		t.Fatalf("init refused: %s", msg)
	}
	return in
}

// TestSample runs sample.jsonl through the module as the host would and
// checks every row against what ClickHouse would store.
func TestSample(t *testing.T) {
	in := newInstance(t, sluicetest.Table{Name: "other"}, logsTable)
	recs := sampleRecords(t)
	res, err := sluicetest.DecodeOutput(in.Transform(sluicetest.BatchPayload("logs", 0, recs)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, r := range res {
		if r.Failed {
			got = append(got, fmt.Sprintf("%d error: %s", i, r.Err))
			continue
		}
		if len(r.Rows) != 1 || r.Rows[0].Table != 1 {
			t.Fatalf("record %d: %+v", i, r)
		}
		v, err := sluicetest.DecodeRow(logsTable.Columns, r.Rows[0].Data)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		// ts service level template msg attrs.key attrs.value (fingerprint checked apart)
		got = append(got, fmt.Sprintf("%d %s|%v|%v|%v|%q|%v|%v", i,
			v[0].(time.Time).Format("15:04:05"), v[1], v[2], v[3], v[5], v[6], v[7]))
	}
	want := []string{
		`0 12:00:00|api|info|GET /users/<num> served in <num>ms|"GET /users/42 served in 12ms"|[path status]|[/users/42 200]`,
		`1 12:00:01|api|info|GET /users/<num> served in <num>ms|"GET /users/7 served in 3ms"|[path status]|[/users/7 200]`,
		`2 12:00:02|api|warn|slow query took <num>ms|"slow query took 1532.5ms"|[db rows]|[users 1024]`,
		`3 12:00:03|billing|error|charge <hex> failed: card declined|"charge 5f3a9c7e2b1d4e60 failed: card declined"|[amount customer]|[19.99 cus_123]`,
		`4 12:00:04|billing|error|charge <hex> failed: card declined|"charge 0a1b2c3d4e5f6789 failed: card declined"|[amount customer]|[5 cus_456]`,
		`5 12:00:05|auth|debug|session <uuid> refreshed for user <str>|"session 3f2504e0-4f89-11d3-9a0c-0305e82c3301 refreshed for user 'alice'"|[]|[]`,
		`6 12:00:06|auth|debug|session <uuid> refreshed for user <str>|"session 16fd2706-8baf-433b-82eb-8c7fada847da refreshed for user 'bob'"|[]|[]`,
		`7 12:00:07|gateway|warn|connection from <ip> reset|"connection from 10.0.0.17:51234 reset"|[peer]|[{"ip":"10.0.0.17","port":51234}]`,
		`8 12:00:08|gateway|warn|connection from <ip> reset|"connection from 2001:db8::8a2e:370:7334 reset"|[tags]|[["ipv6","edge"]]`,
		`9 12:00:09|storage|fatal|disk /dev/sda1 at <num>% capacity|"disk /dev/sda1 at 97% capacity"|[host]|[db-1]`,
		`10 12:00:10|storage|fatal|unrecoverable error at offset <hex>|"unrecoverable error at offset 0x7ffe5a3c"|[]|[]`,
		`11 12:00:11|worker|info|job <str> finished after <num> retries|"job \"nightly-report\" finished after 3 retries"|[job_id]|[17]`,
		`12 12:00:12|worker|info|queue depth is <num> (expected >= <num>)|"queue depth is -3 (expected >= 0)"|[]|[]`,
		`13 12:00:13|worker|trace|tick|"tick"|[]|[]`,
		`14 12:00:14|unknown|info|no service and an empty level|"no service and an empty level"|[]|[]`,
		`15 12:00:15|cron|info|no ts: the Kafka timestamp is used|"no ts: the Kafka timestamp is used"|[]|[]`,
		`16 12:00:16|cron|unknown|unknown level été 🚀 line1
line2|"unknown level été 🚀 line1\nline2"|[]|[]`,
		`17 12:00:17|pino-app|info|request completed|"request completed"|[req responseTime]|[{"id":1,"method":"GET"} 4.2]`,
		`18 error: log line has no "msg" field (or it is null)`,
		`19 error: value is not a JSON object`,
		`20 error: ts "yesterday" is neither RFC 3339 nor a number of (milli)seconds since the epoch`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d:\n\t got %s\n\twant %s", i, got[i], want[i])
		}
	}
	// Lines with the same template share a fingerprint; others do not.
	fp := func(i int) uint64 {
		v, _ := sluicetest.DecodeRow(logsTable.Columns, res[i].Rows[0].Data)
		return v[4].(uint64)
	}
	if fp(0) != fp(1) || fp(3) != fp(4) || fp(5) != fp(6) || fp(7) != fp(8) || fp(0) == fp(2) {
		t.Error("fingerprints do not follow templates")
	}
}

func TestTsOutOfRange(t *testing.T) {
	in := newInstance(t, logsTable)
	res, err := sluicetest.DecodeOutput(in.Transform(sluicetest.BatchPayload("logs", 0, []sluicetest.Record{
		{Value: []byte(`{"msg":"x","ts":"1969-12-31T23:59:59Z"}`)},
		{Value: []byte(`{"msg":"x","ts":"2106-02-07T06:28:16Z"}`)},
		{Value: []byte(`{"msg":"x","ts":"2106-02-07T06:28:15Z"}`)},
	})))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"ts -1 is outside the range of DateTime (1970 to 2106)", "ts 4294967296 is outside the range of DateTime (1970 to 2106)", ""} {
		if res[i].Err != want {
			t.Errorf("record %d: %+v, want %q", i, res[i], want)
		}
	}
}

func TestInitRefusesOtherSchemas(t *testing.T) {
	renamed := sluicetest.Table{Name: "logs", Columns: append([]sluicetest.Column(nil), logsTable.Columns...)}
	renamed.Columns[3].Type = "LowCardinality(String)"
	renamed.Columns = renamed.Columns[:7]
	tests := []struct {
		params []sluicetest.Param
		tables []sluicetest.Table
		want   string
	}{
		{nil, nil, `sluice: the pipeline has no target table "logs" (tables: none)`},
		{nil, []sluicetest.Table{{Name: "events"}}, `sluice: the pipeline has no target table "logs" (tables: "events")`},
		{nil, []sluicetest.Table{renamed}, `log-normalize needs the table of examples/log-normalize/schema.sql: sluice: table "logs" does not have the columns this module writes: ` +
			`column #4 is template LowCardinality(String), want template String; missing column #8 attrs.value Array(String)`},
		{[]sluicetest.Param{{Key: "table", Value: "logs_v2"}}, []sluicetest.Table{logsTable}, `sluice: the pipeline has no target table "logs_v2" (tables: "logs")`},
	}
	for _, tt := range tests {
		in := sluice.NewInstance(&module{})
		if got := in.Init(sluicetest.InitPayload(tt.params, tt.tables)); got != tt.want {
			t.Errorf("Init:\n\t got %s\n\twant %s", got, tt.want)
		}
	}
	in := sluice.NewInstance(&module{})
	named := logsTable
	named.Name = "logs_v2"
	if got := in.Init(sluicetest.InitPayload([]sluicetest.Param{{Key: "table", Value: "logs_v2"}}, []sluicetest.Table{named})); got != "" {
		t.Errorf("table parameter: %s", got)
	}
}

// BenchmarkModule is the module's whole per-batch path, natively: the SDK's
// decoding and row writing around normalize.Normalize, for the 18 valid
// lines of sample.jsonl.
func BenchmarkModule(b *testing.B) {
	benchTransform(b, sampleRecords(b)[:18])
}

// BenchmarkModuleBatch is the native baseline of wasmhost's
// BenchmarkLogNormalize: the same handler on the same input, sample.jsonl
// (all 21 lines, the 3 dead-lettered ones too) repeated to batches of 1000
// records, through the SDK's decoding and row writing, without wasm.
func BenchmarkModuleBatch(b *testing.B) {
	sample := sampleRecords(b)
	recs := make([]sluicetest.Record, 1000)
	for i := range recs {
		recs[i] = sample[i%len(sample)]
		recs[i].Offset = int64(i)
	}
	benchTransform(b, recs)
}

// benchTransform times the module's Transform of recs as one batch and
// reports the wall and CPU time per record.
func benchTransform(b *testing.B, recs []sluicetest.Record) {
	batch := sluicetest.BatchPayload("logs", 0, recs)
	in := newInstance(b, logsTable)
	in.Transform(batch)
	b.SetBytes(int64(len(batch)))
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		in.Transform(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	if cpu0 > 0 {
		b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*len(recs)), "cpu-ns/record")
	}
}
