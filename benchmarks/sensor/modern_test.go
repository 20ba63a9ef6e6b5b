package sensor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
)

// modernTSV renders reference rows for the modern layout's columns: the
// 18.16 columns up to tags, then batch_ts and send_ts as DateTime64 text.
func modernTSV(rows []Row) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSuffix(tsv(rows), "\n"), "\n") {
		f := strings.Split(line, "\t")
		var sec, ms, us int64
		fmt.Sscan(f[12], &us)
		ts, _ := time.Parse(time.DateTime, f[10])
		sec = ts.Unix()
		fmt.Sscan(f[11], &ms)
		batchTs := time.UnixMilli(sec*1000 + ms).UTC().Format("2006-01-02 15:04:05.000")
		sendTs := time.UnixMicro(us).UTC().Format("2006-01-02 15:04:05.000000")
		b.WriteString(strings.Join(append(f[:10:10], batchTs, sendTs), "\t") + "\n")
	}
	return b.String()
}

// TestModernGatesOnServer inserts the reference rows into the published
// layout on ClickHouse 26.9 and checks that every gate passes with the
// modern GateSQL, that ingest_ts is filled to the microsecond, and that a
// send_ts off by one microsecond fails its gate.
func TestModernGatesOnServer(t *testing.T) {
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: testinfra.Modern})
	ctx := context.Background()
	const n = 300
	cols := "(batch_id, event_seq, sensor, region, name_upper, unit, value, value_scaled, quality, tags, batch_ts, send_ts)"
	landedModern := func(table string) Landed {
		t.Helper()
		out, err := ch.Query(ctx, CountSQL(table))
		if err != nil {
			t.Fatal(err)
		}
		var l Landed
		if l.Count, l.Distinct, err = ParseCount(out); err != nil {
			t.Fatal(err)
		}
		if out, err = ch.Query(ctx, LayoutModern.GateSQL(table, l.Count != l.Distinct)); err != nil {
			t.Fatal(err)
		}
		if err := ParseGate(out, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	rows := referenceRows(0, n)
	want := Expect(n, DrainSendTsUs)
	for _, tt := range []struct {
		table   string
		shiftUs int64
		fails   string
	}{{"se", 0, ""}, {"se_shifted", 1, "sum(send_ts_us)"}} {
		if err := ch.Exec(ctx, LayoutModern.DDL(tt.table)); err != nil {
			t.Fatal(err)
		}
		r := append([]Row(nil), rows...)
		r[7].SendTsUs += tt.shiftUs
		if err := ch.Insert(ctx, "INSERT INTO "+tt.table+" "+cols+" SETTINGS async_insert = 0 FORMAT TabSeparated", strings.NewReader(modernTSV(r))); err != nil {
			t.Fatal(err)
		}
		f := failed(Check(want, landedModern(tt.table), 0))
		if tt.fails == "" && f != nil {
			t.Errorf("%s: gates failed on the reference rows: %v", tt.table, f)
		}
		if tt.fails != "" && (len(f) != 1 || !strings.HasPrefix(f[0], tt.fails)) {
			t.Errorf("%s: failed gates %v, want only %s", tt.table, f, tt.fails)
		}
	}
	// ingest_ts is now64(6): sub-second digits, within a minute of now.
	out, err := ch.Query(ctx, "SELECT countIf(toUnixTimestamp64Micro(ingest_ts) % 1000000 != 0), "+
		"countIf(abs(toUnixTimestamp64Micro(ingest_ts) - toUnixTimestamp64Micro(now64(6))) < 60000000), count() FROM se FORMAT TSV")
	if err != nil {
		t.Fatal(err)
	}
	var frac, recent, all int
	fmt.Sscan(out, &frac, &recent, &all)
	if all != len(rows) || recent != all || frac == 0 {
		t.Errorf("ingest_ts: %d rows, %d within a minute, %d with sub-second digits", all, recent, frac)
	}
}

// TestModernGateSQL: the modern gate reads the DateTime64 columns where
// the 18.16 one reads batch_ts, batch_ts_ms and send_ts_us.
func TestModernGateSQL(t *testing.T) {
	q := LayoutModern.GateSQL("t", false)
	if strings.Contains(q, "send_ts_us") || strings.Contains(q, "batch_ts_ms") || !strings.Contains(q, "toUnixTimestamp64Micro(send_ts)") {
		t.Errorf("modern gate SQL: %s", q)
	}
	if Layout18.GateSQL("t", true) != GateSQL("t", true) {
		t.Error("the 18.16 gate SQL changed")
	}
}

// TestModernColumnsMatchDDL checks that ModernColumns are the modern
// table's insert columns, in order, with their types: every column of the
// CREATE TABLE but the MATERIALIZED ingest_ts.
func TestModernColumnsMatchDDL(t *testing.T) {
	ddl := LayoutModern.DDL("t")
	body := ddl[strings.Index(ddl, "(")+1 : strings.Index(ddl, ") ENGINE")]
	var got [][2]string
	for _, col := range strings.Split(body, ",") {
		name, typ, _ := strings.Cut(strings.TrimSpace(col), " ")
		if strings.Contains(typ, "MATERIALIZED") {
			continue
		}
		got = append(got, [2]string{name, typ})
	}
	if !slices.Equal(got, ModernColumns) {
		t.Errorf("the modern DDL's insert columns are %q, ModernColumns %q", got, ModernColumns)
	}
}
