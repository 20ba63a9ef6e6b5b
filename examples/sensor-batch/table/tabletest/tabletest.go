// Package tabletest holds what the sensor-batch modules' tests share: the
// host's view of the tables, the golden corpus and rows
// (examples/sensor-batch/testdata, written by benchmarks/sensor from the
// workload's formulas), and the checks and the benchmark of a Handler
// against them.
package tabletest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/examples/sensor-batch/table"
	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// Table is the table as the host passes it for the given layout.
func Table(name string, cols []sluice.Column) sluicetest.Table {
	t := sluicetest.Table{Name: name}
	for _, c := range cols {
		t.Columns = append(t.Columns, sluicetest.Column{Name: c.Name, Type: c.Type})
	}
	return t
}

// Table18 is sensor_events in the ClickHouse 18.16 layout; TableModern in
// the reference layout of a modern ClickHouse (DateTime64).
var (
	Table18     = Table("sensor_events", table.Columns18)
	TableModern = Table("sensor_events", table.ColumnsModern)
)

// ReadCorpus reads a corpus file: messages, each after its length as a
// little-endian u32.
func ReadCorpus(tb testing.TB, path string) [][]byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var msgs [][]byte
	for len(b) > 0 {
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			tb.Fatalf("%s: truncated", path)
		}
		n := binary.LittleEndian.Uint32(b)
		msgs = append(msgs, b[4:4+n])
		b = b[4+n:]
	}
	return msgs
}

// Records makes one Kafka record per message.
func Records(msgs [][]byte) []sluicetest.Record {
	recs := make([]sluicetest.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = sluicetest.Record{Offset: int64(i), Timestamp: 1772000000000, Value: m}
	}
	return recs
}

// NewInstance initialises h with the given tables, failing tb on a refusal.
func NewInstance(tb testing.TB, h sluice.Handler, params []sluicetest.Param, tables ...sluicetest.Table) *sluice.Instance {
	tb.Helper()
	in := sluice.NewInstance(h)
	if msg := in.Init(sluicetest.InitPayload(params, tables)); msg != "" {
		tb.Fatalf("init refused: %s", msg)
	}
	return in
}

// RowText renders a row decoded from RowBinary (sluicetest.DecodeRow over
// either layout) as a line of rows.txt, whose timestamps are the 18.16
// layout's: a modern row's batch_ts DateTime64(3) is split into seconds and
// milliseconds, and its send_ts DateTime64(6) is given in microseconds.
func RowText(v []any) string {
	if len(v) == len(table.ColumnsModern) {
		batchTs, sendTs := v[10].(time.Time), v[11].(time.Time)
		v = append(v[:10:10], batchTs.Truncate(time.Second), uint16(batchTs.Nanosecond()/1e6), sendTs.UnixMicro())
	}
	q := "NULL"
	if v[8] != nil {
		q = strconv.FormatFloat(v[8].(float64), 'g', -1, 64)
	}
	var tags []string
	for _, t := range v[9].([]any) {
		tags = append(tags, "'"+t.(string)+"'")
	}
	return strings.Join([]string{
		strconv.FormatUint(v[0].(uint64), 10), strconv.Itoa(int(v[1].(uint16))),
		v[2].(string), v[3].(string), v[4].(string), v[5].(string),
		strconv.FormatInt(v[6].(int64), 10), strconv.FormatInt(v[7].(int64), 10), q,
		"[" + strings.Join(tags, ",") + "]",
		strconv.FormatInt(v[10].(time.Time).Unix(), 10), strconv.Itoa(int(v[11].(uint16))),
		strconv.FormatInt(v[12].(int64), 10),
	}, "\t")
}

// Results runs the messages through in as one batch and returns a result
// per message.
func Results(tb testing.TB, in *sluice.Instance, msgs [][]byte) []sluicetest.Result {
	tb.Helper()
	res, err := sluicetest.DecodeOutput(in.Transform(sluicetest.BatchPayload("sensor", 0, Records(msgs))))
	if err != nil {
		tb.Fatal(err)
	}
	if len(res) != len(msgs) {
		tb.Fatalf("%d results for %d records", len(res), len(msgs))
	}
	return res
}

// Rows runs the messages through in as one batch and renders every row,
// failing tb on a record error. in must write the 18.16 layout.
func Rows(tb testing.TB, in *sluice.Instance, msgs [][]byte) []string {
	tb.Helper()
	return RowsIn(tb, in, msgs, Table18)
}

