package clickhouse

import (
	"bytes"
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

// TestSensorBlockMatchesChGo checks that a chunk of the sensor-batch
// workload goes to the server as the very bytes ch-go sends for the same
// rows (the rig's floor arm and BenchmarkServerInsertCPU compare the
// server's CPU for the two): every column's Native encoding, the
// LowCardinality dictionaries and keys included.
func TestSensorBlockMatchesChGo(t *testing.T) {
	const batches = 167
	tbl, err := NewTable("db", "sensor_events", sensorColumns)
	if err != nil {
		t.Fatal(err)
	}
	blk := tbl.NewBlock()
	for _, r := range sensorRows(batches) {
		if err := blk.AppendRow(r); err != nil {
			t.Fatal(err)
		}
	}
	sub := blk.parts[0]
	ours := tbl.plan.input(sub)
	for i := range ours {
		ours[i].Data = sub.lowCardinality(tbl.plan, i, ours[i].Data)
	}
	cols := sensor.NewNativeColumns(sensor.LayoutModern)
	for h, r := range sensor.Rows(batches, sensor.DrainSendTsUs) {
		cols.Append(r, h)
	}
	theirs := cols.Input()
	if len(ours) != len(theirs) || sub.rows != cols.Rows() {
		t.Fatalf("%d columns of %d rows, ch-go's %d of %d", len(ours), sub.rows, len(theirs), cols.Rows())
	}
	encode := func(c proto.ColInput) []byte {
		if p, ok := c.(proto.Preparable); ok {
			if err := p.Prepare(); err != nil {
				t.Fatal(err)
			}
		}
		var b proto.Buffer
		if s, ok := c.(proto.StateEncoder); ok {
			s.EncodeState(&b)
		}
		c.EncodeColumn(&b)
		return b.Buf
	}
	for i := range ours {
		a, b := encode(ours[i].Data), encode(theirs[i].Data)
		if ours[i].Name != theirs[i].Name || ours[i].Data.Type() != theirs[i].Data.Type() || !bytes.Equal(a, b) {
			t.Errorf("column %s %s: %d bytes, ch-go's %s %s %d bytes, equal %v",
				ours[i].Name, ours[i].Data.Type(), len(a), theirs[i].Name, theirs[i].Data.Type(), len(b), bytes.Equal(a, b))
		}
	}
}
