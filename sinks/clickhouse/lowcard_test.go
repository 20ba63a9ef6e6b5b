package clickhouse

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"slices"
	"testing"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// lowCardColumn is a String column of rows values, distinct of them
// different.
func lowCardColumn(t testing.TB, rows, distinct int) *stringColumn {
	return lowCardRuns(t, rows, distinct, func(int) int { return 1 })
}

// lowCardRuns is a column of rows values, value-0 … value-(distinct-1) in
// turn, each in a run of run(i) rows, i the run's first row.
func lowCardRuns(t testing.TB, rows, distinct int, run func(i int) int) *stringColumn {
	t.Helper()
	var c stringColumn
	for _, k := range lowCardRunValues(rows, distinct, run) {
		v := fmt.Sprintf("value-%d", k)
		if _, err := c.decode(append([]byte{byte(len(v))}, v...)); err != nil {
			t.Fatal(err)
		}
	}
	return &c
}

// lowCardRunValues are the values' indexes of lowCardRuns's rows.
func lowCardRunValues(rows, distinct int, run func(int) int) []int {
	out := make([]int, 0, rows)
	for k := 0; len(out) < rows; k++ {
		for range min(run(len(out)), rows-len(out)) {
			out = append(out, k%distinct)
		}
	}
	return out
}

// TestLowCardinalityStringRoundTrip: ch-go's decoder reads back the values
// the encoder wrote, twice over the same encoder (its dictionary is reused).
func TestLowCardinalityStringRoundTrip(t *testing.T) {
	one := func(int) int { return 1 }
	// Runs of 50 rows; then, past row 1000, values that change every row
	// for 40 rows (past the encoder's misses before it stops comparing)
	// and runs of 7 after.
	mixed := func(i int) int {
		switch {
		case i < 1000:
			return 50
		case i < 1040:
			return 1
		}
		return 7
	}
	for _, c := range []struct {
		rows, distinct int
		run            func(int) int
	}{{1, 1, one}, {1000, 7, one}, {1000, 1000, one}, {70_000, 300, one}, {300, 300, one}, {3000, 9, mixed}} {
		col := lowCardRuns(t, c.rows, c.distinct, c.run)
		want := lowCardRunValues(c.rows, c.distinct, c.run)
		enc := newLowCardinalityString(col)
		for range 2 {
			var b proto.Buffer
			enc.EncodeState(&b)
			enc.EncodeColumn(&b)
			dec := new(proto.ColStr).LowCardinality()
			r := proto.NewReader(bytes.NewReader(b.Buf))
			if err := dec.DecodeState(r); err != nil {
				t.Fatal(err)
			}
			if err := dec.DecodeColumn(r, c.rows); err != nil {
				t.Fatalf("%d rows, %d distinct: %v", c.rows, c.distinct, err)
			}
			for i := range c.rows {
				if got, want := dec.Row(i), fmt.Sprintf("value-%d", want[i]); got != want {
					t.Fatalf("%d rows, %d distinct: row %d = %q, want %q", c.rows, c.distinct, i, got, want)
				}
			}
		}
	}
}

// BenchmarkLowCardinalityString: one insert's encoding of a column of
// 10,000 rows of 500 distinct values, with the encoder kept by its block:
// each row's value differs from the one before ("cycle"), or each value
// comes in a run of 100 rows, as a record's batch-level field does over
// its rows ("runs").
func BenchmarkLowCardinalityString(b *testing.B) {
	for _, c := range []struct {
		name string
		col  *stringColumn
	}{{"cycle", lowCardColumn(b, 10_000, 500)}, {"runs", lowCardRuns(b, 10_000, 500, func(int) int { return 100 })}} {
		b.Run(c.name, func(b *testing.B) {
			enc := newLowCardinalityString(c.col)
			var buf proto.Buffer
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				enc.EncodeColumn(&buf)
			}
		})
	}
}

// TestLowCardinalityHashCollision: a value whose hash an earlier, other
// value took gets its own key.
func TestLowCardinalityHashCollision(t *testing.T) {
	enc := newLowCardinalityString(lowCardColumn(t, 1, 1))
	a := enc.key([]byte("a"))
	// Make "b" collide with "a": its hash now names a's key.
	enc.dict[maphash.Bytes(enc.seed, []byte("b"))] = a
	b := enc.key([]byte("b"))
	if b == a {
		t.Fatalf("b got a's key %d", a)
	}
	if again := enc.key([]byte("b")); again != b {
		t.Errorf("b's key %d, then %d", b, again)
	}
	if again := enc.key([]byte("a")); again != a {
		t.Errorf("a's key %d, then %d", a, again)
	}
	if got := enc.index.Row(int(b)); got != "b" {
		t.Errorf("dictionary entry %d = %q, want b", b, got)
	}
}

