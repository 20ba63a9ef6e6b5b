package sluice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// Output collects the rows a record produces. The SDK hands the same Output
// to every Transform call; it is valid only during that call.
//
// A record that writes no row is filtered out. Writing a value of the wrong
// type, too few or too many values, or an undeclared enum value records an
// error on the Output: later writes for the record are ignored and the record
// is dead-lettered with that message, whatever Transform returns.
type Output struct {
	buf     []byte // the whole output payload, reused across batches
	cfg     *Config
	nrows   uint32
	err     error
	row     Row
	flat    FlatRow
	started int // offset of this record's entry in buf
}

// Row starts a row of table t and returns its writer. Write one value per
// column, in column order, then call End.
func (o *Output) Row(t *Table) *Row {
	r := &o.row
	if o.err != nil || r.open || o.flat.isOpen() || t == nil || t.cfg != o.cfg {
		o.rowMisuse(t, "Row")
		return r
	}
	o.flat.sync() // the FlatRow's rows, before this one
	o.flat.stop()
	r.t, r.open, r.col, r.depth = t, true, 0, 0
	r.cur = nil
	if len(t.Columns) > 0 {
		r.cur = t.Columns[0].t
		if r.cur == nil {
			r.cur = &invalid
		}
	}
	o.buf = binary.LittleEndian.AppendUint16(o.buf, uint16(t.Index))
	r.start = len(o.buf)
	o.buf = append(o.buf, 0, 0, 0, 0) // length, patched by End
	return r
}

// rowMisuse fails the record for a call of Output.Row or Output.Flat (fn)
// that cannot start a row.
func (o *Output) rowMisuse(t *Table, fn string) {
	switch {
	case o.err != nil:
	case o.flat.failK != 0: // a FlatRow's mismatch, not reported yet, comes first
		o.fail(o.flat.mismatch())
	case o.row.open:
		o.fail(fmt.Errorf("sluice: table %q: %s called before End of the previous row", o.row.t.Name, fn))
	case o.flat.isOpen():
		o.fail(fmt.Errorf("sluice: table %q: %s called before End of the previous row", o.flat.t.Name, fn))
	case t == nil:
		o.fail(fmt.Errorf("sluice: %s called with a nil table", fn))
	default:
		o.fail(fmt.Errorf("sluice: table %q is not from this instance's Config", t.Name))
	}
}

// Err returns the error recorded for the current record, if any.
func (o *Output) Err() error { return o.err }

// fail records err for the current record (the first error wins) and stops
// the row: with r.cur nil, every later write takes the slow path, which sees
// the error.
func (o *Output) fail(err error) {
	if o.err == nil {
		o.err = err
	}
	o.row.cur = nil
	// The FlatRow too: its next End then reports the error.
	o.flat.sync()
	o.flat.stop()
}

var invalid = chtype.Type{Kind: chtype.Invalid}

// Row writes one row in RowBinary. Its methods return the Row so calls chain:
//
//	out.Row(t).DateTime(ts).String(svc).UInt64(n).End()
//
// Each write checks, with an integer compare, that its type is the one the
// next column (or array element) expects. A Nullable(T) column takes either
// Null(), or NotNull() followed by a T, or just a T (NotNull is implied).
// LowCardinality(T) takes a T. Values are copied into the output at once, so
// the arguments may be reused right after the call.
type Row struct {
	o     *Output
	t     *Table
	cur   *chtype.Type // what the next value must be; nil when the row is full
	col   int          // column being written
	depth int          // open arrays
	stack [chtype.MaxDepth]arrayFrame
	start int // offset of the row's u32 length in o.buf
	open  bool
}

// arrayFrame is an open Array, Map or Tuple: the values it still takes,
// each of the type seq[i % len(seq)].
type arrayFrame struct {
	seq  []*chtype.Type
	i    int
	left int // values still to write
}

// want checks that the next value is a k, writing the not-null marker of a
// Nullable(k) on the way. It leaves r.cur at the k. The fast path inlines.
func (r *Row) want(k chtype.Kind) bool {
	if t := r.cur; t != nil && t.Kind == k { // nil after an error
		return true
	}
	return r.wantSlow(k)
}

func (r *Row) wantSlow(k chtype.Kind) bool {
	if r.o.err != nil {
		return false
	}
	t := r.cur
	if t != nil && t.Kind == chtype.Nullable && t.Elem.Kind == k {
		r.o.buf = append(r.o.buf, 0)
		r.cur = t.Elem
		return true
	}
	r.mismatch(k.String())
	return false
}

