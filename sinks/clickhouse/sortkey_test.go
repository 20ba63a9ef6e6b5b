package clickhouse

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"
)

func TestSplitKey(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // nil: refused
	}{
		{"sensor, batch_ts, batch_id, event_seq", []string{"sensor", "batch_ts", "batch_id", "event_seq"}},
		{"a", []string{"a"}},
		{"`b c`, a", []string{"b c", "a"}},
		{"`x\\`y`", []string{"x`y"}},
		{"n.x, _y2", []string{"n.x", "_y2"}},
		{"toStartOfHour(d), a", nil},
		{"a, -b", nil},
		{"a b", nil},
		{"a,", nil},
		{"`open", nil},
		{"2a", nil},
	} {
		got, ok := splitKey(tc.expr)
		if tc.want == nil {
			if ok {
				t.Errorf("splitKey(%q) = %q, want it refused", tc.expr, got)
			}
			continue
		}
		if !ok || !slices.Equal(got, tc.want) {
			t.Errorf("splitKey(%q) = %q, %v, want %q", tc.expr, got, ok, tc.want)
		}
	}
}

func TestParseSortKey(t *testing.T) {
	tbl, err := NewTable("db", "t", []Column{
		{Name: "s", Type: "LowCardinality(String)"}, {Name: "i", Type: "Int16"}, {Name: "u", Type: "UInt64"},
		{Name: "ts", Type: "DateTime64(3)"}, {Name: "f", Type: "Float64"}, {Name: "ns", Type: "Nullable(String)"},
		{Name: "fs", Type: "FixedString(3)"}, {Name: "e", Type: "Enum8('a' = -1, 'b' = 2)"},
		{Name: "m", Type: "UInt32", DefaultKind: "MATERIALIZED"}})
	if err != nil {
		t.Fatal(err)
	}
	k, why := parseSortKey("s, i, u, ts, fs, e", tbl)
	if k == nil {
		t.Fatal(why)
	}
	want := []keyOrder{orderString, orderSigned, orderUnsigned, orderSigned, orderBytes, orderSigned}
	if !slices.Equal(k.cols, []int{0, 1, 2, 3, 6, 7}) || !slices.Equal(k.orders, want) || !slices.Equal(k.widths, []int{0, 2, 8, 8, 3, 1}) {
		t.Errorf("key %+v", k)
	}
	for _, expr := range []string{"f", "s, ns", "m", "nope", "toDate(ts)", ""} {
		if k, _ := parseSortKey(expr, tbl); k != nil {
			t.Errorf("parseSortKey(%q) = %+v, want none", expr, k)
		}
	}
}

// sortCase is a table keyed on columns of each kind the sorter orders,
// with rows whose keys repeat (so that stability shows) and run in and
// out of order.
type sortCase struct {
	tbl  *Table
	key  *sortKey
	rows [][]byte
	vals []sortVals
}

type sortVals struct {
	s  string
	i  int16
	ts int64
	fs string
	id uint32
}

func newSortCase(t *testing.T, n int, seed uint64, valueType string, values [][]byte) sortCase {
	t.Helper()
	cols := []Column{{Name: "s", Type: "LowCardinality(String)"}, {Name: "i", Type: "Int16"},
		{Name: "ts", Type: "DateTime64(3)"}, {Name: "fs", Type: "FixedString(2)"}, {Name: "id", Type: "UInt32"}}
	if valueType != "" {
		cols = append(cols, Column{Name: "v", Type: valueType})
	}
	tbl, err := NewTable("db", "t", cols)
	if err != nil {
		t.Fatal(err)
	}
	k, why := parseSortKey("s, i, ts, fs", tbl)
	if k == nil {
		t.Fatal(why)
	}
	tbl.sortKey = k
	c := sortCase{tbl: tbl, key: k}
	rng := rand.New(rand.NewPCG(seed, 1))
	strs := []string{"", "a", "ab", "b", "sensor-10", "sensor-9", "long value of more than sixteen bytes", "\xff"}
	for id := range n {
		v := sortVals{s: strs[rng.IntN(len(strs))], i: int16(rng.IntN(7) - 3), ts: int64(rng.IntN(5)) - 2,
			fs: string([]byte{byte(rng.IntN(3)), byte(rng.IntN(3))}), id: uint32(id)}
		if rng.IntN(4) == 0 && id > 0 {
			v.s = c.vals[id-1].s // runs of one first value, as a record's rows make
		}
		row := append([]byte{byte(len(v.s))}, v.s...)
		row = binary.LittleEndian.AppendUint16(row, uint16(v.i))
		row = binary.LittleEndian.AppendUint64(row, uint64(v.ts))
		row = append(row, v.fs...)
		row = binary.LittleEndian.AppendUint32(row, v.id)
		if valueType != "" {
			row = append(row, values[id%len(values)]...)
		}
		c.rows, c.vals = append(c.rows, row), append(c.vals, v)
	}
	return c
}

// reference is the rows' order by the key, stably, worked out from their
// values.
func (c sortCase) reference() []int {
	order := make([]int, len(c.vals))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		x, y := c.vals[a], c.vals[b]
		return cmp.Or(strings.Compare(x.s, y.s), cmp.Compare(x.i, y.i), cmp.Compare(x.ts, y.ts), strings.Compare(x.fs, y.fs))
	})
	return order
}

