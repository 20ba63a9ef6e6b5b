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
	// The row's bytes go straight into o.buf's backing array, past its
	// length, which End advances: buf[:off] is written. Flat reserves room
	// for every fixed-width value and NULL marker of the row
	// (Table.flatFixed), and a string or an array makes room for itself
	// and that reserve again, so a fixed-width write needs no check of its
	// own: it is one store at base+off. A value is written only when its
	// slot matches, and each slot once, so what a row's fixed-width writes
	// take never exceeds the reserve (TestFlatRowKeepsItsRoom).
	buf   []byte         // o.buf, taken by Flat and handed back by End
	base  unsafe.Pointer // buf's backing array
	off   int            // where the next byte goes
	lim   int            // cap(buf) - t.flatFixed: a variable write must end by it
	sp    unsafe.Pointer // the table's slots (t.flat): what each value must be; the last is slotEnd
	n     int            // the next value's slot
	o     *Output
	t     *Table
	failN int   // the slot of the first mismatch
	failK uint8 // what was written there; 0 while there was none
	start int   // offset of the row's u32 length in buf
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

// maxVarint is the most bytes a length's uvarint takes.
const maxVarint = binary.MaxVarintLen64

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
// the column of each slot (the end's is len(cols)), and the bytes a row's
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
	return append(slots, slotEnd), append(col, len(cols)), fixed
}

// flatWidth is the bytes of a value of scalar kind k in RowBinary; 0 for
// String, whose writes make room for themselves.
func flatWidth(k chtype.Kind) int {
	switch k {
	case chtype.UInt8, chtype.Int8, chtype.Bool:
		return 1
	case chtype.UInt16, chtype.Int16, chtype.Date:
		return 2
	case chtype.UInt32, chtype.Int32, chtype.Float32, chtype.Date32, chtype.DateTime, chtype.IPv4:
		return 4
	case chtype.UInt64, chtype.Int64, chtype.Float64, chtype.DateTime64:
		return 8
	case chtype.UUID, chtype.IPv6:
		return 16
	}
	return 0
}

// Flat starts a row of table t and returns its FlatRow writer. Write one
// value per column, in column order, then call End.
func (o *Output) Flat(t *Table) *FlatRow {
	w := &o.flat
	if o.err != nil || o.row.open || w.open || w.failK != 0 || t == nil || t.cfg != o.cfg {
		o.rowMisuse(t, "Flat")
		w.stop()
		w.failK = 0
		return w
	}
	b := o.buf
	if need := 6 + t.flatFixed; cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	w.t, w.n, w.failK, w.open = t, 0, 0, true
	w.sp = unsafe.Pointer(unsafe.SliceData(t.flat))
	w.buf, w.base, w.lim = b, unsafe.Pointer(unsafe.SliceData(b)), cap(b)-t.flatFixed
	at := unsafe.Add(w.base, len(b))
	put16(at, uint16(t.Index))
	put32(unsafe.Add(at, 2), 0) // the length, patched by End
	w.start, w.off = len(b)+2, len(b)+6
	return w
}

// stop leaves w with no row: every write is a mismatch until the next
// Flat.
func (w *FlatRow) stop() {
	w.open, w.buf, w.base, w.off, w.lim, w.n = false, nil, nil, 0, 0, 0
	w.sp = unsafe.Pointer(unsafe.SliceData(endOnly))
}

// End finishes the row. It returns the record's error, if any: the first
// mismatched write, columns left unwritten, or an earlier error of the
// record.
func (w *FlatRow) End() error {
	o := w.o
	if w.failK != 0 || o.err != nil || !w.open || w.slot() != slotEnd || uint64(w.off-w.start-4) > math.MaxUint32 {
		return w.endSlow()
	}
	put32(unsafe.Add(w.base, w.start), uint32(w.off-w.start-4))
	o.buf = w.buf[:w.off]
	// Closing the row is enough to stop it: its next slot is the end,
	// which every write mismatches, and the next Flat sets the rest.
	// (stop's stores of the pointers cost more than the row's other
	// bookkeeping.)
	w.open = false
	o.nrows++
	return nil
}

