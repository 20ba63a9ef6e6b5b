package clickhouse

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"
)

// vectorRows reads guest-sdk/testdata/rowbinary.tsv: per type, in file
// order, the RowBinary of each of its values.
func vectorRows(t *testing.T) (types []string, values map[string][][]byte) {
	t.Helper()
	f, err := os.Open("../../guest-sdk/testdata/rowbinary.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	values = map[string][][]byte{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		fields := strings.Split(line, "\t")
		b, err := hex.DecodeString(fields[len(fields)-1])
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if _, ok := values[fields[0]]; !ok {
			types = append(types, fields[0])
		}
		values[fields[0]] = append(values[fields[0]], b)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return types, values
}

// splitRows decodes rows into one part holding all of them and into parts
// of the given sizes, in order.
func splitRows(t *testing.T, tbl *Table, rows [][]byte, sizes []int) (whole *subBlock, parts []*subBlock) {
	t.Helper()
	whole = tbl.newSubBlock()
	at := 0
	for _, n := range sizes {
		p := tbl.newSubBlock()
		for _, r := range rows[at : at+n] {
			if err := p.appendRow(tbl, r); err != nil {
				t.Fatal(err)
			}
			if err := whole.appendRow(tbl, r); err != nil {
				t.Fatal(err)
			}
		}
		at += n
		parts = append(parts, p)
	}
	if at != len(rows) {
		t.Fatalf("sizes %v cover %d of %d rows", sizes, at, len(rows))
	}
	return whole, parts
}

// joinedBytes is the column of parts as joined (columnBytes).
func joinedBytes(t *testing.T, parts []proto.ColInput) []byte {
	t.Helper()
	var arena proto.Buffer
	j := &joinedColumn{parts: parts, arena: &arena}
	for _, p := range parts {
		j.rows += p.Rows()
	}
	return columnBytes(t, j)
}

// columnBytes is col as written through a Buffer (a compressed block) and
// through a Writer (a plain one), which must agree.
func columnBytes(t *testing.T, col proto.ColInput) []byte {
	t.Helper()
	var viaBuffer proto.Buffer
	col.EncodeColumn(&viaBuffer)
	var out bytes.Buffer
	w := proto.NewWriter(&out, new(proto.Buffer))
	// Something already chained before the column, as in a block.
	w.ChainBuffer(func(b *proto.Buffer) { b.PutString("header") })
	col.WriteColumn(w)
	if _, err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var header proto.Buffer
	header.PutString("header")
	viaWriter, ok := bytes.CutPrefix(out.Bytes(), header.Buf)
	if !ok || !bytes.Equal(viaWriter, viaBuffer.Buf) {
		t.Fatalf("the Writer wrote %x, the Buffer %x", out.Bytes(), viaBuffer.Buf)
	}
	return viaBuffer.Buf
}

// TestJoinedColumnsAreOneBlocksColumns: for every type of the RowBinary
// vectors, the rows split over parts of several sizes and joined encode to
// the very bytes of the same rows in one part: array and map offsets
// carried across the parts, null maps before the values, a tuple's
// elements each joined.
func TestJoinedColumnsAreOneBlocksColumns(t *testing.T) {
	types, values := vectorRows(t)
	sizes := []int{1, 3, 2, 1}
	for _, typ := range types {
		tbl, err := NewTable("default", "t", []Column{{Name: "id", Type: "UInt32"}, {Name: "v", Type: typ}})
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		var rows [][]byte
		for i := range 7 {
			vs := values[typ]
			rows = append(rows, append(binary.LittleEndian.AppendUint32(nil, uint32(i)), vs[i%len(vs)]...))
		}
		whole, parts := splitRows(t, tbl, rows, sizes)
		for c := range tbl.Insert {
			cols := make([]proto.ColInput, len(parts))
			for i, p := range parts {
				cols[i] = tbl.plan.column(p, c)
			}
			if !joinable(cols) {
				t.Errorf("%s: column %d of the parts is not joinable", typ, c)
				continue
			}
			var want proto.Buffer
			whole.cols[c].EncodeColumn(&want)
			if got := joinedBytes(t, cols); !bytes.Equal(got, want.Buf) {
				t.Errorf("%s: column %s joined is\n%x\nin one part\n%x", typ, tbl.Insert[c].Name, got, want.Buf)
			}
		}
	}
}

// readGranules decodes a LowCardinality column of rows rows written
// without a global dictionary (the serialization version first, as the
// joined column's state), granule by granule, by ClickHouse's
// SerializationLowCardinality: each granule's flags, its dictionary
// ("additional keys", with NULL as key 0 for a Nullable one) and a key per
// row. It returns the values ("NULL" for a null) and the granules' row
// counts.
func readGranules(t *testing.T, b []byte, rows int, nullable bool) (vals []string, granules []int) {
	t.Helper()
	r := proto.NewReader(bytes.NewReader(b))
	version, err := r.Int64()
	if err != nil || version != lcSharedDictionariesWithAdditionalKeys {
		t.Fatalf("version %d, %v", version, err)
	}
	for len(vals) < rows {
		flags, err := r.Int64()
		if err != nil {
			t.Fatalf("granule %d flags: %v", len(granules), err)
		}
		if flags&lcHasAdditionalKeys == 0 || flags&lcNeedUpdateDictionary == 0 {
			t.Fatalf("granule %d: flags %#x, want additional keys and a dictionary update", len(granules), flags)
		}
		n, _ := r.Int64()
		var dict proto.ColStr
		if err := dict.DecodeColumn(r, int(n)); err != nil {
			t.Fatalf("granule %d dictionary: %v", len(granules), err)
		}
		m, _ := r.Int64()
		width := 1 << (flags & 0xff)
		for range m {
			var k int
			switch width {
			case 1:
				v, _ := r.UInt8()
				k = int(v)
			case 2:
				v, _ := r.UInt16()
				k = int(v)
			default:
				v, _ := r.UInt32()
				k = int(v)
			}
			if k >= dict.Rows() {
				t.Fatalf("granule %d: key %d of a dictionary of %d", len(granules), k, dict.Rows())
			}
			if nullable && k == 0 {
				vals = append(vals, "NULL")
			} else {
				vals = append(vals, dict.Row(k))
			}
		}
		granules = append(granules, int(m))
	}
	if rest, _ := r.ReadByte(); rest != 0 || len(vals) != rows {
		t.Fatalf("%d values of %d, or bytes past the column", len(vals), rows)
	}
	return vals, granules
}

// TestJoinedLowCardinalityGranules: LowCardinality columns of several
// parts join as the serialization version once, then a granule per part
// with its own dictionary, which decode to the parts' values in order;
// for an Array of them, the offsets run across the parts, and a part whose
// arrays are all empty writes no granule.
func TestJoinedLowCardinalityGranules(t *testing.T) {
	str := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	t.Run("LowCardinality(Nullable(String))", func(t *testing.T) {
		tbl, err := NewTable("default", "t", []Column{{Name: "v", Type: "LowCardinality(Nullable(String))"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"a", "NULL", "b", "a", "a", "", "NULL", "c"}
		var rows [][]byte
		for _, v := range want {
			if v == "NULL" {
				rows = append(rows, []byte{1})
			} else {
				rows = append(rows, append([]byte{0}, str(v)...))
			}
		}
		_, parts := splitRows(t, tbl, rows, []int{2, 1, 4, 1})
		cols := make([]proto.ColInput, len(parts))
		for i, p := range parts {
			cols[i] = prepare(p.lowCardinality(tbl.plan, 0, tbl.plan.column(p, 0)), new(proto.Buffer))
		}
		if !joinable(cols) {
			t.Fatal("not joinable")
		}
		j := &joinedLowCardinality{joinedColumn{parts: cols, rows: len(want), arena: new(proto.Buffer)}}
		var b proto.Buffer
		j.EncodeState(&b)
		j.EncodeColumn(&b)
		got, granules := readGranules(t, b.Buf, len(want), true)
		if !slices.Equal(got, want) || !slices.Equal(granules, []int{2, 1, 4, 1}) {
			t.Errorf("values %q in granules %v, want %q in [2 1 4 1]", got, granules, want)
		}
	})
	t.Run("Array(LowCardinality(String))", func(t *testing.T) {
		tbl, err := NewTable("default", "t", []Column{{Name: "v", Type: "Array(LowCardinality(String))"}})
		if err != nil {
			t.Fatal(err)
		}
		arrays := [][]string{{"x"}, {}, {}, {"y", "x", "z"}, {}, {"z"}}
		var rows [][]byte
		for _, a := range arrays {
			r := []byte{byte(len(a))}
			for _, v := range a {
				r = append(r, str(v)...)
			}
			rows = append(rows, r)
		}
		// The second part's arrays are all empty.
		_, parts := splitRows(t, tbl, rows, []int{1, 2, 3})
		cols := make([]proto.ColInput, len(parts))
		for i, p := range parts {
			cols[i] = prepare(p.lowCardinality(tbl.plan, 0, tbl.plan.column(p, 0)), new(proto.Buffer))
		}
		j := &joinedLowCardinality{joinedColumn{parts: cols, rows: len(arrays), arena: new(proto.Buffer)}}
		var b proto.Buffer
		j.EncodeColumn(&b)
		r := proto.NewReader(bytes.NewReader(b.Buf))
		var offsets proto.ColUInt64
		if err := offsets.DecodeColumn(r, len(arrays)); err != nil {
			t.Fatal(err)
		}
		if want := (proto.ColUInt64{1, 1, 1, 4, 4, 5}); !slices.Equal(offsets, want) {
			t.Fatalf("offsets %v, want %v", offsets, want)
		}
		var state proto.Buffer
		j.EncodeState(&state)
		got, granules := readGranules(t, append(state.Buf, b.Buf[8*len(arrays):]...), 5, false)
		if want := []string{"x", "y", "x", "z", "z"}; !slices.Equal(got, want) || !slices.Equal(granules, []int{1, 4}) {
			t.Errorf("elements %q in granules %v, want %q in [1 4]", got, granules, want)
		}
	})
}

// sendBlocks takes the blocks of an insert of parts from a blockJoiner on
// nc, as the native transport does: each block's columns written out (to
// nowhere) before the next is asked for. It returns the rows of each
// block, and the most the arena held once a block was written.
func sendBlocks(t *testing.T, nc *nativeConn, plan *insertPlan, parts []*part, columns func(*subBlock, proto.Input)) (rows []int, arena int) {
	t.Helper()
	j := &blockJoiner{nc: nc, plan: plan, columns: columns, parts: parts}
	for in := j.next(); in != nil; in = j.next() {
		w := proto.NewWriter(io.Discard, new(proto.Buffer))
		for _, c := range in {
			if c.Data.Rows() != in[0].Data.Rows() {
				t.Fatalf("a block's columns have %d and %d rows", in[0].Data.Rows(), c.Data.Rows())
			}
			if s, ok := c.Data.(proto.StateEncoder); ok {
				w.ChainBuffer(s.EncodeState)
			}
			c.Data.WriteColumn(w)
		}
		if _, err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, in[0].Data.Rows())
		arena = max(arena, len(nc.arena.Buf))
	}
	return rows, arena
}

// TestJoinedBlocks: the parts of an insert go as one block, or on a
// compressed connection as blocks of about maxCompressedBlock; parts whose
// columns cannot be joined go a block each.
func TestJoinedBlocks(t *testing.T) {
	tbl, err := NewTable("default", "t", []Column{{Name: "id", Type: "UInt64"}, {Name: "s", Type: "String"}})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 100)
	mkPart := func(rows int) *part {
		p := tbl.newSubBlock()
		for i := range rows {
			r := binary.LittleEndian.AppendUint64(nil, uint64(i))
			r = binary.AppendUvarint(r, uint64(len(big)))
			if err := p.appendRow(tbl, append(r, big...)); err != nil {
				t.Fatal(err)
			}
		}
		return &part{sub: p}
	}
	// Parts of about 1 MiB.
	var parts []*part
	rows := 0
	for range 20 {
		parts = append(parts, mkPart(9000))
		rows += 9000
	}
	none := func(*subBlock, proto.Input) {}
	if got, _ := sendBlocks(t, &nativeConn{}, tbl.plan, parts, none); !slices.Equal(got, []int{rows}) {
		t.Errorf("uncompressed: blocks of %v rows, want one of %d", got, rows)
	}
	got, _ := sendBlocks(t, &nativeConn{compressed: true}, tbl.plan, parts, none)
	perBlock := maxCompressedBlock / parts[0].sub.size()
	if len(got) != (len(parts)+perBlock-1)/perBlock || got[0] != perBlock*9000 {
		t.Errorf("compressed: blocks of %v rows, want %d parts (%d rows) a block", got, perBlock, perBlock*9000)
	}
	// A column a plan converted differently in one part cannot be joined.
	odd := func(sub *subBlock, in proto.Input) {
		if sub == parts[1].sub {
			in[1].Data = &nullableColumn{inner: in[1].Data.(column), nulls: make([]byte, sub.rows)}
		}
	}
	if got, _ := sendBlocks(t, &nativeConn{}, tbl.plan, parts[:3], odd); len(got) != 3 {
		t.Errorf("parts of columns that do not join: blocks of %v rows, want 3 blocks", got)
	}
	if got, _ := sendBlocks(t, &nativeConn{}, tbl.plan, parts[:1], none); fmt.Sprint(got) != "[9000]" {
		t.Errorf("one part: blocks of %v rows, want [9000]", got)
	}
}

// TestJoinedBlocksBoundTheArena: what a block computes into the arena, its
// LowCardinality granules and its array offsets, stays within maxArena
// however the rows make it grow: a LowCardinality column whose every value
// is new (a dictionary as large as the column) and arrays that are all
// empty (8 bytes of offset for a byte of row). Every row goes, in several
// blocks; a table whose arena needs are small goes as one.
func TestJoinedBlocksBoundTheArena(t *testing.T) {
	tbl, err := NewTable("default", "t", []Column{
		{Name: "lc", Type: "LowCardinality(String)"}, {Name: "a", Type: "Array(UInt8)"},
		{Name: "tags", Type: "Array(LowCardinality(String))"}})
	if err != nil {
		t.Fatal(err)
	}
	lc := func(sub *subBlock, in proto.Input) {
		for i := range in {
			in[i].Data = sub.lowCardinality(tbl.plan, i, in[i].Data)
		}
	}
	mkParts := func(n, rows int, distinct bool) (parts []*part, total int) {
		for k := range n {
			p := tbl.newSubBlock()
			for i := range rows {
				v := "same"
				if distinct {
					v = fmt.Sprintf("%090d", k*rows+i)
				}
				r := append(binary.AppendUvarint(nil, uint64(len(v))), v...)
				r = append(r, 0, 1, 3, 't', 'a', 'g') // no elements; one tag
				if err := p.appendRow(tbl, r); err != nil {
					t.Fatal(err)
				}
			}
			parts, total = append(parts, &part{sub: p}), total+rows
		}
		return parts, total
	}
	parts, total := mkParts(60, 5000, true)
	got, arena := sendBlocks(t, &nativeConn{}, tbl.plan, parts, lc)
	sum := 0
	for _, n := range got {
		sum += n
	}
	if sum != total || len(got) < 2 || arena > maxArena {
		t.Errorf("distinct values: blocks of %v rows (want %d in all, in more than one), the arena at %d bytes (at most %d)",
			got, total, arena, maxArena)
	}
	parts, total = mkParts(60, 5000, false)
	if got, arena := sendBlocks(t, &nativeConn{}, tbl.plan, parts, lc); !slices.Equal(got, []int{total}) || arena > maxArena {
		t.Errorf("repeated values: blocks of %v rows, want one of %d; the arena at %d bytes", got, total, arena)
	}
}
