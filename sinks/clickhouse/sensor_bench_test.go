package clickhouse

import (
	"bytes"
	"io"
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

// sensorInsert is an insert of the sensor-batch drain's shape: parts of
// 167 batches (a default chunk) of one partition each (batch_id % 8), the
// partitions' parts in turn, as sluice consumes a prefilled topic; parts
// parts in all.
func sensorInsert(b *testing.B, tbl *Table, parts int) *openInsert {
	b.Helper()
	const batches, partitions = 167, 8
	ins := &openInsert{t: tbl}
	for i := range parts {
		p, round := uint64(i%partitions), uint64(i/partitions)
		sub := tbl.newSubBlock()
		for j := range uint64(batches) {
			batch := (round*batches+j)*partitions + p
			h := sensor.MakeBatch(batch, sensor.DrainSendTsUs(batch))
			for s := range sensor.EventsPerBatch {
				e := sensor.MakeEvent(batch, s)
				if r, ok := sensor.Transform(&h, &e); ok {
					if err := sub.appendRow(tbl, sensor.AppendRowBinary(nil, &h, &r)); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
		ins.parts = append(ins.parts, &part{sub: sub})
		ins.rows += sub.rows
	}
	return ins
}

// BenchmarkSensorInsertEncode is the sink's work to encode an insert of
// the drain's shape (56 parts, about 690,000 rows, the size of the 26.9
// drain's inserts) for a plain native connection: "joined", the parts'
// columns as they are (ADR 0005's one-block insert, its LowCardinality
// granules encoded as each part joins); "sorted", the rows in the
// table's key order (sort_rows: key), their sort and every column
// gathered in that order. Per row of the insert.
//
//	go test -run '^$' -bench SensorInsertEncode -benchtime 20x ./sinks/clickhouse/
func BenchmarkSensorInsertEncode(b *testing.B) {
	tbl, err := NewTable("db", "sensor_events", sensorColumns)
	if err != nil {
		b.Fatal(err)
	}
	if tbl.sortKey, _ = parseSortKey("sensor, batch_ts, batch_id, event_seq", tbl); tbl.sortKey == nil {
		b.Fatal("the sensor table's key is not sortable")
	}
	ins := sensorInsert(b, tbl, 56)
	send := func(b *testing.B, blocks func() proto.Input) {
		w := proto.NewWriter(io.Discard, new(proto.Buffer))
		for in := blocks(); in != nil; in = blocks() {
			for _, c := range in {
				if s, ok := c.Data.(proto.StateEncoder); ok {
					w.ChainBuffer(s.EncodeState)
				}
				c.Data.WriteColumn(w)
			}
			if _, err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	perRow := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ins.rows), "ns/row")
	}
	nc := &nativeConn{}
	columns := func(sub *subBlock, in proto.Input) {
		for i := range in {
			in[i].Data = sub.lowCardinality(tbl.plan, i, in[i].Data)
		}
	}
	b.Run("joined", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			j := &blockJoiner{nc: nc, plan: tbl.plan, columns: columns, parts: ins.parts}
			send(b, j.next)
		}
		perRow(b)
	})
	var e sortedEncoder
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !e.start(tbl.plan, ins, false, true) {
				b.Fatal("the insert's rows are in key order already")
			}
			send(b, e.next)
			if err := e.finish(); err != nil {
				b.Fatal(err)
			}
		}
		perRow(b)
	})
	b.Run("sort-only", func(b *testing.B) {
		subs := make([]*subBlock, len(ins.parts))
		for i, p := range ins.parts {
			subs[i] = p.sub
		}
		for b.Loop() {
			e.runs = e.sorter.runs(e.sorter.sort(tbl.sortKey, subs), e.runs)
		}
		perRow(b)
	})
}
