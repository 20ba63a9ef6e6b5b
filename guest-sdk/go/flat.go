package sluice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// FlatRow writes one row, like Row, for the column types most tables have,
// at a fraction of Row's cost in wasm: its scalar and string methods
// inline into the caller, where each of Row's is a call, and Go compiled
// to wasm pays dearly for every call (benchmarks/README.md has the
// figures).
//
// FlatRow writes the integer and float types, Bool, String (from a string
// or bytes), Date, Date32, DateTime, DateTime64, UUID, IPv4 and IPv6, each
// also inside LowCardinality or Nullable, and Array(String),
// Array(Int64) and Array(UInt64) (their elements may be LowCardinality).
// Any other column (FixedString, Enum, Decimal, the wide integers, Map,
// Tuple, other arrays) needs Row; writing it with FlatRow fails the record
// with a message that says so.
//
// It checks what Row checks, with two differences. A Nullable column takes
// Null(), or NotNull() followed by its value: the value alone, which Row
// accepts, is a mismatch. And a mismatch is reported at End, not at the
// write: writes after it go on, and End fails the record with a message
// naming the first misplaced value, its column and both types. As with
// Row, a record that fails is dead-lettered with that message and none of
// its rows is written.
type FlatRow struct {
	buf   []byte // the output, taken from o.buf by Flat and handed back by End
	o     *Output
	t     *Table
	slots []uint8 // what each value must be (t.flat); the last is slotEnd
	n     int     // the next value's slot
	failN int     // the slot of the first mismatch
	failK uint8   // what was written there; 0 while there was none
	start int     // offset of the row's u32 length in buf
	open  bool
}

// The slots of a table's flat layout. A scalar's slot is its chtype.Kind.
const (
	slotEnd         = uint8(chtype.Invalid)  // past the last column
	slotNull        = uint8(chtype.Nullable) // a Nullable's marker; its value's slot follows
	slotArray       = 0x80                   // | the element kind: an Array of String, Int64 or UInt64
	slotArrayString = slotArray | uint8(chtype.String)
	slotArrayInt64  = slotArray | uint8(chtype.Int64)
	slotArrayUInt64 = slotArray | uint8(chtype.UInt64)
	slotOther       = 0xff // a column FlatRow cannot write

	wroteNotNull = 0xfe // failK of a NotNull
)

// endOnly is the layout of a FlatRow that could not start: every write
// mismatches.
var endOnly = []uint8{slotEnd}

// flatScalar reports whether FlatRow writes kind k as a plain value.
func flatScalar(k chtype.Kind) bool {
	switch k {
	case chtype.UInt8, chtype.UInt16, chtype.UInt32, chtype.UInt64,
		chtype.Int8, chtype.Int16, chtype.Int32, chtype.Int64,
		chtype.Float32, chtype.Float64, chtype.Bool, chtype.String,
		chtype.Date, chtype.Date32, chtype.DateTime, chtype.DateTime64,
		chtype.UUID, chtype.IPv4, chtype.IPv6:
		return true
	}
	return false
}

// flatLayout returns the slots of a table's columns, ending in slotEnd,
// and the column of each slot (the end's is len(cols)).
func flatLayout(cols []Column) (slots []uint8, col []int) {
	for i, c := range cols {
		t := c.t
		switch {
		case t == nil:
			slots, col = append(slots, slotOther), append(col, i)
		case flatScalar(t.Kind):
			slots, col = append(slots, uint8(t.Kind)), append(col, i)
		case t.Kind == chtype.Nullable && flatScalar(t.Elem.Kind):
			slots, col = append(slots, slotNull, uint8(t.Elem.Kind)), append(col, i, i)
		case t.Kind == chtype.Array && (t.Elem.Kind == chtype.String || t.Elem.Kind == chtype.Int64 || t.Elem.Kind == chtype.UInt64):
			slots, col = append(slots, slotArray|uint8(t.Elem.Kind)), append(col, i)
		default:
			slots, col = append(slots, slotOther), append(col, i)
		}
	}
	return append(slots, slotEnd), append(col, len(cols))
}

