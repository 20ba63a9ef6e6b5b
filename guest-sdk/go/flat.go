package sluice

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// FlatRow writes one row, like Row, for the column types most tables have,
// at a fraction of Row's cost in wasm: its fixed-width methods inline
// into the caller as one compare and one store, where each of Row's is a
// call, and Go compiled to wasm pays dearly for every call
// (benchmarks/README.md has the figures). A string or an array is one
// call.
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
// accepts, is a mismatch. And a misplaced write stops the record where it
// is: it panics, with an error naming the value, its column and both
// types, and the SDK recovers it and fails the record with that message.
// (A module that recovers the panic itself still has its record failed.)
// As with Row, a record that fails is dead-lettered with its message and
// none of its rows is written.
//
// Why a panic and not an error from End: in Go's wasm code a branch that
// is taken costs far more than one that falls through, and the compiler
// lays a panic's path out of the way, so each write's hot path falls
// straight through to the next; a path that only noted the mismatch sat
// between a write and the next one, to be jumped over on every value
// (benchmarks/README.md has the figures).
type FlatRow struct {
	// The rows' bytes go straight into o.buf's backing array, past its
	// length: buf[:off] is written. The SDK hands them back to o (sync)
	// when the record ends, or when Row or a Flat of another table needs
	// the buffer; End only counts its row. Flat reserves room
	// for every fixed-width value and NULL marker of the row
	// (Table.flatFixed), and a string or an array makes room for itself
	// and that reserve again, so a fixed-width write needs no check of its
	// own: it is one store at base+off. A value is written only when its
	// slot matches, and each slot once, so what a row's fixed-width writes
	// take never exceeds the reserve (TestFlatRowKeepsItsRoom).
	buf    []byte         // o.buf, taken by Flat and handed back by sync
	base   unsafe.Pointer // buf's backing array
	off    int            // where the next byte goes
	lim    int            // cap(buf) - t.flatFixed: a variable write must end by it
	sp     unsafe.Pointer // the table's slots (t.flat), or unbound: what each value must be
	n      int            // the next value's slot
	o      *Output
	t      *Table         // the table of the last row
	idx    uint16         // t.Index
	rows   uint32         // rows ended since the last sync
	failN  int            // the slot of the first mismatch
	failSP unsafe.Pointer // the slots then
	failK  uint8          // what was written there; 0 while there was none
	start  int            // offset of the row's u32 length in buf
}

// The slots of a table's flat layout. A scalar's slot is its chtype.Kind.
// A table's slots end in slotEnd, where End finds a complete row, then
// slotClosed, where End leaves the writer and Flat finds it. A writer
// bound to no buffer is at slotUnbound. No write matches any of the three.
const (
	slotEnd         = uint8(chtype.Invalid)  // past the last column
	slotNull        = uint8(chtype.Nullable) // a Nullable's marker; its value's slot follows
	slotArray       = 0x80                   // | the element kind: an Array of String, Int64 or UInt64
	slotArrayString = slotArray | uint8(chtype.String)
	slotArrayInt64  = slotArray | uint8(chtype.Int64)
	slotArrayUInt64 = slotArray | uint8(chtype.UInt64)
	slotUnbound     = 0xfc // no row and no buffer
	slotClosed      = 0xfd // the row has ended
	slotOther       = 0xff // a column FlatRow cannot write

	wroteNotNull = 0xfe // failK of a NotNull
)

// unbound is the layout of a FlatRow with no buffer: every write, End and
// Flat take their slow paths.
var unbound = []uint8{slotUnbound}

// flatHeader is the bytes before a row's values: its table index and
// length.
const flatHeader = 6

// maxVarint is the most bytes a length's uvarint takes.
const maxVarint = binary.MaxVarintLen64

// flatScalar reports whether FlatRow writes kind k as a plain value.
func flatScalar(k chtype.Kind) bool {
	return k == chtype.String || flatWidth(k) > 0 // flatWidth: writers_gen.go
}

