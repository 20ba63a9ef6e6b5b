package main

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/sensor-batch/table"
	"github.com/sluicehq/sluice/examples/sensor-batch/table/tabletest"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// TestGolden runs testdata/avro.bin through the module as the host would
// and compares every row with testdata/rows.txt, which benchmarks/sensor
// computes from the workload's formulas without decoding anything.
func TestGolden(t *testing.T) {
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.Table18)
	rows := tabletest.Rows(t, in, tabletest.ReadCorpus(t, "testdata/avro.bin"))
	tabletest.CheckGolden(t, rows, "testdata/rows.txt")
}

// TestGoldenModern is TestGolden into the modern layout: the same rows,
// with batch_ts and send_ts as DateTime64.
func TestGoldenModern(t *testing.T) {
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.TableModern)
	rows := tabletest.RowsIn(t, in, tabletest.ReadCorpus(t, "testdata/avro.bin"), tabletest.TableModern)
	tabletest.CheckGolden(t, rows, "testdata/rows.txt")
}

// TestGoldenRowWriter: with the module parameter writer=row, which
// writes with Output.Row instead of Output.Flat, the rows are the same, in
// both layouts; any other writer is refused.
func TestGoldenRowWriter(t *testing.T) {
	row := []sluicetest.Param{{Key: "writer", Value: "row"}}
	corpus := tabletest.ReadCorpus(t, "testdata/avro.bin")
	tabletest.CheckGolden(t, tabletest.Rows(t, tabletest.NewInstance(t, &module{}, row, tabletest.Table18), corpus), "testdata/rows.txt")
	in := tabletest.NewInstance(t, &module{}, row, tabletest.TableModern)
	tabletest.CheckGolden(t, tabletest.RowsIn(t, in, corpus, tabletest.TableModern), "testdata/rows.txt")
	refused := sluice.NewInstance(&module{}).Init(sluicetest.InitPayload([]sluicetest.Param{{Key: "writer", Value: "fast"}}, []sluicetest.Table{tabletest.Table18}))
	if want := `sensor-batch: parameter writer is "fast", want flat or row`; refused != want {
		t.Errorf("writer=fast: init said %q, want %q", refused, want)
	}
}

