package sluice_test

import (
	"bytes"
	"fmt"
	"net/netip"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// events is a module that turns "kind tag tag… [@ip]" lines into rows of
// the table events.
type events struct {
	t *sluice.Table
}

func (e *events) Init(cfg *sluice.Config) error {
	t, err := cfg.Table("events")
	if err != nil {
		return err
	}
	e.t = t
	return t.Expect(
		sluice.Col("ts", "DateTime"),
		sluice.Col("kind", "LowCardinality(String)"),
		sluice.Col("tags", "Array(String)"),
		sluice.Col("src", "Nullable(IPv4)"),
	)
}

func (e *events) Transform(rec *sluice.Record, out *sluice.Output) error {
	fields := bytes.Fields(rec.Value) // allocates; fine for an example
	if len(fields) == 0 {
		return nil // an empty record is filtered out
	}
	if string(fields[0]) == "boom" {
		panic("cannot handle boom")
	}
	var src []byte
	if last := fields[len(fields)-1]; last[0] == '@' {
		src, fields = last[1:], fields[:len(fields)-1]
	}
	w := out.Row(e.t).DateTime(uint32(rec.Timestamp / 1000)).Bytes(fields[0]).BeginArray(len(fields) - 1)
	for _, tag := range fields[1:] {
		w.Bytes(tag)
	}
	if src == nil {
		w.Null()
	} else {
		ip, err := netip.ParseAddr(string(src))
		if err != nil || !ip.Is4() {
			return fmt.Errorf("bad source address %q", src)
		}
		w.IPv4(ip.As4())
	}
	return w.End()
}

var eventsTable = sluicetest.Table{Name: "events", Columns: []sluicetest.Column{
	{Name: "ts", Type: "DateTime"},
	{Name: "kind", Type: "LowCardinality(String)"},
	{Name: "tags", Type: "Array(String)"},
	{Name: "src", Type: "Nullable(IPv4)"},
}}

// A whole module, driven natively with the payloads the host sends.
func Example() {
	in := sluice.NewInstance(&events{}) // in the module: func init() { sluice.Run(&events{}) }
	if msg := in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{eventsTable})); msg != "" {
		fmt.Println("refused:", msg)
		return
	}
	batch := sluicetest.BatchPayload("events", 0, []sluicetest.Record{
		{Offset: 1, Timestamp: 1700000000123, Value: []byte("login web eu @10.0.0.7")},
		{Offset: 2, Timestamp: 1700000001000, Value: []byte("logout")},
		{Offset: 3, Timestamp: 1700000002000, Value: []byte("  ")},
		{Offset: 4, Timestamp: 1700000003000, Value: []byte("login @nowhere")},
		{Offset: 5, Timestamp: 1700000004000, Value: []byte("boom")},
	})
	results, err := sluicetest.DecodeOutput(in.Transform(batch))
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, res := range results {
		switch {
		case res.Failed:
			fmt.Printf("record %d: error: %s\n", i, res.Err)
		case len(res.Rows) == 0:
			fmt.Printf("record %d: filtered out\n", i)
		}
		for _, row := range res.Rows {
			vals, err := sluicetest.DecodeRow(eventsTable.Columns, row.Data)
			fmt.Printf("record %d: %v %v\n", i, vals, err)
		}
	}
	// Output:
	// record 0: [2023-11-14 22:13:20 +0000 UTC login [web eu] 10.0.0.7] <nil>
	// record 1: [2023-11-14 22:13:21 +0000 UTC logout [] <nil>] <nil>
	// record 2: filtered out
	// record 3: error: bad source address "nowhere"
	// record 4: error: panic: cannot handle boom
}

// Init refuses a table that is not the one the module writes.
func ExampleTable_Expect() {
	in := sluice.NewInstance(&events{})
	wrong := sluicetest.Table{Name: "events", Columns: []sluicetest.Column{
		{Name: "ts", Type: "DateTime"},
		{Name: "kind", Type: "String"},
		{Name: "tags", Type: "Array(String)"},
	}}
	fmt.Println(in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{wrong})))
	// Output:
	// sluice: table "events" does not have the columns this module writes: column #2 is kind String, want kind LowCardinality(String); missing column #4 src Nullable(IPv4)
}

// rowDemo writes the row its write function makes, for ExampleRow.
type rowDemo struct {
	t     *sluice.Table
	write func(t *sluice.Table, out *sluice.Output) error
}

func (d *rowDemo) Init(cfg *sluice.Config) (err error) {
	d.t, err = cfg.Table("metrics")
	return err
}

func (d *rowDemo) Transform(_ *sluice.Record, out *sluice.Output) error { return d.write(d.t, out) }