// flatLayout returns the slots of a table's columns, ending in slotEnd and
// slotClosed, the column of each slot (the ends' is len(cols)), and the
// bytes a row's
// fixed-width values and NULL markers take at most (what Flat reserves).
func flatLayout(cols []Column) (slots []uint8, col []int, fixed int) {
	for i, c := range cols {
		t := c.t
		switch {
		case t == nil:
			slots, col = append(slots, slotOther), append(col, i)
		case flatScalar(t.Kind):
			slots, col = append(slots, uint8(t.Kind)), append(col, i)
			fixed += flatWidth(t.Kind)
		case t.Kind == chtype.Nullable && flatScalar(t.Elem.Kind):
			slots, col = append(slots, slotNull, uint8(t.Elem.Kind)), append(col, i, i)
			fixed += 1 + flatWidth(t.Elem.Kind)
		case t.Kind == chtype.Array && (t.Elem.Kind == chtype.String || t.Elem.Kind == chtype.Int64 || t.Elem.Kind == chtype.UInt64):
			slots, col = append(slots, slotArray|uint8(t.Elem.Kind)), append(col, i)
		default:
			slots, col = append(slots, slotOther), append(col, i)
		}
	}
	return append(slots, slotEnd, slotClosed), append(col, len(cols), len(cols)), fixed
}

// Flat starts a row of table t and returns its FlatRow writer. Write one
// value per column, in column order, then call End.
func (o *Output) Flat(t *Table) *FlatRow {
	w := &o.flat
	if w.t != t || w.slot() != slotClosed || w.off+flatHeader > w.lim {
		return o.flatSlow(t)
	}
	w.next()
	return w
}

// next starts a row after the last one, which has ended, in the room the
// caller checked for its header.
func (w *FlatRow) next() {
	w.closeRow()
	put16(unsafe.Add(w.base, w.off), w.idx)
	w.start, w.off, w.n = w.off+2, w.off+flatHeader, 0
}

// closeRow writes the length of the row that ended last and counts it,
// which End leaves to it. The writer is at slotClosed, its last row not yet
// closed: each row is closed once, by the Flat after it or by sync.
func (w *FlatRow) closeRow() {
	put32(unsafe.Add(w.base, w.start), uint32(w.off-w.start-4))
	w.rows++
}

// flatSlow is Flat when the writer is not past an ended row of t with
// room for the next one's header: it checks for misuse, hands the writer's
// rows to o, and binds the writer to t and o's buffer, with room for a
// row's header and fixed-width values, and starts the row.
func (o *Output) flatSlow(t *Table) *FlatRow {
	w := &o.flat
	if o.err != nil || o.row.open || w.isOpen() || w.failK != 0 || t == nil || t.cfg != o.cfg {
		o.rowMisuse(t, "Flat")
		w.stop()
		w.failK = 0
		return w
	}
	w.sync()
	b := o.buf
	if need := flatHeader + t.flatFixed; cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	w.t, w.idx, w.failK = t, uint16(t.Index), 0
	w.sp, w.n = unsafe.Pointer(unsafe.SliceData(t.flat)), 0
	w.buf, w.base, w.lim = b, unsafe.Pointer(unsafe.SliceData(b)), cap(b)-t.flatFixed
	put16(unsafe.Add(w.base, len(b)), w.idx)
	w.start, w.off = len(b)+2, len(b)+flatHeader
	return w
}

// sync hands o the rows written since the last sync: its buffer up to
// them, and the count of those ended, the last closed first. A row still
// open goes too; its record is failing. The writer must then be bound
// again (flatSlow) or stopped.
func (w *FlatRow) sync() {
	if w.base == nil {
		return
	}
	if w.slot() == slotClosed {
		w.closeRow()
	}
	w.o.buf = w.buf[:w.off]
	w.o.nrows += w.rows
	w.rows = 0
}

// stop leaves w with no row and no buffer, its rows dropped: every write
// is a mismatch, and the next Flat binds it again.
func (w *FlatRow) stop() {
	w.buf, w.base, w.off, w.lim, w.n, w.rows = nil, nil, 0, 0, 0, 0
	w.sp = unsafe.Pointer(unsafe.SliceData(unbound))
}

// isOpen reports whether a row is started and not ended.
func (w *FlatRow) isOpen() bool {
	s := w.slot()
	return s != slotClosed && s != slotUnbound
}

