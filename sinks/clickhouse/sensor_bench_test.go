package clickhouse

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/ClickHouse/ch-go/compress"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/benchmarks/sensor"
)

// sensorColumns are the insert columns of the sensor-batch workload's
// modern table (../shared/workloads/sensor-batch).
var sensorColumns = []Column{
	{Name: "batch_id", Type: "UInt64"}, {Name: "event_seq", Type: "UInt16"},
	{Name: "sensor", Type: "LowCardinality(String)"}, {Name: "region", Type: "LowCardinality(String)"},
	{Name: "name_upper", Type: "LowCardinality(String)"}, {Name: "unit", Type: "LowCardinality(String)"},
	{Name: "value", Type: "Int64"}, {Name: "value_scaled", Type: "Int64"},
	{Name: "quality", Type: "Nullable(Float64)"}, {Name: "tags", Type: "Array(LowCardinality(String))"},
	{Name: "batch_ts", Type: "DateTime64(3)"}, {Name: "send_ts", Type: "DateTime64(6)"},
}

// sensorRows returns the RowBinary rows the workload's transform makes of
// batches [0, batches), as a module writes them.
func sensorRows(batches uint64) [][]byte {
	var rows [][]byte
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	for h, r := range sensor.Rows(batches, sensor.DrainSendTsUs) {
		row := binary.LittleEndian.AppendUint64(nil, r.BatchID)
		row = binary.LittleEndian.AppendUint16(row, r.EventSeq)
		row = str(str(str(str(row, r.Sensor), r.Region), r.NameUpper), r.Unit)
		row = binary.LittleEndian.AppendUint64(row, uint64(r.Value))
		row = binary.LittleEndian.AppendUint64(row, uint64(r.ValueScaled))
		if r.QualityNull {
			row = append(row, 1)
		} else {
			row = binary.LittleEndian.AppendUint64(append(row, 0), math.Float64bits(r.Quality))
		}
		row = binary.AppendUvarint(row, uint64(len(r.Tags)))
		for _, t := range r.Tags {
			row = str(row, t)
		}
		row = binary.LittleEndian.AppendUint64(row, uint64(h.BatchTsMs))
		row = binary.LittleEndian.AppendUint64(row, uint64(r.SendTsUs))
		rows = append(rows, row)
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
