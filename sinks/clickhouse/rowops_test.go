package clickhouse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ClickHouse/ch-go/proto"
)

// decodeByColumns is appendRow as the columns' decode methods alone do it:
// the yardstick of the row ops.
func (s *subBlock) decodeByColumns(row []byte) (pos, failed int, err error) {
	for i, c := range s.cols {
		n, err := c.decode(row[pos:])
		if err != nil {
			return pos, i, err
		}
		pos += n
	}
	return pos, 0, nil
}

// TestRowOpsMatchDecode: a part decodes rows with its ops exactly as with
// its columns' decode methods (the columns' bytes after every row, and
// the failing column and error of every row that fails): on the RowBinary
// vectors of every type beside the kinds the ops decode in line, on
// strings and arrays past what the in-line path takes, and on 20,000
// mutated and cut rows.
func TestRowOpsMatchDecode(t *testing.T) {
	types, values := vectorRows(t)
	// Columns of the kinds decoded in line, among the others.
	cols := []Column{{Name: "u64", Type: "UInt64"}, {Name: "u8", Type: "UInt8"}, {Name: "u16", Type: "UInt16"},
		{Name: "i32", Type: "Int32"}, {Name: "s", Type: "String"}, {Name: "lc", Type: "LowCardinality(String)"},
		{Name: "nf", Type: "Nullable(Float64)"}, {Name: "ns", Type: "LowCardinality(Nullable(String))"},
		{Name: "as", Type: "Array(LowCardinality(String))"}, {Name: "b", Type: "Bool"}}
	for i, typ := range types {
		cols = append(cols, Column{Name: fmt.Sprintf("v%d", i), Type: typ})
	}
	tbl, err := NewTable("default", "t", cols)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	str := func(n int) []byte {
		b := binary.AppendUvarint(nil, uint64(n))
		return append(b, strings.Repeat("x", n)...)
	}
	row := func() []byte {
		r := binary.LittleEndian.AppendUint64(nil, rnd.Uint64())
		r = append(r, byte(rnd.Uint32()))
		r = binary.LittleEndian.AppendUint16(r, uint16(rnd.Uint32()))
		r = binary.LittleEndian.AppendUint32(r, rnd.Uint32())
		lengths := []int{0, 1, 5, 127, 128, 300}
		r = append(r, str(lengths[rnd.IntN(len(lengths))])...)
		r = append(r, str(lengths[rnd.IntN(len(lengths))])...)
		if rnd.IntN(2) == 0 {
			r = append(r, 1)
		} else {
			r = binary.LittleEndian.AppendUint64(append(r, 0), rnd.Uint64())
		}
		if rnd.IntN(2) == 0 {
			r = append(r, 1)
		} else {
			r = append(append(r, 0), str(lengths[rnd.IntN(len(lengths))])...)
		}
		n := []int{0, 1, 3, 127, 128, 130}[rnd.IntN(6)]
		r = binary.AppendUvarint(r, uint64(n))
		for range n {
			r = append(r, str(lengths[rnd.IntN(4)])...)
		}
		r = append(r, byte(rnd.IntN(2)))
		for _, typ := range types {
			vs := values[typ]
			r = append(r, vs[rnd.IntN(len(vs))]...)
		}
		return r
	}
	ops, cmp := tbl.newSubBlock(), tbl.newSubBlock()
	decoded := 0
	check := func(r []byte) {
		t.Helper()
		pos, failed, err := ops.decodeOps(r)
		wpos, wfailed, werr := cmp.decodeByColumns(r)
		if fmt.Sprint(err) != fmt.Sprint(werr) || failed != wfailed || (err == nil && pos != wpos) {
			t.Fatalf("row %x: ops end at %d, fail column %d with %v; the columns end at %d, fail %d with %v",
				r, pos, failed, err, wpos, wfailed, werr)
		}
		if err != nil || pos != len(r) {
			ops.truncate(ops.rows)
			cmp.truncate(cmp.rows)
		} else {
			ops.rows++
			cmp.rows++
			decoded++
		}
		for i := range ops.cols {
			var a, b proto.Buffer
			ops.cols[i].EncodeColumn(&a)
			cmp.cols[i].EncodeColumn(&b)
			if !bytes.Equal(a.Buf, b.Buf) {
				t.Fatalf("row %x: column %s holds %x by the ops, %x by the columns", r, cols[i].Name, a.Buf, b.Buf)
			}
		}
		if ops.rows == 20 {
			ops.truncate(0)
			cmp.truncate(0)
		}
	}
	for range 300 {
		check(row())
	}
	for range 20_000 {
		r := row()
		switch rnd.IntN(3) {
		case 0:
			r = r[:rnd.IntN(len(r)+1)]
		case 1:
			r[rnd.IntN(len(r))] = byte(rnd.Uint32())
		default:
			i := rnd.IntN(len(r))
			r = append(r[:i:i], r[i+1:]...)
		}
		check(r)
	}
	if decoded < 300 {
		t.Fatalf("%d rows decoded", decoded)
	}
}