// End finishes the row. It returns the record's error, if any: the first
// mismatched write, columns left unwritten, or an earlier error of the
// record. It inlines, and a complete row costs it one compare and an add:
// the row's length is written, and the row counted, by the next Flat or
// when the record ends.
func (w *FlatRow) End() error {
	if w.slot() != slotEnd {
		return w.endSlow()
	}
	w.n++ // slotClosed: the next Flat, or sync, writes the row's length and counts it
	return nil
}

func (w *FlatRow) endSlow() error {
	o := w.o
	switch {
	case o.err != nil:
	case !w.isOpen():
		o.fail(errors.New("sluice: End called with no row started"))
	case w.failK != 0:
		o.fail(w.mismatch())
	default:
		c := &w.t.Columns[w.t.flatCol[w.n]]
		o.fail(fmt.Errorf("sluice: table %q: row ended after %d of %d columns: column %q (%s) not written",
			w.t.Name, w.t.flatCol[w.n], len(w.t.Columns), c.Name, c.Type))
	}
	w.sync()
	w.stop()
	w.failK = 0
	return o.err
}

// slot is what the next value must be. n never passes the slotClosed that
// ends the slots: it moves on only past a slot a write matched, or past
// slotEnd in End.
func (w *FlatRow) slot() uint8 { return *(*uint8)(unsafe.Add(w.sp, w.n)) }

// at is where the next byte goes.
func (w *FlatRow) at() unsafe.Pointer { return unsafe.Add(w.base, w.off) }

// room makes room for k more bytes of a variable-length value, beyond the
// reserve of the row's fixed-width values. The row's bytes so far move
// with the buffer.
//
// The check inlines and the growing does not: a branch to a block that
// makes a call is one the compiler takes as unlikely, and lays out of the
// way. On wasm that matters more than anywhere: the path a branch falls
// through to is free, and a taken branch goes through the function's
// dispatch loop (ADR 0002).
func (w *FlatRow) room(k int) {
	if w.off+k > w.lim {
		w.grow(k)
	}
}

//go:noinline
func (w *FlatRow) grow(k int) {
	if uint64(w.off-w.start-4)+uint64(k) > math.MaxUint32 {
		panic(fmt.Errorf("sluice: table %q: row of more than %d bytes is too long", w.t.Name, uint64(math.MaxUint32)))
	}
	b := slices.Grow(w.buf[:w.off], k+w.t.flatFixed)
	w.buf, w.base, w.lim = b, unsafe.Pointer(unsafe.SliceData(b)), cap(b)-w.t.flatFixed
}

// putBytes writes s as RowBinary's String, its uvarint length then its
// bytes, at buf[off:], within buf's capacity: the room is there. It
// returns the offset after it.
func putBytes(buf []byte, off int, s []byte) int {
	buf = buf[:cap(buf)]
	n := uint(len(s))
	for n >= 0x80 {
		buf[off] = byte(n) | 0x80
		n >>= 7
		off++
	}
	buf[off] = byte(n)
	off++
	return off + copy(buf[off:], s)
}

// mismatch describes the first misplaced write.
func (w *FlatRow) mismatch() error {
	return misplaced{w.t, w.failN, w.failK, w.failSP}.err()
}

// misplaced is a misplaced write: of code k, at slot n of table t's
// layout, in an open row or not. A misplaced write panics with it (an
// error); the SDK recovers it and fails the record with it
// (Instance.recovered).
type misplaced struct {
	t  *Table
	n  int
	k  uint8
	sp unsafe.Pointer // the writer's slots then: t.flat, or unbound
}

func (m misplaced) Error() string { return m.err().Error() }

