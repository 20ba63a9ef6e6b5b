package clickhouse

import (
	"encoding/binary"
	"math"
)

// A part decodes a row column by column. The columns most tables have (a
// fixed-width number, a String, a Nullable of either, an Array of
// String) are decoded in line by appendRow's loop over the part's row
// ops, with no call through the column interface; any other column, and
// any value the in-line path does not take as it is (a length of more
// than one varint byte, a value cut short, a bad flag), goes through the
// column's decode method, which also reports what is wrong. Both decode
// a value the same way (TestRowOpsMatchDecode).

// Row op kinds.
const (
	opDecode      uint8 = iota // the column's decode method
	opFixed1                   // fixedColumn of 1 byte, unchecked
	opFixed2                   // … 2 bytes
	opFixed4                   // … 4 bytes
	opFixed8                   // … 8 bytes
	opString                   // stringColumn
	opNullFixed8               // nullableColumn of an 8-byte fixedColumn
	opNullString               // nullableColumn of a stringColumn
	opArrayString              // arrayColumn of a stringColumn
)

// rowOp is how appendRow decodes one column of a part.
type rowOp struct {
	kind  uint8
	col   column
	fixed *fixedColumn
	str   *stringColumn
	null  *nullableColumn
	arr   *arrayColumn
}

// rowOps returns the ops that decode a row into cols.
func rowOps(cols []column) []rowOp {
	ops := make([]rowOp, len(cols))
	for i, c := range cols {
		op := rowOp{col: c}
		switch c := c.(type) {
		case *fixedColumn:
			op.fixed = c
			if !c.check {
				switch c.width {
				case 1:
					op.kind = opFixed1
				case 2:
					op.kind = opFixed2
				case 4:
					op.kind = opFixed4
				case 8:
					op.kind = opFixed8
				}
			}
		case *stringColumn:
			op.kind, op.str = opString, c
		case *nullableColumn:
			op.null = c
			switch inner := c.inner.(type) {
			case *fixedColumn:
				if !inner.check && inner.width == 8 {
					op.kind, op.fixed = opNullFixed8, inner
				}
			case *stringColumn:
				op.kind, op.str = opNullString, inner
			}
		case *arrayColumn:
			if s, ok := c.inner.(*stringColumn); ok {
				op.kind, op.arr, op.str = opArrayString, c, s
			}
		}
		ops[i] = op
	}
	return ops
}

// shortString decodes a String of fewer than 128 bytes at row[pos:] into
// c, returning the position after it, or -1 to leave the value to
// c.decode: a longer one, or one that does not fit the row.
func (c *stringColumn) shortString(row []byte, pos int) int {
	if pos >= len(row) {
		return -1
	}
	end := pos + 1 + int(row[pos])
	if row[pos] >= 0x80 || end > len(row) || len(c.buf)+end-pos > math.MaxUint32 {
		return -1
	}
	c.buf = append(c.buf, row[pos:end]...)
	c.ends = append(c.ends, uint32(len(c.buf)))
	return end
}

// decodeOps decodes one row into the part's columns with its ops. It
// returns the position after the row's values, or the failing column's
// index and error; the columns before it then hold the row's values, for
// the caller to truncate.
func (s *subBlock) decodeOps(row []byte) (pos, failed int, err error) {
	for i := range s.ops {
		op := &s.ops[i]
		switch op.kind {
		case opFixed8:
			if len(row)-pos >= 8 {
				op.fixed.buf = binary.LittleEndian.AppendUint64(op.fixed.buf, binary.LittleEndian.Uint64(row[pos:]))
				pos += 8
				continue
			}
		case opFixed4:
			if len(row)-pos >= 4 {
				op.fixed.buf = binary.LittleEndian.AppendUint32(op.fixed.buf, binary.LittleEndian.Uint32(row[pos:]))
				pos += 4
				continue
			}
		case opFixed2:
			if len(row)-pos >= 2 {
				op.fixed.buf = binary.LittleEndian.AppendUint16(op.fixed.buf, binary.LittleEndian.Uint16(row[pos:]))
				pos += 2
				continue
			}
		case opFixed1:
			if pos < len(row) {
				op.fixed.buf = append(op.fixed.buf, row[pos])
				pos++
				continue
			}
		case opString:
			if end := op.str.shortString(row, pos); end >= 0 {
				pos = end
				continue
			}
		case opNullFixed8:
			if pos < len(row) {
				switch row[pos] {
				case 1:
					op.null.nulls = append(op.null.nulls, 1)
					op.fixed.buf = binary.LittleEndian.AppendUint64(op.fixed.buf, 0)
					pos++
					continue
				case 0:
					if len(row)-pos >= 9 {
						op.null.nulls = append(op.null.nulls, 0)
						op.fixed.buf = binary.LittleEndian.AppendUint64(op.fixed.buf, binary.LittleEndian.Uint64(row[pos+1:]))
						pos += 9
						continue
					}
				}
			}
		case opNullString:
			if pos < len(row) {
				switch row[pos] {
				case 1:
					op.null.nulls = append(op.null.nulls, 1)
					op.str.appendDefault()
					pos++
					continue
				case 0:
					if end := op.str.shortString(row, pos+1); end >= 0 {
						op.null.nulls = append(op.null.nulls, 0)
						pos = end
						continue
					}
				}
			}
		case opArrayString:
			if end, ok := op.arrayStrings(row, pos); ok {
				pos = end
				continue
			}
		}
		n, err := op.col.decode(row[pos:])
		if err != nil {
			return pos, i, err
		}
		pos += n
	}
	return pos, 0, nil
}

// arrayStrings decodes an Array(String) of fewer than 128 strings of fewer
// than 128 bytes each at row[pos:], or leaves it (false) to the column's
// decode, with the column as it was.
func (op *rowOp) arrayStrings(row []byte, pos int) (int, bool) {
	if pos >= len(row) || row[pos] >= 0x80 {
		return 0, false
	}
	n := int(row[pos])
	before := op.str.Rows()
	at := pos + 1
	for range n {
		if at = op.str.shortString(row, at); at < 0 {
			op.str.truncate(before)
			return 0, false
		}
	}
	op.arr.offsets.Append(uint64(before + n))
	return at, true
}