func (r *Row) mismatch(got string) {
	switch {
	case r.o.err != nil: // the record has failed already
	case !r.open:
		r.o.fail(fmt.Errorf("sluice: %s value written with no row started (call Output.Row first)", got))
	case r.cur == nil:
		r.o.fail(fmt.Errorf("sluice: table %q: %s value written past the last column (the table has %d)",
			r.t.Name, got, len(r.t.Columns)))
	case r.cur.Kind == chtype.Invalid:
		c := &r.t.Columns[r.col]
		r.o.fail(fmt.Errorf("sluice: table %q, column %q: the SDK cannot write type %s: %v", r.t.Name, c.Name, c.Type, c.err))
	default:
		r.o.fail(fmt.Errorf("sluice: table %q, column %q (%s): expected %s, got %s",
			r.t.Name, r.t.Columns[r.col].Name, r.t.Columns[r.col].Type, r.expected(), got))
	}
}

func (r *Row) expected() string {
	if r.depth > 0 {
		return r.cur.Text + " array element"
	}
	return r.cur.Text
}

// advance moves past a complete value.
func (r *Row) advance() {
	for r.depth > 0 {
		f := &r.stack[r.depth-1]
		f.left--
		if f.left > 0 {
			f.i++
			if f.i == len(f.seq) {
				f.i = 0
			}
			r.cur = f.seq[f.i]
			return
		}
		r.depth--
	}
	r.col++
	if r.col < len(r.t.Columns) {
		r.cur = r.t.Columns[r.col].t
		if r.cur == nil {
			r.cur = &invalid
		}
	} else {
		r.cur = nil
	}
}

// End finishes the row. It returns the record's error, if any, including a
// row with columns left unwritten, so a Transform can end with `return w.End()`.
func (r *Row) End() error {
	o := r.o
	if o.err != nil || !r.open || r.cur != nil || uint64(len(o.buf)-r.start-4) > math.MaxUint32 {
		return r.endSlow()
	}
	binary.LittleEndian.PutUint32(o.buf[r.start:], uint32(len(o.buf)-r.start-4))
	r.open = false
	o.nrows++
	return nil
}

func (r *Row) endSlow() error {
	o := r.o
	switch {
	case o.err != nil:
	case !r.open:
		o.fail(errors.New("sluice: End called with no row started"))
	case r.cur != nil:
		what := "column"
		if r.depth > 0 {
			what = "array element of column"
		}
		o.fail(fmt.Errorf("sluice: table %q: row ended after %d of %d columns: %s %q (%s) not written",
			r.t.Name, r.col, len(r.t.Columns), what, r.t.Columns[r.col].Name, r.t.Columns[r.col].Type))
	default:
		o.fail(fmt.Errorf("sluice: table %q: row of %d bytes is too long", r.t.Name, len(o.buf)-r.start-4))
	}
	return o.err
}

// Err returns the record's error so far.
func (r *Row) Err() error { return r.o.err }

// Null writes NULL to a Nullable column.
func (r *Row) Null() *Row {
	if r.o.err == nil && r.cur != nil && r.cur.Kind == chtype.Nullable {
		r.o.buf = append(r.o.buf, 1)
		r.advance()
		return r
	}
	r.mismatch("NULL")
	return r
}

// NotNull marks a Nullable column as not null; the next write is its value.
func (r *Row) NotNull() *Row {
	if r.o.err == nil && r.cur != nil && r.cur.Kind == chtype.Nullable {
		r.o.buf = append(r.o.buf, 0)
		r.cur = r.cur.Elem
		return r
	}
	r.mismatch("NotNull")
	return r
}

// BeginArray starts an Array column (or element) of n elements; the next n
// writes are its elements.
func (r *Row) BeginArray(n int) *Row {
	if !r.want(chtype.Array) {
		return r
	}
	if n < 0 {
		r.o.fail(fmt.Errorf("sluice: table %q, column %q: negative array length %d", r.t.Name, r.t.Columns[r.col].Name, n))
		return r
	}
	r.o.buf = binary.AppendUvarint(r.o.buf, uint64(n))
	r.enter(n)
	return r
}

// enter enters the container at r.cur, which takes n values of its Seq.
func (r *Row) enter(n int) {
	if n == 0 {
		r.advance()
		return
	}
	if r.depth == len(r.stack) { // unreachable: chtype.Parse limits the nesting
		r.mismatch(r.cur.Kind.String())
		return
	}
	r.stack[r.depth] = arrayFrame{seq: r.cur.Seq, left: n}
	r.depth++
	r.cur = r.cur.Seq[0]
}

