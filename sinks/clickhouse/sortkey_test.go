package clickhouse

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
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
	tbl   *Table
	key   *sortKey
	names []string // the key's columns
	rows  [][]byte
	vals  []sortVals
}

type sortVals struct {
	s  string
	i  int16
	ts int64
	fs string
	u  uint32
	id uint32
}

// sortKeys are the keys the sorter is tested with: a String, a signed
// integer, a DateTime64 (signed ticks), a FixedString and an unsigned
// integer first, each of them later in a key too.
var sortKeys = []string{"s, i, ts, fs", "i, s, ts, fs", "ts, fs", "fs, u", "u, s", "s, u, i"}

// sortColumns compare the rows' values of each column a key may name.
var sortColumns = map[string]func(x, y sortVals) int{
	"s":  func(x, y sortVals) int { return strings.Compare(x.s, y.s) },
	"i":  func(x, y sortVals) int { return cmp.Compare(x.i, y.i) },
	"ts": func(x, y sortVals) int { return cmp.Compare(x.ts, y.ts) },
	"fs": func(x, y sortVals) int { return strings.Compare(x.fs, y.fs) },
	"u":  func(x, y sortVals) int { return cmp.Compare(x.u, y.u) },
}

// newSortCase makes n rows of random values, in runs of one s as a
// record's rows make, sorted by key.
func newSortCase(t *testing.T, n int, seed uint64, key, valueType string, values [][]byte) sortCase {
	t.Helper()
	cols := []Column{{Name: "s", Type: "LowCardinality(String)"}, {Name: "i", Type: "Int16"},
		{Name: "ts", Type: "DateTime64(3)"}, {Name: "fs", Type: "FixedString(2)"}, {Name: "u", Type: "UInt32"},
		{Name: "id", Type: "UInt32"}}
	if valueType != "" {
		cols = append(cols, Column{Name: "v", Type: valueType})
	}
	tbl, err := NewTable("db", "t", cols)
	if err != nil {
		t.Fatal(err)
	}
	k, why := parseSortKey(key, tbl)
	if k == nil {
		t.Fatal(why)
	}
	tbl.sortKey = k
	names, _ := splitKey(key)
	c := sortCase{tbl: tbl, key: k, names: names}
	rng := rand.New(rand.NewPCG(seed, 1))
	strs := []string{"", "a", "ab", "b", "sensor-10", "sensor-9", "long value of more than sixteen bytes", "\xff"}
	for id := range n {
		v := sortVals{s: strs[rng.IntN(len(strs))], i: int16(rng.IntN(7) - 3), ts: int64(rng.IntN(5)) - 2,
			fs: string([]byte{byte(rng.IntN(3)), byte(rng.IntN(3))}),
			u:  []uint32{0, 1, 1 << 31, 1<<31 + 1, math.MaxUint32}[rng.IntN(5)], id: uint32(id)}
		if rng.IntN(4) == 0 && id > 0 {
			v.s = c.vals[id-1].s // runs of one first value, as a record's rows make
		}
		row := append([]byte{byte(len(v.s))}, v.s...)
		row = binary.LittleEndian.AppendUint16(row, uint16(v.i))
		row = binary.LittleEndian.AppendUint64(row, uint64(v.ts))
		row = append(row, v.fs...)
		row = binary.LittleEndian.AppendUint32(row, v.u)
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
		for _, name := range c.names {
			if r := sortColumns[name](c.vals[a], c.vals[b]); r != 0 {
				return r
			}
		}
		return 0
	})
	return order
}