func (w *FlatRow) endSlow() error {
	o := w.o
	if w.open {
		o.buf = w.buf[:w.off]
	}
	switch {
	case o.err != nil:
	case !w.open:
		o.fail(errors.New("sluice: End called with no row started"))
	case w.failK != 0:
		o.fail(w.mismatch())
	case w.slot() != slotEnd:
		c := &w.t.Columns[w.t.flatCol[w.n]]
		o.fail(fmt.Errorf("sluice: table %q: row ended after %d of %d columns: column %q (%s) not written",
			w.t.Name, w.t.flatCol[w.n], len(w.t.Columns), c.Name, c.Type))
	default:
		o.fail(fmt.Errorf("sluice: table %q: row of %d bytes is too long", w.t.Name, w.off-w.start-4))
	}
	w.stop()
	w.failK = 0
	return o.err
}

// slot is what the next value must be. n never passes the slotEnd that
// ends the slots: it moves on only past a slot a write matched.
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
	return misplaced{w.t, w.failN, w.failK, w.open}.err()
}

// misplaced is a misplaced write: of code k, at slot n of table t's
// layout, in an open row or not. A misplaced write panics with it (an
// error); the SDK recovers it and fails the record with it
// (Instance.recovered).
type misplaced struct {
	t    *Table
	n    int
	k    uint8
	open bool
}

func (m misplaced) Error() string { return m.err().Error() }

func (m misplaced) err() error {
	t, got := m.t, wroteName(m.k)
	if !m.open {
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

// Each method below checks its slot with one compare and, on a mismatch,
// notes it and panics: a call on that path would keep the method from
// inlining, and the panic's path is laid out of the way of the write's
// (FlatRow). A fixed-width value goes into the room Flat reserved, with
// no check of its own; a string or an array makes room for itself first.

// Null writes NULL to a Nullable column.
func (w *FlatRow) Null() *FlatRow {
	if w.slot() == slotNull {
		put8(w.at(), 1)
		w.off++
		w.n += 2
	} else {
		if w.failK == 0 {
			w.failK, w.failN = slotNull, w.n
		}
		panic(misplaced{w.t, w.n, slotNull, w.open})
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
			w.failK, w.failN = wroteNotNull, w.n
		}
		panic(misplaced{w.t, w.n, wroteNotNull, w.open})
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

// UInt8 writes a UInt8.
func (w *FlatRow) UInt8(v uint8) *FlatRow {
	if w.slot() == uint8(chtype.UInt8) {
		put8(w.at(), v)
		w.off += 1
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.UInt8), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.UInt8), w.open})
	}
	return w
}

// UInt16 writes a UInt16.
func (w *FlatRow) UInt16(v uint16) *FlatRow {
	if w.slot() == uint8(chtype.UInt16) {
		put16(w.at(), v)
		w.off += 2
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.UInt16), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.UInt16), w.open})
	}
	return w
}

// UInt32 writes a UInt32.
func (w *FlatRow) UInt32(v uint32) *FlatRow {
	if w.slot() == uint8(chtype.UInt32) {
		put32(w.at(), v)
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.UInt32), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.UInt32), w.open})
	}
	return w
}

// UInt64 writes a UInt64.
func (w *FlatRow) UInt64(v uint64) *FlatRow {
	if w.slot() == uint8(chtype.UInt64) {
		put64(w.at(), v)
		w.off += 8
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.UInt64), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.UInt64), w.open})
	}
	return w
}

// Int8 writes an Int8.
func (w *FlatRow) Int8(v int8) *FlatRow {
	if w.slot() == uint8(chtype.Int8) {
		put8(w.at(), uint8(v))
		w.off += 1
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Int8), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Int8), w.open})
	}
	return w
}

// Int16 writes an Int16.
func (w *FlatRow) Int16(v int16) *FlatRow {
	if w.slot() == uint8(chtype.Int16) {
		put16(w.at(), uint16(v))
		w.off += 2
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Int16), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Int16), w.open})
	}
	return w
}

// Int32 writes an Int32.
func (w *FlatRow) Int32(v int32) *FlatRow {
	if w.slot() == uint8(chtype.Int32) {
		put32(w.at(), uint32(v))
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Int32), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Int32), w.open})
	}
	return w
}

// Int64 writes an Int64.
func (w *FlatRow) Int64(v int64) *FlatRow {
	if w.slot() == uint8(chtype.Int64) {
		put64(w.at(), uint64(v))
		w.off += 8
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Int64), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Int64), w.open})
	}
	return w
}