// Flat starts a row of table t and returns its FlatRow writer. Write one
// value per column, in column order, then call End.
func (o *Output) Flat(t *Table) *FlatRow {
	w := &o.flat
	if o.err != nil || o.row.open || w.open || w.failK != 0 || t == nil || t.cfg != o.cfg {
		o.rowMisuse(t, "Flat")
		w.slots, w.n, w.failK, w.open = endOnly, 0, 0, false
		return w
	}
	w.t, w.slots, w.n, w.failK, w.open = t, t.flat, 0, 0, true
	b := binary.LittleEndian.AppendUint16(o.buf, uint16(t.Index))
	w.start = len(b)
	w.buf = append(b, 0, 0, 0, 0) // length, patched by End
	return w
}

// End finishes the row. It returns the record's error, if any: the first
// mismatched write, columns left unwritten, or an earlier error of the
// record.
func (w *FlatRow) End() error {
	o := w.o
	if w.failK != 0 || o.err != nil || !w.open || w.slots[w.n] != slotEnd || uint64(len(w.buf)-w.start-4) > math.MaxUint32 {
		return w.endSlow()
	}
	binary.LittleEndian.PutUint32(w.buf[w.start:], uint32(len(w.buf)-w.start-4))
	o.buf, w.buf = w.buf, nil
	w.open, w.slots, w.n = false, endOnly, 0 // a write before the next Flat is a mismatch
	o.nrows++
	return nil
}

func (w *FlatRow) endSlow() error {
	o := w.o
	if w.open {
		o.buf, w.buf = w.buf, nil
	}
	switch {
	case o.err != nil:
	case !w.open:
		o.fail(errors.New("sluice: End called with no row started"))
	case w.failK != 0:
		o.fail(w.mismatch())
	case w.slots[w.n] != slotEnd:
		c := &w.t.Columns[w.t.flatCol[w.n]]
		o.fail(fmt.Errorf("sluice: table %q: row ended after %d of %d columns: column %q (%s) not written",
			w.t.Name, w.t.flatCol[w.n], len(w.t.Columns), c.Name, c.Type))
	default:
		o.fail(fmt.Errorf("sluice: table %q: row of %d bytes is too long", w.t.Name, len(o.buf)-w.start-4))
	}
	w.open, w.slots, w.n, w.failK = false, endOnly, 0, 0
	return o.err
}

// mismatch describes the first misplaced write.
func (w *FlatRow) mismatch() error {
	t, s, got := w.t, w.slots[w.failN], wroteName(w.failK)
	if !w.open {
		return fmt.Errorf("sluice: %s value written with no row started (call Output.Flat first)", got)
	}
	if s == slotEnd {
		return fmt.Errorf("sluice: table %q: %s value written past the last column (the table has %d)", t.Name, got, len(t.Columns))
	}
	c := &t.Columns[t.flatCol[w.failN]]
	switch {
	case s == slotOther && c.t == nil:
		return fmt.Errorf("sluice: table %q, column %q: the SDK cannot write type %s: %v", t.Name, c.Name, c.Type, c.err)
	case s == slotOther:
		return fmt.Errorf("sluice: table %q, column %q: FlatRow cannot write type %s; write this table's rows with Output.Row", t.Name, c.Name, c.Type)
	case s == slotNull && w.failK == w.slots[w.failN+1]:
		return fmt.Errorf("sluice: table %q, column %q (%s): FlatRow needs NotNull() before a Nullable column's value (or Null())", t.Name, c.Name, c.Type)
	}
	want := c.Type
	if s != slotNull && c.t.Kind == chtype.Nullable {
		want = c.t.Elem.Text // the value after NotNull
	}
	return fmt.Errorf("sluice: table %q, column %q (%s): expected %s, got %s", t.Name, c.Name, c.Type, want, got)
}

// wroteName names what a write of code k writes.
func wroteName(k uint8) string {
	switch {
	case k == slotNull:
		return "NULL"
	case k == wroteNotNull:
		return "NotNull"
	case k&slotArray != 0:
		return "Array(" + chtype.Kind(k&^slotArray).String() + ")"
	}
	return chtype.Kind(k).String()
}

