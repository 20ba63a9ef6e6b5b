package main

import (
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// BenchmarkNative runs the conformance module natively on the batch of
// guest-sdk/conformance's BenchmarkSDKs (benchScript is the same), for the
// Go SDK's wasm-vs-native ratio.
func BenchmarkNative(b *testing.B) {
	const rowsPerRecord, records = 10, 200
	le := binary.LittleEndian
	script := func(rec int) []byte {
		var p []byte
		str := func(s string) { p = le.AppendUint32(p, uint32(len(s))); p = append(p, s...) }
		for i := 0; i < rowsPerRecord; i++ {
			p = le.AppendUint16(append(p, 'R'), 0)
			p = le.AppendUint32(append(p, 'T'), uint32(1700000000+rec))
			p = append(p, 's')
			str("device-" + strconv.Itoa(rec%64))
			p = append(p, 's')
			str("temperature")
			p = le.AppendUint64(append(p, 'j'), math.Float64bits(20+float64(i)/8))
			p = le.AppendUint64(append(p, 'd'), uint64(rec*rowsPerRecord+i))
			p = le.AppendUint32(append(p, 'A'), 2)
			p = append(p, 's')
			str("site=ams")
			p = append(p, 's')
			str("rack=" + strconv.Itoa(i))
			p = append(p, 'E')
		}
		return p
	}
	var recs []sluicetest.Record
	for i := 0; i < records; i++ {
		recs = append(recs, sluicetest.Record{Offset: int64(i), Timestamp: 1700000000000, Value: script(i)})
	}
	in := sluice.NewInstance(&module{})
	table := sluicetest.Table{Name: "sensor", Columns: []sluicetest.Column{
		{Name: "ts", Type: "DateTime"}, {Name: "device", Type: "LowCardinality(String)"}, {Name: "metric", Type: "String"},
		{Name: "value", Type: "Float64"}, {Name: "seq", Type: "UInt64"}, {Name: "tags", Type: "Array(String)"},
	}}
	if msg := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{table})); msg != "" {
		b.Fatal(msg)
	}
	batch := sluicetest.BatchPayload("sensor", 0, recs)
	res, err := sluicetest.DecodeOutput(in.Transform(batch))
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range res {
		if r.Failed || len(r.Rows) != rowsPerRecord {
			b.Fatalf("record %d: %+v", i, r)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		in.Transform(batch)
	}
	b.ReportMetric(float64(b.N*records*rowsPerRecord)/time.Since(start).Seconds(), "rows/s")
}
