package sensor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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