// TestModernRanges: a timestamp outside DateTime64's range (1900 to
// 2299) is dead-lettered in the modern layout; one before 1970, which
// the 18.16 layout refuses, is written.
func TestModernRanges(t *testing.T) {
	withSend := func(tsMs, sendUs int64) enc {
		return enc{0, 0, 0, 0, 1}.long(7).str("sensor-1").long(1).str("region-1").long(tsMs).long(sendUs).
			long(1).event(0, "ms", 0.5).long(0)
	}
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.TableModern)
	res := tabletest.Results(t, in, [][]byte{
		withSend(-1, 42),
		withSend(-2208988800001, 42),
		withSend(10413792000000, 42),
		withSend(1772000000007, 10413792000000000),
		withSend(1772000000007, 1772000000007000),
	})
	for i, want := range []string{"", "batch_ts_ms -2208988800001 is outside the range of DateTime64",
		"batch_ts_ms 10413792000000 is outside the range of DateTime64", "send_ts_us 10413792000000000 is outside the range of DateTime64", ""} {
		r := res[i]
		if want == "" {
			if r.Failed || len(r.Rows) != 1 {
				t.Errorf("record %d: %+v, want one row", i, r)
			}
			continue
		}
		if !r.Failed || len(r.Rows) != 0 || !strings.Contains(r.Err, want) {
			t.Errorf("record %d: %+v, want an error containing %q", i, r, want)
		}
	}
	v, err := sluicetest.DecodeRow(tabletest.TableModern.Columns, res[4].Rows[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tabletest.RowText(v), "7\t0\tsensor-1\tregion-1\tMETRIC_1\tms\t1000\t1000000\t0.5\t[]\t1772000000\t7\t1772000000007000"; got != want {
		t.Errorf("row:\n\t got %s\n\twant %s", got, want)
	}
}

// enc builds Avro by hand for the malformed cases.
type enc []byte

func (e enc) long(v int64) enc { return binary.AppendUvarint(e, uint64(v<<1)^uint64(v>>63)) }
func (e enc) str(s string) enc { return append(e.long(int64(len(s))), s...) }
func (e enc) dbl(f float64) enc {
	return binary.LittleEndian.AppendUint64(e, math.Float64bits(f))
}

func header(batchID, tsMs int64) enc {
	return enc{0, 0, 0, 0, 1}.long(batchID).str("sensor-1").long(1).str("region-1").long(tsMs).long(42)
}

// event appends one event: seq, name, unit, value, quality, tags.
func (e enc) event(seq int64, unit string, q float64, tags ...string) enc {
	e = e.long(seq).str("metric_1").str(unit).long(1000)
	if math.IsNaN(q) {
		e = e.long(0)
	} else {
		e = e.long(1).dbl(q)
	}
	if len(tags) > 0 {
		e = e.long(int64(len(tags)))
		for _, t := range tags {
			e = e.str(t)
		}
	}
	return e.long(0)
}

func run(t *testing.T, values ...[]byte) []sluicetest.Result {
	t.Helper()
	return tabletest.Results(t, tabletest.NewInstance(t, &module{}, nil, tabletest.Table18), values)
}

func TestMalformed(t *testing.T) {
	good := header(7, 1772000000007).long(1).event(0, "ms", 0.5, "a").long(0)
	for _, tt := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"empty", nil, "avro: empty message"},
		{"not framed", []byte(`{"batch_id":1}`), "avro: not Confluent wire format: first byte 0x7b"},
		{"schema id", append([]byte{0, 0, 0, 0, 2}, good[5:]...), "avro: schema id 2, want 1"},
		{"trailing", append(append([]byte(nil), good...), 0), "avro: 1 trailing bytes after the datum"},
		{"region union", enc{0, 0, 0, 0, 1}.long(7).str("s").long(2), "avro: region: union index is neither 0 (null) nor 1 (string)"},
		{"quality union", header(7, 0).long(1).long(0).str("n").str("u").long(1).long(5), "avro: quality: union index is neither 0 (null) nor 1 (double)"},
		{"negative length", enc{0, 0, 0, 0, 1}.long(7).long(-3), "avro: sensor: negative length -3"},
		{"long length", enc{0, 0, 0, 0, 1}.long(7).long(1 << 40), "avro: sensor: length 1099511627776 overruns the message"},
		{"varint overflow", enc{0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "avro: batch_id: varint overflows 64 bits at byte 5"},
		{"seq not an int", header(7, 0).long(1).long(1 << 40), "avro: seq: out of the range of an Avro int"},
		{"seq negative", header(7, 0).long(1).event(-1, "ms", 0.5).long(0), "event seq -1 is outside 0..65535"},
		{"seq too big", header(7, 0).long(1).event(65536, "ms", 0.5).long(0), "event seq 65536 is outside 0..65535"},
		{"negative batch", header(-1, 0).long(0), "batch_id -1 is negative"},
		{"ts before 1970", header(1, -1).long(0), "batch_ts_ms -1 is outside the range of DateTime"},
		{"ts after 2106", header(1, 4294967296000).long(0), "batch_ts_ms 4294967296000 is outside the range of DateTime"},
		{"block count min", header(7, 0).long(math.MinInt64), "avro: events: block count out of range"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, tt.value, good)
			if !res[0].Failed || !strings.Contains(res[0].Err, tt.want) {
				t.Errorf("got %+v, want an error containing %q", res[0], tt.want)
			}
			if res[1].Failed || len(res[1].Rows) != 1 {
				t.Errorf("the good record after it: %+v", res[1])
			}
		})
	}
}

// TestEveryTruncation checks that every proper prefix of a message is an
// error, never a panic or a partial set of rows.
func TestEveryTruncation(t *testing.T) {
	tabletest.CheckTruncations(t, &module{}, tabletest.ReadCorpus(t, "testdata/avro.bin")[3])
}