// Err returns the record's error so far. A mismatched write of this row is
// not among them until End.
func (w *FlatRow) Err() error { return w.o.err }

// Each method below checks its slot with one compare and, on a mismatch,
// only notes it (End reports it): a call on the mismatch path would keep
// the method from inlining.

// Null writes NULL to a Nullable column.
func (w *FlatRow) Null() *FlatRow {
	if w.slots[w.n] == slotNull {
		w.buf = append(w.buf, 1)
		w.n += 2
	} else if w.failK == 0 {
		w.failK, w.failN = slotNull, w.n
	}
	return w
}

// NotNull marks a Nullable column as not null; the next write is its value.
func (w *FlatRow) NotNull() *FlatRow {
	if w.slots[w.n] == slotNull {
		w.buf = append(w.buf, 0)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = wroteNotNull, w.n
	}
	return w
}

// String writes a String (or LowCardinality(String)) value.
func (w *FlatRow) String(s string) *FlatRow {
	if w.slots[w.n] == uint8(chtype.String) {
		w.buf = binary.AppendUvarint(w.buf, uint64(len(s)))
		w.buf = append(w.buf, s...)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.String), w.n
	}
	return w
}

// Bytes writes a String value from a byte slice.
func (w *FlatRow) Bytes(b []byte) *FlatRow {
	if w.slots[w.n] == uint8(chtype.String) {
		w.buf = binary.AppendUvarint(w.buf, uint64(len(b)))
		w.buf = append(w.buf, b...)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.String), w.n
	}
	return w
}

// UInt8 writes a UInt8.
func (w *FlatRow) UInt8(v uint8) *FlatRow {
	if w.slots[w.n] == uint8(chtype.UInt8) {
		w.buf = append(w.buf, v)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.UInt8), w.n
	}
	return w
}

// UInt16 writes a UInt16.
func (w *FlatRow) UInt16(v uint16) *FlatRow {
	if w.slots[w.n] == uint8(chtype.UInt16) {
		w.buf = binary.LittleEndian.AppendUint16(w.buf, v)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.UInt16), w.n
	}
	return w
}

// UInt32 writes a UInt32.
func (w *FlatRow) UInt32(v uint32) *FlatRow {
	if w.slots[w.n] == uint8(chtype.UInt32) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, v)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.UInt32), w.n
	}
	return w
}

// UInt64 writes a UInt64.
func (w *FlatRow) UInt64(v uint64) *FlatRow {
	if w.slots[w.n] == uint8(chtype.UInt64) {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, v)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.UInt64), w.n
	}
	return w
}

// Int8 writes an Int8.
func (w *FlatRow) Int8(v int8) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Int8) {
		w.buf = append(w.buf, byte(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Int8), w.n
	}
	return w
}

// Int16 writes an Int16.
func (w *FlatRow) Int16(v int16) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Int16) {
		w.buf = binary.LittleEndian.AppendUint16(w.buf, uint16(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Int16), w.n
	}
	return w
}

// Int32 writes an Int32.
func (w *FlatRow) Int32(v int32) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Int32) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Int32), w.n
	}
	return w
}

// Int64 writes an Int64.
func (w *FlatRow) Int64(v int64) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Int64) {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Int64), w.n
	}
	return w
}

// Float32 writes a Float32.
func (w *FlatRow) Float32(v float32) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Float32) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, math.Float32bits(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Float32), w.n
	}
	return w
}

// Float64 writes a Float64.
func (w *FlatRow) Float64(v float64) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Float64) {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, math.Float64bits(v))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Float64), w.n
	}
	return w
}

// Bool writes a Bool.
func (w *FlatRow) Bool(v bool) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Bool) {
		b := byte(0)
		if v {
			b = 1
		}
		w.buf = append(w.buf, b)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Bool), w.n
	}
	return w
}

// Date writes a Date: days since 1970-01-01.
func (w *FlatRow) Date(days uint16) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Date) {
		w.buf = binary.LittleEndian.AppendUint16(w.buf, days)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Date), w.n
	}
	return w
}