// TestRowSorterOrdersByKeyStably: the sorter's order over several parts is
// the key's, rows of equal keys in the order they came (the server's own
// sort is stable); rows in key order already are left as they are.
func TestRowSorterOrdersByKeyStably(t *testing.T) {
	var s rowSorter
	for seed := range uint64(20) {
		c := newSortCase(t, 300, seed, "", nil)
		_, parts := splitRows(t, c.tbl, c.rows, []int{1, 120, 60, 119})
		order := s.sort(c.key, parts)
		want := c.reference()
		got := make([]int, len(order))
		for i, g := range order {
			got[i] = int(g)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: order %v, want %v", seed, got, want)
		}
		// The rows in that order are left alone.
		sorted := make([][]byte, len(want))
		for i, g := range want {
			sorted[i] = c.rows[g]
		}
		_, parts = splitRows(t, c.tbl, sorted, []int{150, 150})
		if order := s.sort(c.key, parts); order != nil {
			t.Fatalf("seed %d: sorted rows reordered", seed)
		}
	}
}

// TestSortedColumnsAreSortedBlocksColumns: for every type of the RowBinary
// vectors, the rows of several parts encoded in key order are the bytes of
// one part of the same rows appended in that order, LowCardinality
// columns (with their state) too; and a compressed connection's blocks,
// slices of that order, are the slices' bytes.
func TestSortedColumnsAreSortedBlocksColumns(t *testing.T) {
	types, values := vectorRows(t)
	for _, typ := range types {
		c := newSortCase(t, 97, 7, typ, values[typ])
		_, parts := splitRows(t, c.tbl, c.rows, []int{40, 1, 56})
		ps := make([]*part, len(parts))
		for i, p := range parts {
			ps[i] = &part{sub: p}
		}
		ins := &openInsert{t: c.tbl, parts: ps}
		for _, blockRows := range []int{97, 30} {
			var e sortedEncoder
			if !e.start(c.tbl.plan, ins, false, true) {
				t.Fatalf("%s: rows taken for sorted", typ)
			}
			e.blockRows = blockRows
			want := c.reference()
			for at := 0; ; at += blockRows {
				in := e.next()
				if in == nil {
					if at < len(want) {
						t.Fatalf("%s: blocks end at row %d of %d", typ, at, len(want))
					}
					break
				}
				slice := want[at:min(at+blockRows, len(want))]
				whole := c.tbl.newSubBlock()
				for _, g := range slice {
					if err := whole.appendRow(c.tbl, c.rows[g]); err != nil {
						t.Fatal(err)
					}
				}
				for i, col := range in {
					if col.Data.Rows() != len(slice) {
						t.Fatalf("%s: column %s has %d rows, want %d", typ, col.Name, col.Data.Rows(), len(slice))
					}
					var want proto.Buffer
					ref := whole.lowCardinality(c.tbl.plan, i, whole.cols[i])
					if se, ok := ref.(proto.StateEncoder); ok {
						se.EncodeState(&want)
						gotState, ok := col.Data.(proto.StateEncoder)
						if !ok {
							t.Fatalf("%s: column %s has no LowCardinality state", typ, col.Name)
						}
						var got proto.Buffer
						gotState.EncodeState(&got)
						if !bytes.Equal(got.Buf, want.Buf) {
							t.Fatalf("%s: column %s state %x, want %x", typ, col.Name, got.Buf, want.Buf)
						}
						want.Reset()
					} else if _, ok := col.Data.(proto.StateEncoder); ok {
						t.Fatalf("%s: column %s has a state", typ, col.Name)
					}
					if col.Data.Type() != ref.Type() {
						t.Fatalf("%s: column %s is %s, want %s", typ, col.Name, col.Data.Type(), ref.Type())
					}
					ref.EncodeColumn(&want)
					if got := columnBytes(t, col.Data); !bytes.Equal(got, want.Buf) {
						t.Fatalf("%s: column %s (%d rows from %d) sorted is\n%x\nin one part\n%x", typ, col.Name, len(slice), at, got, want.Buf)
					}
				}
			}
			if err := e.finish(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sortCaseInsert is the case's rows as an insert of three parts.
func sortCaseInsert(t *testing.T, c sortCase) *openInsert {
	t.Helper()
	_, parts := splitRows(t, c.tbl, c.rows, []int{100, 100, len(c.rows) - 200})
	ins := &openInsert{t: c.tbl}
	for _, p := range parts {
		ins.add(&part{sub: p})
	}
	return ins
}

// TestSortedEncoderBounds: an insert whose bytes, as collected, pass the
// bound goes as its parts are (the sort numbers rows with 32 bits), and
// the encoder keeps neither the parts nor, past maxKeptSortRows, the sort
// buffers of an insert.
func TestSortedEncoderBounds(t *testing.T) {
	c := newSortCase(t, 300, 5, "", nil)
	ins := sortCaseInsert(t, c)
	var e sortedEncoder
	defer func(b, r int) { maxSortBytes, maxKeptSortRows = b, r }(maxSortBytes, maxKeptSortRows)
	maxSortBytes = ins.bytes - 1
	if e.start(c.tbl.plan, ins, false, true) || ins.sorted {
		t.Fatalf("an insert of %d bytes sorted under a bound of %d", ins.bytes, maxSortBytes)
	}
	if len(e.parts) != 0 || e.sorter.parts != nil {
		t.Fatal("a refused insert's parts are kept")
	}
	maxSortBytes = ins.bytes
	if !e.start(c.tbl.plan, ins, false, true) {
		t.Fatalf("an insert of %d bytes not sorted under a bound of %d", ins.bytes, maxSortBytes)
	}
	for e.next() != nil {
	}
	maxKeptSortRows = 100
	if err := e.finish(); err != nil {
		t.Fatal(err)
	}
	if len(e.parts) != 0 || e.sorter.parts != nil || e.sorter.perm != nil {
		t.Fatalf("after an insert of 300 rows the encoder keeps %d parts and sort buffers of %d rows", len(e.parts), cap(e.sorter.perm))
	}
}