// TestBlocks decodes arrays written as several blocks, with negative
// counts followed by a byte size, as other Avro writers may.
func TestBlocks(t *testing.T) {
	first := enc(nil).event(0, "ms", math.NaN())
	msg := header(9, 1772000000009).long(-1).long(int64(len(first))).event(0, "ms", math.NaN()).
		long(2).event(1, "ms", 0.5, "x", "y").event(2, "drop", 0.9).
		long(-1).long(3).long(3).str("metric_1").str("ms").long(1000).long(0).long(-1).long(2).str("z").long(0).
		long(0)
	res := run(t, msg)
	if res[0].Failed || len(res[0].Rows) != 3 {
		t.Fatalf("%+v", res[0])
	}
	var tags []string
	for _, row := range res[0].Rows {
		v, err := sluicetest.DecodeRow(tabletest.Table18.Columns, row.Data)
		if err != nil {
			t.Fatal(err)
		}
		tags = append(tags, tabletest.RowText(v))
	}
	want := []string{
		"9\t0\tsensor-1\tregion-1\tMETRIC_1\tms\t1000\t1000000\tNULL\t[]\t1772000000\t9\t42",
		"9\t1\tsensor-1\tregion-1\tMETRIC_1\tms\t1000\t500000\t0.5\t['x','y']\t1772000000\t9\t42",
		"9\t3\tsensor-1\tregion-1\tMETRIC_1\tms\t1000\t250000\tNULL\t['z']\t1772000000\t9\t42",
	}
	for i := range want {
		if tags[i] != want[i] {
			t.Errorf("row %d:\n\t got %s\n\twant %s", i, tags[i], want[i])
		}
	}
}

func TestInit(t *testing.T) {
	modern := tabletest.Table("sensor_events", table.ColumnsModern)
	other := tabletest.Table("sensor_events", table.Columns18[:12])
	modernMicroBatch := tabletest.Table("sensor_events", append(append([]sluice.Column(nil), table.ColumnsModern[:10]...),
		sluice.Col("batch_ts", "DateTime64(6)"), sluice.Col("send_ts", "DateTime64(6)")))
	for _, tt := range []struct {
		params []sluicetest.Param
		tables []sluicetest.Table
		want   string
	}{
		{nil, []sluicetest.Table{tabletest.Table18}, ""},
		{[]sluicetest.Param{{Key: "table", Value: "se2"}}, []sluicetest.Table{tabletest.Table("se2", table.Columns18)}, ""},
		{nil, []sluicetest.Table{{Name: "logs"}}, `sluice: the pipeline has no target table "sensor_events" (tables: "logs")`},
		{nil, []sluicetest.Table{other}, `sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql: ` +
			`sluice: table "sensor_events" does not have the columns this module writes: missing column #13 send_ts_us Int64`},
		{nil, []sluicetest.Table{modern}, ""},
		{nil, []sluicetest.Table{modernMicroBatch}, `sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql (modern layout, DateTime64): ` +
			`sluice: table "sensor_events" does not have the columns this module writes: column #11 is batch_ts DateTime64(6), want batch_ts DateTime64(3)`},
	} {
		in := sluicetest.InitPayload(tt.params, tt.tables)
		if got := sluice.NewInstance(&module{}).Init(in); got != tt.want {
			t.Errorf("Init:\n\t got %s\n\twant %s", got, tt.want)
		}
	}
}

// TestAllocs: nothing is allocated per batch once the buffers have grown.
func TestAllocs(t *testing.T) {
	tabletest.CheckNoAllocs(t, &module{}, tabletest.ReadCorpus(t, "testdata/avro.bin"))
}

// BenchmarkModule is the module's whole per-batch path, natively, on calls
// of 200 records by default, about the 1 MiB the host hands over per call.
func BenchmarkModule(b *testing.B) {
	tabletest.BenchModule(b, &module{}, "testdata/avro.bin", 200)
}
