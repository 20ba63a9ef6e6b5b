package sensor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-faster/city"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testinfra"
)

const nestedJSON = "<input_format_import_nested_json>1</input_format_import_nested_json>"

// TestCityHashMatchesServer checks the gates' producer-side hashes against
// the real server's cityHash64, for strings and for the quality bytes.
func TestCityHashMatchesServer(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	ctx := context.Background()
	strs := []string{"", "sensor-0", "sensor-1023", "region-6", "METRIC_31", "celsius", "tag-15", "é🚀"}
	var sel []string
	for _, s := range strs {
		sel = append(sel, "toString(cityHash64('"+s+"'))")
	}
	pcts := []int{0, 1, 7, 19, 20, 37, 50, 99}
	for _, p := range pcts {
		sel = append(sel, fmt.Sprintf("toString(cityHash64(reinterpretAsString(toFloat64(%d) / 100)))", p))
	}
	out, err := ch.Query(ctx, "SELECT "+strings.Join(sel, ", ")+" FORMAT TSV")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out)
	if len(got) != len(strs)+len(pcts) {
		t.Fatalf("answer %q", out)
	}
	for i, s := range strs {
		if want := strconv.FormatUint(city.CH64([]byte(s)), 10); got[i] != want {
			t.Errorf("cityHash64(%q): server %s, city.CH64 %s", s, got[i], want)
		}
	}
	for i, p := range pcts {
		if want := strconv.FormatUint(QualityHash(float64(p)/100), 10); got[len(strs)+i] != want {
			t.Errorf("quality %d/100: server %s, QualityHash %s", p, got[len(strs)+i], want)
		}
	}
}

// tsv renders reference rows for INSERT … FORMAT TabSeparated.
func tsv(rows []Row) string {
	var b strings.Builder
	for i := range rows {
		r := &rows[i]
		q := `\N`
		if !r.QualityNull {
			q = strconv.FormatFloat(r.Quality, 'g', -1, 64)
		}
		tags := make([]string, len(r.Tags))
		for j, tg := range r.Tags {
			tags[j] = "'" + tg + "'"
		}
		fmt.Fprintf(&b, "%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t[%s]\t%s\t%d\t%d\n",
			r.BatchID, r.EventSeq, r.Sensor, r.Region, r.NameUpper, r.Unit, r.Value, r.ValueScaled, q,
			strings.Join(tags, ","), time.Unix(int64(r.BatchTs), 0).UTC().Format(time.DateTime), r.BatchTsMs, r.SendTsUs)
	}
	return b.String()
}

func referenceRows(from, to uint64) []Row {
	var rows []Row
	for b := from; b < to; b++ {
		h := MakeBatch(b, DrainSendTsUs(b))
		for s := 0; s < EventsPerBatch; s++ {
			e := MakeEvent(b, s)
			if r, ok := Transform(&h, &e); ok {
				rows = append(rows, r)
			}
		}
	}
	return rows
}

func landed(t *testing.T, ch *testinfra.ClickHouse, table string) Landed {
	t.Helper()
	ctx := context.Background()
	out, err := ch.Query(ctx, CountSQL(table))
	if err != nil {
		t.Fatal(err)
	}
	var l Landed
	if l.Count, l.Distinct, err = ParseCount(out); err != nil {
		t.Fatal(err)
	}
	if out, err = ch.Query(ctx, GateSQL(table, l.Count != l.Distinct)); err != nil {
		t.Fatal(err)
	}
	if err := ParseGate(out, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func failed(gates []Gate) []string {
	var f []string
	for _, g := range gates {
		if !g.Pass {
			f = append(f, g.Name+" (want "+g.Want+", got "+g.Got+")")
		}
	}
	return f
}

// TestGatesOnServer inserts the reference rows into the 18.16 table and
// checks that every gate passes, that a duplicate is reported (and the
// other gates still hold over distinct rows), and that a wrong or extra
// row fails gates.
func TestGatesOnServer(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	ctx := context.Background()
	const n = 300
	if err := ch.Exec(ctx, DDL("se")); err != nil {
		t.Fatal(err)
	}
	cols := "(batch_id, event_seq, sensor, region, name_upper, unit, value, value_scaled, quality, tags, batch_ts, batch_ts_ms, send_ts_us)"
	insert := func(rows []Row) {
		t.Helper()
		if err := ch.Insert(ctx, "INSERT INTO se "+cols+" FORMAT TabSeparated", strings.NewReader(tsv(rows))); err != nil {
			t.Fatal(err)
		}
	}
	rows := referenceRows(0, n)
	insert(rows)
	want := Expect(n, DrainSendTsUs)
	if want.Rows != uint64(len(rows)) || want.Rows != ExpectedRows(n) {
		t.Fatalf("expectation of %d rows, reference transform %d", want.Rows, len(rows))
	}
	if f := failed(Check(want, landed(t, ch, "se"), 0)); f != nil {
		t.Fatalf("gates failed on the reference rows: %v", f)
	}

	insert(rows[100:101]) // a duplicate
	l := landed(t, ch, "se")
	if f := failed(Check(want, l, 0)); len(f) != 1 || !strings.HasPrefix(f[0], "duplicates") {
		t.Errorf("with one duplicate, failed gates %v, want only duplicates", f)
	}
	if f := failed(Check(want, l, 1)); f != nil {
		t.Errorf("one duplicate allowed: failed gates %v", f)
	}

	bad := referenceRows(n, n+1)[:1] // a row the expectation does not have
	bad[0].NameUpper = "metric_x"
	insert(bad)
	f := strings.Join(failed(Check(want, landed(t, ch, "se"), 1)), ", ")
	for _, g := range []string{"no_loss", "sum(value)", "sum(cityHash64(name_upper))"} {
		if !strings.Contains(f, g) {
			t.Errorf("an extra row does not fail %s (failed: %s)", g, f)
		}
	}
}

// TestKafkaEngineView runs the side-by-side arm's ClickHouse half on a
// small topic: the Kafka engine and the materialized view must land
// exactly the reference rows.
func TestKafkaEngineView(t *testing.T) {
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{ProfileSettings: nestedJSON})
	k := testinfra.KafkaT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n, partitions = 250, 2
	if err := k.CreateTopic(ctx, "sj", partitions); err != nil {
		t.Fatal(err)
	}
	cl, err := k.NewClient(kgo.DefaultProduceTopic("sj"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for b := uint64(0); b < n; b++ {
		r := &kgo.Record{Value: AppendJSON(nil, b, DrainSendTsUs(b)), Partition: int32(b % partitions)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ke := NewKafkaEngine("se")
	for _, q := range ke.DDL(k.Addr, "sj", "g", 1, 64) {
		if err := ch.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	want := Expect(n, DrainSendTsUs)
	for {
		out, err := ch.Query(ctx, "SELECT count() FROM se")
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := strconv.ParseUint(strings.TrimSpace(out), 10, 64); c >= want.Rows {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s rows landed of %d", strings.TrimSpace(out), want.Rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if f := failed(Check(want, landed(t, ch, "se"), 0)); f != nil {
		t.Errorf("gates failed: %v", f)
	}
}