// TestRowSorterOrdersByKeyStably: the sorter's order over several parts is
// the key's, rows of equal keys in the order they came (the server's own
// sort is stable); rows in key order already are left as they are.
func TestRowSorterOrdersByKeyStably(t *testing.T) {
	var s rowSorter
	for _, key := range sortKeys {
		for seed := range uint64(20) {
			c := newSortCase(t, 300, seed, key, "", nil)
			_, parts := splitRows(t, c.tbl, c.rows, []int{1, 120, 60, 119})
			order := s.sort(c.key, parts)
			want := c.reference()
			got := make([]int, len(order))
			for i, g := range order {
				got[i] = int(g)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("key (%s), seed %d: order %v, want %v", key, seed, got, want)
			}
			// The rows in that order are left alone.
			sorted := make([][]byte, len(want))
			for i, g := range want {
				sorted[i] = c.rows[g]
			}
			_, parts = splitRows(t, c.tbl, sorted, []int{150, 150})
			if order := s.sort(c.key, parts); order != nil {
				t.Fatalf("key (%s), seed %d: sorted rows reordered", key, seed)
			}
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
	if len(types) == 0 {
		t.Fatal("no RowBinary vectors")
	}
	for _, typ := range types {
		c := newSortCase(t, 97, 7, sortKeys[0], typ, values[typ])
		_, parts := splitRows(t, c.tbl, c.rows, []int{40, 1, 56})
		ps := make([]*part, len(parts))
		for i, p := range parts {
			ps[i] = &part{sub: p}
		}
		ins := &openInsert{t: c.tbl, parts: ps}
		total := 0
		for _, p := range parts {
			total += p.size()
		}
		for _, blockBytes := range []int{0, total / 3} {
			var e sortedEncoder
			if !e.start(c.tbl.plan, ins, false, true) {
				t.Fatalf("%s: rows taken for sorted", typ)
			}
			e.blockBytes = blockBytes
			want := c.reference()
			blocks := 0
			for at := 0; ; {
				in := e.next()
				if in == nil {
					if at < len(want) {
						t.Fatalf("%s: blocks end at row %d of %d", typ, at, len(want))
					}
					break
				}
				blocks++
				slice := want[at:min(at+in[0].Data.Rows(), len(want))]
				at += len(slice)
				whole := c.tbl.newSubBlock()
				for _, g := range slice {
					if err := whole.appendRow(c.tbl, c.rows[g]); err != nil {
						t.Fatal(err)
					}
				}
				if blockBytes > 0 && whole.size() > blockBytes && len(slice) > 1 {
					t.Fatalf("%s: a block of %d rows has %d bytes, over %d", typ, len(slice), whole.size(), blockBytes)
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
						t.Fatalf("%s: column %s (%d rows to %d) sorted is\n%x\nin one part\n%x", typ, col.Name, len(slice), at, got, want.Buf)
					}
				}
			}
			if blockBytes > 0 && blocks < 3 {
				t.Fatalf("%s: %d blocks of at most %d bytes for %d", typ, blocks, blockBytes, total)
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
// buffers, runs and dictionaries of an insert; an attempt is marked sorted
// only when it was.
func TestSortedEncoderBounds(t *testing.T) {
	c := newSortCase(t, 300, 5, sortKeys[0], "", nil)
	ins := sortCaseInsert(t, c)
	var e sortedEncoder
	defer func(b, r, d int) { maxSortBytes, maxKeptSortRows, maxKeptDictBytes = b, r, d }(maxSortBytes, maxKeptSortRows, maxKeptDictBytes)
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
	for in := e.next(); in != nil; in = e.next() {
		for _, col := range in {
			columnBytes(t, col.Data) // fills the dictionaries
		}
	}
	if len(e.lc) == 0 || e.sorter.dict == nil {
		t.Fatal("no LowCardinality encoder or sort dictionary for a LowCardinality(String) first key")
	}
	maxKeptSortRows, maxKeptDictBytes = 100, 0
	if err := e.finish(); err != nil {
		t.Fatal(err)
	}
	if len(e.parts) != 0 || e.sorter.parts != nil || e.sorter.perm != nil || cap(e.runs) > maxKeptSortRows {
		t.Fatalf("after an insert of 300 rows the encoder keeps %d parts, sort buffers of %d rows and %d runs",
			len(e.parts), cap(e.sorter.perm), cap(e.runs))
	}
	if len(e.lc) != 0 || e.sorter.dict != nil {
		t.Fatalf("after an insert the encoder keeps %d LowCardinality dictionaries and a sort dictionary past the bound", len(e.lc))
	}
	// A retry that goes as the parts are is not counted as sorted.
	maxSortBytes = ins.bytes - 1
	if e.start(c.tbl.plan, ins, false, true) || ins.sorted {
		t.Fatal("an attempt sent as its parts are is marked sorted after one that was")
	}
}

// TestSortedBlocksBoundedByBytes: on a compressed connection a sorted
// insert's blocks keep to maxCompressedBlock by their rows' bytes, not by
// the insert's average row: a few large rows of one key, which the sort
// brings together, are cut into blocks of their own.
func TestSortedBlocksBoundedByBytes(t *testing.T) {
	tbl, err := NewTable("db", "t", []Column{{Name: "s", Type: "String"}, {Name: "v", Type: "String"}})
	if err != nil {
		t.Fatal(err)
	}
	k, why := parseSortKey("s", tbl)
	if k == nil {
		t.Fatal(why)
	}
	tbl.sortKey = k
	big := bytes.Repeat([]byte("x"), 1<<20)
	var rows [][]byte
	for i := range 2000 {
		s, v := fmt.Sprintf("k%04d", (i*7919)%2000), []byte("v")
		if i%125 == 0 {
			s, v = "big", big // 16 rows of 1 MiB, apart as they come
		}
		row := append([]byte{byte(len(s))}, s...)
		row = binary.AppendUvarint(row, uint64(len(v)))
		rows = append(rows, append(row, v...))
	}
	_, parts := splitRows(t, tbl, rows, []int{700, 700, 600})
	ins := &openInsert{t: tbl}
	for _, p := range parts {
		ins.add(&part{sub: p})
	}
	var e sortedEncoder
	if !e.start(tbl.plan, ins, true, false) {
		t.Fatal("rows taken for sorted")
	}
	got := 0
	for in := e.next(); in != nil; in = e.next() {
		n, b := in[0].Data.Rows(), 0
		for _, col := range in {
			b += len(columnBytes(t, col.Data))
		}
		// Each value's bytes and length; a block of one row may pass.
		if b > maxCompressedBlock && n > 1 {
			t.Fatalf("a block of %d rows has %d bytes, over %d", n, b, maxCompressedBlock)
		}
		got += n
	}
	if got != len(rows) {
		t.Fatalf("blocks of %d rows, want %d", got, len(rows))
	}
	if err := e.finish(); err != nil {
		t.Fatal(err)
	}
}