// The row writer checks each value against the column it goes to.
func ExampleRow() {
	metrics := sluicetest.Table{Name: "metrics", Columns: []sluicetest.Column{
		{Name: "name", Type: "LowCardinality(String)"},
		{Name: "value", Type: "Float64"},
		{Name: "labels", Type: "Array(String)"},
		{Name: "host", Type: "Nullable(String)"},
		{Name: "kind", Type: "Enum8('gauge' = 1, 'counter' = 2)"},
	}}
	var counter int8
	writes := []func(t *sluice.Table, out *sluice.Output) error{
		func(t *sluice.Table, out *sluice.Output) error {
			return out.Row(t).String("cpu").Float64(0.5).ArrayString([]string{"a", "b"}).Null().Enum8(counter).End()
		},
		func(t *sluice.Table, out *sluice.Output) error {
			// Nested values: BeginArray(n) then n elements; NotNull is implied.
			return out.Row(t).String("mem").Float64(1).BeginArray(1).String("x").String("h1").Enum8(1).End()
		},
		func(t *sluice.Table, out *sluice.Output) error {
			return out.Row(t).String("cpu").UInt64(1).End() // wrong type
		},
		func(t *sluice.Table, out *sluice.Output) error {
			return out.Row(t).String("cpu").Float64(1).End() // row not complete
		},
		func(t *sluice.Table, out *sluice.Output) error {
			return out.Row(t).String("cpu").Float64(1).ArrayString(nil).Null().Enum8(3).End() // undeclared
		},
	}
	for _, write := range writes {
		d := &rowDemo{write: write}
		in := sluice.NewInstance(d)
		in.Init(sluicetest.InitPayload(nil, []sluicetest.Table{metrics}))
		counter, _ = d.t.Columns[4].Enum8Value("counter") // look names up once, at init
		res, _ := sluicetest.DecodeOutput(in.Transform(sluicetest.BatchPayload("m", 0, []sluicetest.Record{{}})))
		if res[0].Failed {
			fmt.Println(res[0].Err)
			continue
		}
		row := res[0].Rows[0].Data
		vals, _ := sluicetest.DecodeRow(metrics.Columns, row)
		fmt.Printf("% x\n%v\n", row, vals)
	}
	// Output:
	// 03 63 70 75 00 00 00 00 00 00 e0 3f 02 01 61 01 62 01 02
	// [cpu 0.5 [a b] <nil> counter]
	// 03 6d 65 6d 00 00 00 00 00 00 f0 3f 01 01 78 00 02 68 31 01
	// [mem 1 [x] h1 gauge]
	// sluice: table "metrics", column "value" (Float64): expected Float64, got UInt64
	// sluice: table "metrics": row ended after 2 of 5 columns: column "labels" (Array(String)) not written
	// sluice: table "metrics", column "kind" (Enum8('gauge' = 1, 'counter' = 2)): 3 is not a declared value
}

// A decimal's text becomes the unscaled integer Row.Decimal takes, as
// ClickHouse would read the text into the column: digits past the scale
// are cut, and a value too large for it is refused.
func ExampleParseDecimal() {
	for _, text := range []string{"12.34", "-0.5", "12.349", "1.5e3", "12345678", "12,34"} {
		unscaled, err := sluice.ParseDecimal(text, 9, 2) // a Decimal(9, 2) column
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(text, "→", unscaled)
	}
	// Output:
	// 12.34 → 1234
	// -0.5 → -50
	// 12.349 → 1234
	// 1.5e3 → 150000
	// sluice: ParseDecimal: "12345678" as Decimal(9, 2): out of range: more than 7 digits before the point
	// sluice: ParseDecimal: "12,34" as Decimal(9, 2): invalid syntax: unexpected ',' at byte 2
}

// A UUID's text, in either of the forms ClickHouse reads, becomes the
// bytes Row.UUID takes.
func ExampleParseUUID() {
	for _, text := range []string{"61f0c404-5cb3-11e7-907b-a6006ad3dba0", "61F0C4045CB311E7907BA6006AD3DBA0", "{61f0c404-5cb3-11e7-907b-a6006ad3dba0}"} {
		u, err := sluice.ParseUUID(text)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("% x\n", u)
	}
	// Output:
	// 61 f0 c4 04 5c b3 11 e7 90 7b a6 00 6a d3 db a0
	// 61 f0 c4 04 5c b3 11 e7 90 7b a6 00 6a d3 db a0
	// sluice: ParseUUID: "{61f0c404-5cb3-11e7-907b-a6006ad3dba0}" as UUID: invalid syntax: want 36 characters, or 32 hex digits
}

// An IPv6 column has no zone, and netip.Addr.As16 drops one without a
// word; ClickHouse refuses the text of an address with a zone, so refuse
// it too. An IPv4 address becomes ::ffff:a.b.c.d, as in ClickHouse.
func ExampleRow_IPv6() {
	for _, text := range []string{"2001:db8::1", "1.2.3.4", "fe80::1%eth0"} {
		a, err := netip.ParseAddr(text)
		if err == nil && a.Zone() != "" {
			err = fmt.Errorf("%s: an IPv6 column has no zone", text)
		}
		if err != nil {
			fmt.Println(err) // a Transform returns it: the record is dead-lettered
			continue
		}
		fmt.Println(netip.AddrFrom16(a.As16())) // what Row.IPv6(a.As16()) writes
	}
	// Output:
	// 2001:db8::1
	// ::ffff:1.2.3.4
	// fe80::1%eth0: an IPv6 column has no zone
}
