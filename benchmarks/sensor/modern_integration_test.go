package sensor

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/testinfra"
)

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
