package main

import (
	"fmt"
	"strings"
	"testing"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

func table(name string, cols []sluice.Column) sluicetest.Table {
	t := sluicetest.Table{Name: name}
	for _, c := range cols {
		t.Columns = append(t.Columns, sluicetest.Column{Name: c.Name, Type: c.Type})
	}
	return t
}

var testTables = []sluicetest.Table{table("quotes", rawColumns), table("quotes_eod", eodColumns)}

func newInstance(t *testing.T) *sluice.Instance {
	t.Helper()
	in := sluice.NewInstance(&module{})
	if refusal := in.Init(sluicetest.InitPayload(nil, testTables)); refusal != "" {
		t.Fatal(refusal)
	}
	return in
}

// TestRows runs a batch through the module as the host would: a valid
// quote makes one row in each table; an invalid one is dead-lettered
// alone, with no row.
func TestRows(t *testing.T) {
	in := newInstance(t)
	out := in.Transform(sluicetest.BatchPayload("quotes", 3, []sluicetest.Record{
		{Offset: 41, Value: []byte(`{"symbol":"ACME","bid":101.25,"ask":101.2701,"ts":1772443800123,"say":"firm"}`)},
		{Offset: 42, Value: []byte(`{"symbol":"ACME","bid":101.25,"ask":101.2,"ts":1772443800124}`)},
		{Offset: 43, Value: []byte(`{"symbol":"GLOBX","bid":7,"ask":7,"ts":86400000}`)},
	}))
	res, err := sluicetest.DecodeOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results for 3 records", len(res))
	}
	if !res[1].Failed || !strings.Contains(res[1].Err, "crossed quote") || len(res[1].Rows) != 0 {
		t.Errorf("crossed quote: %+v", res[1])
	}
	want := [][]string{
		{"0 [ACME 2026-03-02 09:30:00.123 +0000 UTC 101.2500 101.2701 firm 3 41]", "1 [ACME 2026-03-02 00:00:00 +0000 UTC 1 101.26005 0.0201]"},
		nil,
		{"0 [GLOBX 1970-01-02 00:00:00 +0000 UTC 7.0000 7.0000  3 43]", "1 [GLOBX 1970-01-02 00:00:00 +0000 UTC 1 7.00000 0.0000]"},
	}
	for i, r := range res {
		var got []string
		for _, row := range r.Rows {
			v, err := sluicetest.DecodeRow(testTables[row.Table].Columns, row.Data)
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			got = append(got, fmt.Sprint(row.Table, " ", v))
		}
		if fmt.Sprint(got) != fmt.Sprint(want[i]) {
			t.Errorf("record %d:\n\t got %q\n\twant %q", i, got, want[i])
		}
	}
}

// TestRefusesOtherSchema: a table that is not schema.sql's is refused at
// init with the difference named.
func TestRefusesOtherSchema(t *testing.T) {
	eod := table("quotes_eod", eodColumns)
	eod.Columns[3].Type = "Float64"
	in := sluice.NewInstance(&module{})
	refusal := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{testTables[0], eod}))
	if !strings.Contains(refusal, "column #4 is mid_sum Float64, want mid_sum Decimal(38, 5)") {
		t.Errorf("refusal %q", refusal)
	}
	in = sluice.NewInstance(&module{})
	refusal = in.Init(sluicetest.InitPayload([]sluicetest.Param{{Key: "raw_table", Value: "ticks"}}, testTables))
	if !strings.Contains(refusal, "ticks") {
		t.Errorf("refusal for a missing raw table: %q", refusal)
	}
}
