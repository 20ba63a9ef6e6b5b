package sluice_test

import (
	"fmt"
	"testing"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// benchHandler writes one row per record, touching every part of the record.
type benchHandler struct{ t *sluice.Table }

var benchTable = sluicetest.Table{Name: "events", Columns: []sluicetest.Column{
	{Name: "ts", Type: "DateTime"},
	{Name: "topic", Type: "LowCardinality(String)"},
	{Name: "offset", Type: "UInt64"},
	{Name: "key", Type: "Nullable(String)"},
	{Name: "value", Type: "String"},
	{Name: "header_keys", Type: "Array(String)"},
	{Name: "header_values", Type: "Array(String)"},
}}

func (h *benchHandler) Init(cfg *sluice.Config) (err error) {
	h.t, err = cfg.Table("events")
	return err
}

func (h *benchHandler) Transform(rec *sluice.Record, out *sluice.Output) error {
	w := out.Row(h.t).DateTime(uint32(rec.Timestamp / 1000)).String(rec.Topic).UInt64(uint64(rec.Offset))
	if len(rec.Key) == 0 {
		w.Null()
	} else {
		w.Bytes(rec.Key)
	}
	w.Bytes(rec.Value).BeginArray(len(rec.Headers))
	for _, hd := range rec.Headers {
		w.String(hd.Key)
	}
	w.BeginArray(len(rec.Headers))
	for _, hd := range rec.Headers {
		w.Bytes(hd.Value)
	}
	return w.End()
}

func benchSetup(tb testing.TB, n int) (*sluice.Instance, []byte) {
	in := sluice.NewInstance(&benchHandler{})
	if msg := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{benchTable})); msg != "" {
		tb.Fatal(msg)
	}
	recs := make([]sluicetest.Record, n)
	for i := range recs {
		recs[i] = sluicetest.Record{
			Offset: int64(i), Timestamp: 1700000000000 + int64(i),
			Value:   fmt.Appendf(nil, `{"level":"info","msg":"request %d served in 12ms"}`, i),
			Headers: []sluicetest.Header{{Key: "trace", Value: []byte("abc")}, {Key: "src", Value: []byte("web")}},
		}
		if i%2 == 0 {
			recs[i].Key = []byte("user-42")
		}
	}
	return in, sluicetest.BatchPayload("logs", 7, recs)
}

// BenchmarkTransform measures the SDK's per-batch path: decoding a batch of
// 100 records, calling the handler, writing and checking a 7-column row per
// record. It reports 0 allocs/op once the reused buffers have grown.
func BenchmarkTransform(b *testing.B) {
	const n = 100
	in, batch := benchSetup(b, n)
	in.Transform(batch) // grow the reused buffers
	b.ReportAllocs()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for b.Loop() {
		in.Transform(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}

// TestTransformAllocs enforces what BenchmarkTransform shows: no allocation
// per batch or per record in the SDK's path.
func TestTransformAllocs(t *testing.T) {
	in, batch := benchSetup(t, 100)
	out, err := sluicetest.DecodeOutput(in.Transform(batch))
	if err != nil || len(out) != 100 || out[0].Failed || len(out[0].Rows) != 1 {
		t.Fatalf("%v %+v", err, out[0])
	}
	if _, err := sluicetest.DecodeRow(benchTable.Columns, out[0].Rows[0].Data); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(20, func() { in.Transform(batch) }); a != 0 {
		t.Errorf("%v allocations per batch, want 0", a)
	}
}
