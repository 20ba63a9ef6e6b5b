package clickhouse

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/ClickHouse/ch-go/proto"
)

// lowCardColumn is a String column of rows values, distinct of them
// different.
func lowCardColumn(t testing.TB, rows, distinct int) *stringColumn {
	t.Helper()
	var c stringColumn
	for i := range rows {
		v := fmt.Sprintf("value-%d", i%distinct)
		if _, err := c.decode(append([]byte{byte(len(v))}, v...)); err != nil {
			t.Fatal(err)
		}
	}
	return &c
}

// TestLowCardinalityStringRoundTrip: ch-go's decoder reads back the values
// the encoder wrote, twice over the same encoder (its dictionary is reused).
func TestLowCardinalityStringRoundTrip(t *testing.T) {
	for _, c := range []struct{ rows, distinct int }{{1, 1}, {1000, 7}, {1000, 1000}, {70_000, 300}, {300, 300}} {
		col := lowCardColumn(t, c.rows, c.distinct)
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
				if got, want := dec.Row(i), fmt.Sprintf("value-%d", i%c.distinct); got != want {
					t.Fatalf("%d rows, %d distinct: row %d = %q, want %q", c.rows, c.distinct, i, got, want)
				}
			}
		}
	}
}

// BenchmarkLowCardinalityString: one insert's encoding of a column of
// 10,000 rows of 500 distinct values, with the encoder kept by its block.
func BenchmarkLowCardinalityString(b *testing.B) {
	enc := newLowCardinalityString(lowCardColumn(b, 10_000, 500))
	var buf proto.Buffer
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		enc.EncodeColumn(&buf)
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
