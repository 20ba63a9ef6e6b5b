package clickhouse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
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
	// Make "b" collide with "a": the slot b's hash probes first names a's
	// key under b's hash.
	hb := maphash.Bytes(enc.seed, []byte("b"))
	mask := uint64(len(enc.slots) - 1)
	i := hb & mask
	for enc.slots[i].key != 0 {
		i = (i + 1) & mask
	}
	enc.slots[i] = lcSlot{hash: hb, key: a + 1}
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

// stringAt is value i of c.
func stringAt(c *stringColumn, i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = c.ends[i-1]
	}
	v := c.buf[start:c.ends[i]]
	_, k := binary.Uvarint(v)
	return v[k:]
}

// TestLowCardinalityTableShrinks: after a block of many distinct values,
// the dictionary's table shrinks back for blocks of few, and every block
// still decodes to its values.
func TestLowCardinalityTableShrinks(t *testing.T) {
	many, few := lowCardColumn(t, 20_000, 20_000), lowCardColumn(t, 1000, 10)
	enc := newLowCardinalityString(many)
	check := func(col *stringColumn, distinct int) {
		t.Helper()
		enc.src = col
		var buf proto.Buffer
		enc.EncodeColumn(&buf)
		if n := enc.index.Rows(); n != distinct {
			t.Fatalf("%d dictionary entries, want %d", n, distinct)
		}
		for i := range col.Rows() {
			if got, want := enc.index.Row(int(enc.keys[i])), string(stringAt(col, i)); got != want {
				t.Fatalf("row %d: key %d is %q, want %q", i, enc.keys[i], got, want)
			}
		}
	}
	check(many, 20_000)
	grown := len(enc.slots)
	if grown < 2*20_000 {
		t.Fatalf("table of %d slots for 20,000 values", grown)
	}
	for range 10 {
		check(few, 10)
	}
	if len(enc.slots) != lcMinSlots {
		t.Errorf("table of %d slots after blocks of 10 values, want %d", len(enc.slots), lcMinSlots)
	}
	check(many, 20_000)
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

// TestLowCardinalityShortValues: values of every length from 0 to 20
// bytes, around the 8 and 16 that the encoder reads as words, repeating
// at random, many sharing a slot of its cache, some Nullable and NULL,
// read back by ch-go as they were; the last value of the column sits at
// the end of its buffer's capacity, where the encoder cannot read eight
// bytes. Columns whose values miss the cache ever more (fresh values)
// read back too.
func TestLowCardinalityShortValues(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name     string
		distinct int // values drawn from; 0: every value new
		nullable bool
	}{{"few", 40, false}, {"many", 2000, false}, {"nullable", 60, true}, {"fresh", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			value := func(k int) string {
				n := k % 21
				s := fmt.Sprintf("%0*d", max(n, 1), k)
				return s[len(s)-n:]
			}
			var want []string
			var c stringColumn
			var nulls []byte
			for i := range 5000 {
				k := i
				if tc.distinct > 0 {
					k = rnd.IntN(tc.distinct)
					if rnd.IntN(3) == 0 && i > 0 {
						k = -1 // the row before's
					}
				}
				var v string
				if k < 0 {
					v = want[i-1]
				} else {
					v = value(k)
				}
				null := tc.nullable && rnd.IntN(5) == 0
				if null {
					v = "NULL"
					nulls = append(nulls, 1)
					c.appendDefault()
				} else {
					nulls = append(nulls, 0)
					if _, err := c.decode(append(binary.AppendUvarint(nil, uint64(len(v))), v...)); err != nil {
						t.Fatal(err)
					}
				}
				want = append(want, v)
			}
			c.buf = c.buf[:len(c.buf):len(c.buf)] // no bytes past the last value
			var enc *lowCardinalityString
			if tc.nullable {
				enc = newLowCardinalityString(&nullableColumn{nulls: nulls, inner: &c})
				enc.bind(&nullableColumn{nulls: nulls, inner: &c})
			} else {
				enc = newLowCardinalityString(&c)
			}
			for range 2 {
				var b proto.Buffer
				enc.EncodeState(&b)
				enc.EncodeColumn(&b)
				got, _ := readGranules(t, b.Buf, len(want), tc.nullable)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("row %d = %q, want %q", i, got[i], want[i])
					}
				}
			}
		})
	}
}