// Float32 writes a Float32.
func (w *FlatRow) Float32(v float32) *FlatRow {
	if w.slot() == uint8(chtype.Float32) {
		put32(w.at(), math.Float32bits(v))
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Float32), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Float32), w.open})
	}
	return w
}

// Float64 writes a Float64.
func (w *FlatRow) Float64(v float64) *FlatRow {
	if w.slot() == uint8(chtype.Float64) {
		put64(w.at(), math.Float64bits(v))
		w.off += 8
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Float64), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Float64), w.open})
	}
	return w
}

// Bool writes a Bool.
func (w *FlatRow) Bool(v bool) *FlatRow {
	if w.slot() == uint8(chtype.Bool) {
		put8(w.at(), boolByte(v))
		w.off += 1
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Bool), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Bool), w.open})
	}
	return w
}

// Date writes a Date: days since 1970-01-01.
func (w *FlatRow) Date(days uint16) *FlatRow {
	if w.slot() == uint8(chtype.Date) {
		put16(w.at(), days)
		w.off += 2
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Date), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Date), w.open})
	}
	return w
}

// Date32 writes a Date32: days since 1970-01-01, negative before it.
func (w *FlatRow) Date32(days int32) *FlatRow {
	if w.slot() == uint8(chtype.Date32) {
		put32(w.at(), uint32(days))
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.Date32), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.Date32), w.open})
	}
	return w
}

// DateTime writes a DateTime: seconds since the Unix epoch.
func (w *FlatRow) DateTime(sec uint32) *FlatRow {
	if w.slot() == uint8(chtype.DateTime) {
		put32(w.at(), sec)
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.DateTime), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.DateTime), w.open})
	}
	return w
}

// DateTime64 writes a DateTime64(P) from its ticks: units of 10^-P seconds
// since the Unix epoch (milliseconds for DateTime64(3)).
func (w *FlatRow) DateTime64(ticks int64) *FlatRow {
	if w.slot() == uint8(chtype.DateTime64) {
		put64(w.at(), uint64(ticks))
		w.off += 8
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.DateTime64), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.DateTime64), w.open})
	}
	return w
}

// UUID writes a UUID given in its usual byte order, as Row.UUID does.
func (w *FlatRow) UUID(u [16]byte) *FlatRow {
	if w.slot() == uint8(chtype.UUID) {
		at := w.at()
		put64(at, binary.BigEndian.Uint64(u[:8]))
		put64(unsafe.Add(at, 8), binary.BigEndian.Uint64(u[8:]))
		w.off += 16
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.UUID), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.UUID), w.open})
	}
	return w
}

// IPv4 writes an IPv4 address given in network order (netip.Addr.As4).
func (w *FlatRow) IPv4(a [4]byte) *FlatRow {
	if w.slot() == uint8(chtype.IPv4) {
		put32(w.at(), binary.BigEndian.Uint32(a[:]))
		w.off += 4
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.IPv4), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.IPv4), w.open})
	}
	return w
}

// IPv6 writes an IPv6 address given in network order (netip.Addr.As16).
func (w *FlatRow) IPv6(a [16]byte) *FlatRow {
	if w.slot() == uint8(chtype.IPv6) {
		*(*[16]byte)(w.at()) = a
		w.off += 16
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN = uint8(chtype.IPv6), w.n
		}
		panic(misplaced{w.t, w.n, uint8(chtype.IPv6), w.open})
	}
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

// ArrayInt64 writes an Array(Int64).
func (w *FlatRow) ArrayInt64(v []int64) *FlatRow {
	if w.slot() != slotArrayInt64 {
		return w.wrote(slotArrayInt64)
	}
	w.room(maxVarint + 8*len(v))
	base, off := w.base, putUvarint(w.base, w.off, uint64(len(v)))
	for _, x := range v {
		put64(unsafe.Add(base, off), uint64(x))
		off += 8
	}
	w.off = off
	w.n++
	return w
}

// ArrayUInt64 writes an Array(UInt64).
func (w *FlatRow) ArrayUInt64(v []uint64) *FlatRow {
	if w.slot() != slotArrayUInt64 {
		return w.wrote(slotArrayUInt64)
	}
	w.room(maxVarint + 8*len(v))
	base, off := w.base, putUvarint(w.base, w.off, uint64(len(v)))
	for _, x := range v {
		put64(unsafe.Add(base, off), x)
		off += 8
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
		w.failK, w.failN = k, w.n
	}
	panic(misplaced{w.t, w.n, k, w.open})
}