func (m misplaced) err() error {
	t, got := m.t, wroteName(m.k)
	if s := *(*uint8)(unsafe.Add(m.sp, m.n)); s == slotClosed || s == slotUnbound {
		return fmt.Errorf("sluice: %s value written with no row started (call Output.Flat first)", got)
	}
	s := t.flat[m.n]
	if s == slotEnd {
		return fmt.Errorf("sluice: table %q: %s value written past the last column (the table has %d)", t.Name, got, len(t.Columns))
	}
	c := &t.Columns[t.flatCol[m.n]]
	switch {
	case s == slotOther && c.t == nil:
		return fmt.Errorf("sluice: table %q, column %q: the SDK cannot write type %s: %v", t.Name, c.Name, c.Type, c.err)
	case s == slotOther:
		return fmt.Errorf("sluice: table %q, column %q: FlatRow cannot write type %s; write this table's rows with Output.Row", t.Name, c.Name, c.Type)
	case s == slotNull && m.k == t.flat[m.n+1]:
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

// Err returns the record's error so far.
func (w *FlatRow) Err() error { return w.o.err }

// Each method below, and each in writers_gen.go, checks its slot with one
// compare and, on a mismatch, notes it and panics: a call on that path
// would keep the method from inlining, and the panic's path is laid out of
// the way of the write's (FlatRow). A fixed-width value goes into the room
// Flat reserved, with no check of its own; a string or an array makes room
// for itself first.

// The typed writes of Row and FlatRow for the fixed-width types and the
// arrays of Int64 and UInt64 come from one table, so that both writers
// encode each type alike.
//go:generate go run ./internal/genwriters

// Null writes NULL to a Nullable column.
func (w *FlatRow) Null() *FlatRow {
	if w.slot() == slotNull {
		put8(w.at(), 1)
		w.off++
		w.n += 2
	} else {
		if w.failK == 0 {
			w.failK, w.failN, w.failSP = slotNull, w.n, w.sp
		}
		panic(misplaced{w.t, w.n, slotNull, w.sp})
	}
	return w
}

// NotNull marks a Nullable column as not null; the next write is its value.
func (w *FlatRow) NotNull() *FlatRow {
	if w.slot() == slotNull {
		put8(w.at(), 0)
		w.off++
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN, w.failSP = wroteNotNull, w.n, w.sp
		}
		panic(misplaced{w.t, w.n, wroteNotNull, w.sp})
	}
	return w
}

// String writes a String (or LowCardinality(String)) value.
func (w *FlatRow) String(s string) *FlatRow {
	return w.Bytes(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// Bytes writes a String value from a byte slice. Unlike the other writes
// it is a call: making room for the string takes more than the inliner
// allows.
func (w *FlatRow) Bytes(b []byte) *FlatRow {
	if w.slot() != uint8(chtype.String) {
		return w.wrote(uint8(chtype.String))
	}
	w.room(len(b) + maxVarint)
	w.off = putBytes(w.buf, w.off, b)
	w.n++
	return w
}

// ArrayString writes an Array(String) (or Array(LowCardinality(String))).
func (w *FlatRow) ArrayString(v []string) *FlatRow {
	if w.slot() != slotArrayString {
		return w.wrote(slotArrayString)
	}
	k := maxVarint * (1 + len(v))
	for _, s := range v {
		k += len(s)
	}
	w.room(k)
	w.off = putUvarint(w.base, w.off, uint64(len(v)))
	for _, s := range v {
		w.off = putBytes(w.buf, w.off, unsafe.Slice(unsafe.StringData(s), len(s)))
	}
	w.n++
	return w
}

// ArrayBytes writes an Array(String) (or Array(LowCardinality(String)))
// from byte slices.
func (w *FlatRow) ArrayBytes(v [][]byte) *FlatRow {
	if w.slot() != slotArrayString {
		return w.wrote(slotArrayString)
	}
	k := maxVarint * (1 + len(v))
	for _, s := range v {
		k += len(s)
	}
	w.room(k)
	off := putUvarint(w.base, w.off, uint64(len(v)))
	for _, s := range v {
		off = putBytes(w.buf, off, s)
	}
	w.off = off
	w.n++
	return w
}

// putUvarint writes v as a uvarint at off; the room is there. It returns
// the offset after it.
func putUvarint(base unsafe.Pointer, off int, v uint64) int {
	for v >= 0x80 {
		*(*byte)(unsafe.Add(base, off)) = byte(v) | 0x80
		v >>= 7
		off++
	}
	*(*byte)(unsafe.Add(base, off)) = byte(v)
	return off + 1
}

func boolByte(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// wrote notes a mismatched write of k and panics, for the methods that do
// not inline anyway.
func (w *FlatRow) wrote(k uint8) *FlatRow {
	if w.failK == 0 {
		w.failK, w.failN, w.failSP = k, w.n, w.sp
	}
	panic(misplaced{w.t, w.n, k, w.sp})
}