// BeginMap starts a Map(K, V) column (or element) of n entries; the next
// 2n writes are its keys and values, alternately: key, value, key, value.
func (r *Row) BeginMap(n int) *Row {
	if !r.want(chtype.Map) {
		return r
	}
	if n < 0 {
		r.o.fail(fmt.Errorf("sluice: table %q, column %q: negative map length %d", r.t.Name, r.t.Columns[r.col].Name, n))
		return r
	}
	r.o.buf = binary.AppendUvarint(r.o.buf, uint64(n))
	r.enter(2 * n)
	return r
}

// BeginTuple starts a Tuple column (or element); the next writes are its
// elements, in order.
func (r *Row) BeginTuple() *Row {
	if r.want(chtype.Tuple) {
		r.enter(len(r.cur.Seq))
	}
	return r
}

// wantArrayOf checks for an Array(k) and writes its length.
func (r *Row) wantArrayOf(k chtype.Kind, n int) bool {
	if r.o.err != nil {
		return false
	}
	t := r.cur
	if t != nil && t.Kind == chtype.Nullable {
		t = t.Elem
	}
	if t == nil || t.Kind != chtype.Array || t.Elem.Kind != k {
		r.mismatch("Array(" + k.String() + ")")
		return false
	}
	if t != r.cur {
		r.o.buf = append(r.o.buf, 0)
	}
	r.o.buf = binary.AppendUvarint(r.o.buf, uint64(n))
	return true
}

// ArrayString writes an Array(String) (or Array(LowCardinality(String))).
func (r *Row) ArrayString(v []string) *Row {
	if r.wantArrayOf(chtype.String, len(v)) {
		for _, s := range v {
			r.o.buf = binary.AppendUvarint(r.o.buf, uint64(len(s)))
			r.o.buf = append(r.o.buf, s...)
		}
		r.advance()
	}
	return r
}

// String writes a String (or LowCardinality(String)) value.
func (r *Row) String(s string) *Row {
	if r.want(chtype.String) {
		r.o.buf = binary.AppendUvarint(r.o.buf, uint64(len(s)))
		r.o.buf = append(r.o.buf, s...)
		r.advance()
	}
	return r
}

// Bytes writes a String value from a byte slice.
func (r *Row) Bytes(b []byte) *Row {
	if r.want(chtype.String) {
		r.o.buf = binary.AppendUvarint(r.o.buf, uint64(len(b)))
		r.o.buf = append(r.o.buf, b...)
		r.advance()
	}
	return r
}

// FixedString writes a FixedString(N) value: b padded with zero bytes to N,
// as ClickHouse does; longer than N is an error.
func (r *Row) FixedString(b []byte) *Row {
	if !r.want(chtype.FixedString) {
		return r
	}
	n := r.cur.Size
	if len(b) > n {
		r.o.fail(fmt.Errorf("sluice: table %q, column %q (%s): %d bytes do not fit",
			r.t.Name, r.t.Columns[r.col].Name, r.t.Columns[r.col].Type, len(b)))
		return r
	}
	r.o.buf = append(r.o.buf, b...)
	for i := len(b); i < n; i++ {
		r.o.buf = append(r.o.buf, 0)
	}
	r.advance()
	return r
}

// Enum8 writes an Enum8 by number; the number must be declared in the type
// (Column.Enum8Value looks a name up at init).
func (r *Row) Enum8(v int8) *Row {
	if r.want(chtype.Enum8) && r.enumOK(int16(v)) {
		r.o.buf = append(r.o.buf, byte(v))
		r.advance()
	}
	return r
}

// Enum16 writes an Enum16 by number; the number must be declared in the type
// (Column.EnumValue looks a name up at init).
func (r *Row) Enum16(v int16) *Row {
	if r.want(chtype.Enum16) && r.enumOK(v) {
		r.o.buf = binary.LittleEndian.AppendUint16(r.o.buf, uint16(v))
		r.advance()
	}
	return r
}

func (r *Row) enumOK(v int16) bool {
	if r.cur.HasEnum(v) {
		return true
	}
	r.o.fail(fmt.Errorf("sluice: table %q, column %q (%s): %d is not a declared value",
		r.t.Name, r.t.Columns[r.col].Name, r.t.Columns[r.col].Type, v))
	return false
}
