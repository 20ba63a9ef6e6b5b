package clickhouse

import (
	"testing"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/benchmarks/sensor"
)

// sensorColumns are the insert columns of the sensor-batch workload's
// modern table (../shared/workloads/sensor-batch).
var sensorColumns = func() []Column {
	var cols []Column
	for _, c := range sensor.ModernColumns {
		cols = append(cols, Column{Name: c[0], Type: c[1]})
	}
	return cols
}()

// sensorRows returns the RowBinary rows the workload's transform makes of
// batches [0, batches), as a module writes them.
func sensorRows(batches uint64) [][]byte {
	var rows [][]byte
	for h, r := range sensor.Rows(batches, sensor.DrainSendTsUs) {
		rows = append(rows, sensor.AppendRowBinary(nil, h, r))
	}
	return rows
}

// BenchmarkSensorChunk is the sink's work on one chunk of the sensor-batch
// workload (167 batches, about 12,300 rows, near the 1 MiB chunk_bytes
// default), per row: decoding the module's RowBinary into the block
// ("append"), encoding the block in the Native format with its
// LowCardinality dictionaries ("encode"), and compressing that with LZ4
// as the native protocol sends it ("compress").
func BenchmarkSensorChunk(b *testing.B) {
	rows := sensorRows(167)
	tbl, err := NewTable("db", "sensor_events", sensorColumns)
	if err != nil {
		b.Fatal(err)
	}
	blk := tbl.NewBlock()
	fill := func() {
		blk.Reset()
		for _, r := range rows {
			if err := blk.AppendRow(r); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	var buf proto.Buffer
	encode := func() {
		buf.Reset()
		if err := blk.encodeNative(&buf); err != nil {
			b.Fatal(err)
		}
	}
	encode()
	perRow := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(rows)), "ns/row")
	}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fill()
		}
		perRow(b)
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encode()
		}
		perRow(b)
	})
	b.Run("compress", func(b *testing.B) {
		w := compress.NewWriter(compress.LevelZero, compress.LZ4)
		b.ReportAllocs()
		for b.Loop() {
			if err := w.Compress(buf.Buf); err != nil {
				b.Fatal(err)
			}
		}
		perRow(b)
	})
}