// Date32 writes a Date32: days since 1970-01-01, negative before it.
func (w *FlatRow) Date32(days int32) *FlatRow {
	if w.slots[w.n] == uint8(chtype.Date32) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, uint32(days))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.Date32), w.n
	}
	return w
}

// DateTime writes a DateTime: seconds since the Unix epoch.
func (w *FlatRow) DateTime(sec uint32) *FlatRow {
	if w.slots[w.n] == uint8(chtype.DateTime) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, sec)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.DateTime), w.n
	}
	return w
}

// DateTime64 writes a DateTime64(P) from its ticks: units of 10^-P seconds
// since the Unix epoch (milliseconds for DateTime64(3)).
func (w *FlatRow) DateTime64(ticks int64) *FlatRow {
	if w.slots[w.n] == uint8(chtype.DateTime64) {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, uint64(ticks))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.DateTime64), w.n
	}
	return w
}

// UUID writes a UUID given in its usual byte order, as Row.UUID does.
func (w *FlatRow) UUID(u [16]byte) *FlatRow {
	if w.slots[w.n] == uint8(chtype.UUID) {
		w.buf = binary.LittleEndian.AppendUint64(w.buf, binary.BigEndian.Uint64(u[:8]))
		w.buf = binary.LittleEndian.AppendUint64(w.buf, binary.BigEndian.Uint64(u[8:]))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.UUID), w.n
	}
	return w
}

// IPv4 writes an IPv4 address given in network order (netip.Addr.As4).
func (w *FlatRow) IPv4(a [4]byte) *FlatRow {
	if w.slots[w.n] == uint8(chtype.IPv4) {
		w.buf = binary.LittleEndian.AppendUint32(w.buf, binary.BigEndian.Uint32(a[:]))
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.IPv4), w.n
	}
	return w
}

// IPv6 writes an IPv6 address given in network order (netip.Addr.As16).
func (w *FlatRow) IPv6(a [16]byte) *FlatRow {
	if w.slots[w.n] == uint8(chtype.IPv6) {
		w.buf = append(w.buf, a[:]...)
		w.n++
	} else if w.failK == 0 {
		w.failK, w.failN = uint8(chtype.IPv6), w.n
	}
	return w
}

// ArrayString writes an Array(String) (or Array(LowCardinality(String))).
func (w *FlatRow) ArrayString(v []string) *FlatRow {
	if w.slots[w.n] != slotArrayString {
		return w.wrote(slotArrayString)
	}
	b := binary.AppendUvarint(w.buf, uint64(len(v)))
	for _, s := range v {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	w.buf = b
	w.n++
	return w
}

// ArrayBytes writes an Array(String) (or Array(LowCardinality(String)))
// from byte slices.
func (w *FlatRow) ArrayBytes(v [][]byte) *FlatRow {
	if w.slots[w.n] != slotArrayString {
		return w.wrote(slotArrayString)
	}
	b := binary.AppendUvarint(w.buf, uint64(len(v)))
	for _, s := range v {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	w.buf = b
	w.n++
	return w
}

// ArrayInt64 writes an Array(Int64).
func (w *FlatRow) ArrayInt64(v []int64) *FlatRow {
	if w.slots[w.n] != slotArrayInt64 {
		return w.wrote(slotArrayInt64)
	}
	b := binary.AppendUvarint(w.buf, uint64(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	w.buf = b
	w.n++
	return w
}

// ArrayUInt64 writes an Array(UInt64).
func (w *FlatRow) ArrayUInt64(v []uint64) *FlatRow {
	if w.slots[w.n] != slotArrayUInt64 {
		return w.wrote(slotArrayUInt64)
	}
	b := binary.AppendUvarint(w.buf, uint64(len(v)))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	w.buf = b
	w.n++
	return w
}

// wrote notes a mismatched write of k, for the methods that do not inline
// anyway.
func (w *FlatRow) wrote(k uint8) *FlatRow {
	if w.failK == 0 {
		w.failK, w.failN = k, w.n
	}
	return w
}