// TestLowCardinalityArrayRoundTrip: ch-go's decoder reads an
// Array(LowCardinality(String)) column back as the encoder wrote it: empty
// arrays among full ones, and a block of nothing but empty arrays (no
// LowCardinality data at all). (ch-go cannot read a LowCardinality of
// Nullable; the sink's integration tests read that one back from the
// servers.)
func TestLowCardinalityArrayRoundTrip(t *testing.T) {
	const typ = "Array(LowCardinality(String))"
	ct, err := chtype.Parse(typ)
	if err != nil {
		t.Fatal(err)
	}
	if kind, err := lowCardinalityKind(typ); err != nil || kind != 3 {
		t.Fatalf("%s: kind %d, %v; want 3", typ, kind, err)
	}
	for _, rows := range [][][]string{
		{{"a", "b"}, {}, {"b", "b", "c"}, {"a"}},
		{{}, {}},
	} {
		col := columnOf(ct)
		for _, r := range rows {
			b := []byte{byte(len(r))}
			for _, v := range r {
				b = append(append(b, byte(len(v))), v...)
			}
			if n, err := col.decode(b); err != nil || n != len(b) {
				t.Fatalf("decode %q: %d of %d bytes, %v", r, n, len(b), err)
			}
		}
		enc := newLowCardinality(col)
		enc.bind(col)
		if enc.Type() != typ {
			t.Errorf("encoder type %s, want %s", enc.Type(), typ)
		}
		for range 2 { // the dictionary is reused
			var b proto.Buffer
			enc.EncodeState(&b)
			enc.EncodeColumn(&b)
			r := proto.NewReader(bytes.NewReader(b.Buf))
			dec := proto.NewArray[string](new(proto.ColStr).LowCardinality())
			if err := dec.DecodeState(r); err != nil {
				t.Fatal(err)
			}
			if err := dec.DecodeColumn(r, len(rows)); err != nil {
				t.Fatalf("%q: %v", rows, err)
			}
			for i, want := range rows {
				if got := dec.Row(i); !slices.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
					t.Errorf("row %d = %q, want %q", i, got, want)
				}
			}
		}
	}
}

// A column whose table turned it into LowCardinality(String) from a type
// the sink does not convert (the server does) goes as it is: before, the
// encoder took it for a String column and panicked, stopping every
// pipeline of the process.
func TestLowCardinalityOfAnotherTypeGoesAsItIs(t *testing.T) {
	for _, typ := range []string{"Int64", "Array(UInt8)", "Nullable(Int32)"} {
		ct, err := chtype.Parse(typ)
		if err != nil {
			t.Fatal(err)
		}
		col := columnOf(ct)
		col.appendDefault()
		plan := &insertPlan{cols: []int{0}, conv: []func(column) column{nil}, lcKind: []int{1}}
		s := &subBlock{cols: []column{col}}
		if got := s.lowCardinality(plan, 0, col); got != proto.ColInput(col) {
			t.Errorf("%s planned as LowCardinality(String): encoded as %s, want the column as it is", typ, got.Type())
		}
	}
	if !lowCardinalityFits(lowCardColumn(t, 1, 1)) {
		t.Error("a String column does not fit LowCardinality(String)")
	}
}

// Every column a plan marks as LowCardinality (kinds 1 to 4) gets its
// LowCardinality encoder, of the type the table has: the servers convert
// the inner type too, so a column sent as String would pass every
// round-trip test.
func TestLowCardinalityKindsGetTheirEncoder(t *testing.T) {
	for _, typ := range []string{"LowCardinality(String)", "LowCardinality(Nullable(String))",
		"Array(LowCardinality(String))", "Array(LowCardinality(Nullable(String)))"} {
		kind, err := lowCardinalityKind(typ)
		if err != nil || kind == 0 {
			t.Fatalf("%s: kind %d, %v", typ, kind, err)
		}
		ct, err := chtype.Parse(typ)
		if err != nil {
			t.Fatal(err)
		}
		col := columnOf(ct)
		col.appendDefault()
		plan := &insertPlan{cols: []int{0}, conv: []func(column) column{nil}, lcKind: []int{kind}}
		s := &subBlock{cols: []column{col}}
		got := s.lowCardinality(plan, 0, col)
		if _, ok := got.(lowCardinalityEncoder); !ok || got.Type() != proto.ColumnType(typ) {
			t.Errorf("%s: encoded as %s (%T), want its LowCardinality encoder", typ, got.Type(), got)
		}
	}
	if kind, _ := lowCardinalityKind("Array(String)"); kind != 0 {
		t.Errorf("Array(String): kind %d, want 0", kind)
	}
}