// RowsIn is Rows for an instance initialised with the table t.
func RowsIn(tb testing.TB, in *sluice.Instance, msgs [][]byte, t sluicetest.Table) []string {
	tb.Helper()
	res := Results(tb, in, msgs)
	var rows []string
	for i, r := range res {
		if r.Failed {
			tb.Fatalf("record %d failed: %s", i, r.Err)
		}
		for _, row := range r.Rows {
			if row.Table != 0 {
				tb.Fatalf("record %d: row for table %d", i, row.Table)
			}
			v, err := sluicetest.DecodeRow(t.Columns, row.Data)
			if err != nil {
				tb.Fatalf("record %d: %v", i, err)
			}
			rows = append(rows, RowText(v))
		}
	}
	return rows
}

// CheckGolden compares rows with testdata's rows.txt at path, line by line.
func CheckGolden(t *testing.T, rows []string, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "#") {
			want = append(want, sc.Text())
		}
	}
	for i := 0; i < max(len(rows), len(want)); i++ {
		var g, w string
		if i < len(rows) {
			g = rows[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("row %d:\n\t got %s\n\twant %s\n(%d rows, want %d)", i, g, w, len(rows), len(want))
		}
	}
	if len(want) == 0 {
		t.Fatal(fmt.Sprintf("%s has no rows", path))
	}
}

// CheckTruncations runs every proper prefix of msg through h and requires
// each to fail its record with no row: never a panic or a partial set of
// rows.
func CheckTruncations(t *testing.T, h sluice.Handler, msg []byte) {
	t.Helper()
	prefixes := make([][]byte, len(msg))
	for n := range prefixes {
		prefixes[n] = msg[:n]
	}
	for i, r := range Results(t, NewInstance(t, h, nil, Table18), prefixes) {
		if !r.Failed || len(r.Rows) != 0 {
			t.Fatalf("prefix of %d bytes: %+v", i, r)
		}
	}
}

// CheckNoAllocs requires that h allocates nothing per batch of msgs once
// its buffers have grown, in either layout.
func CheckNoAllocs(t *testing.T, h sluice.Handler, msgs [][]byte) {
	t.Helper()
	batch := sluicetest.BatchPayload("sensor", 0, Records(msgs))
	for _, tbl := range []sluicetest.Table{Table18, TableModern} {
		in := NewInstance(t, h, nil, tbl)
		in.Transform(batch)
		if a := testing.AllocsPerRun(20, func() { in.Transform(batch) }); a != 0 {
			t.Errorf("%d columns: %v allocations per batch, want 0", len(tbl.Columns), a)
		}
	}
}

// BenchModule measures h's whole per-batch path natively: the SDK's framing
// and row writer around the decoder and the transform, on the corpus file
// $SENSOR_CORPUS (as the rig writes it, to compare with wazero on the same
// bytes) or fallback, in calls of $SENSOR_BATCH_RECORDS records (default
// perCall). It reports events/s, which benchmarks/sensor's rig reads, and
// rows/s.
func BenchModule(b *testing.B, h sluice.Handler, fallback string, perCall int) {
	path := os.Getenv("SENSOR_CORPUS")
	if path == "" {
		path = fallback
	}
	msgs := ReadCorpus(b, path)
	if s := os.Getenv("SENSOR_BATCH_RECORDS"); s != "" {
		var err error
		if perCall, err = strconv.Atoi(s); err != nil || perCall <= 0 {
			b.Fatalf("SENSOR_BATCH_RECORDS=%q", s)
		}
	}
	in := NewInstance(b, h, nil, Table18)
	var calls [][]byte
	for i := 0; i < len(msgs); i += perCall {
		calls = append(calls, sluicetest.BatchPayload("sensor", 0, Records(msgs[i:min(i+perCall, len(msgs))])))
	}
	rows := 0
	for _, c := range calls {
		res, err := sluicetest.DecodeOutput(in.Transform(c))
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Failed {
				b.Fatal(r.Err)
			}
			rows += len(r.Rows)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in.Transform(calls[i%len(calls)])
	}
	recsPerCall := float64(len(msgs)) / float64(len(calls))
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)*recsPerCall*100/sec, "events/s")
	b.ReportMetric(float64(b.N)*recsPerCall*float64(rows)/float64(len(msgs))/sec, "rows/s")
}
