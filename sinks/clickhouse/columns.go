package clickhouse

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// column is a columnar buffer for one ClickHouse column that decodes its
// values from RowBinary. RowBinary and the Native format share the encoding
// of a single fixed-width or String value, so most columns copy bytes.
type column interface {
	proto.ColInput
	// decode appends one value read from the front of b and returns how many
	// bytes it consumed.
	decode(b []byte) (int, error)
	// appendDefault appends the type's default value (used under a NULL).
	appendDefault()
	// truncate drops rows past n.
	truncate(n int)
	reset()
	// size is the encoded size of the column in bytes, approximately.
	size() int
	// shape appends the lengths of the column's buffers; reserve gives a
	// new column's buffers those capacities, consuming what shape wrote,
	// so that a fresh block does not grow its buffers value by value.
	shape(dst []int) []int
	reserve(shape []int) []int
	// streams calls fn with each of the column's buffers in the Native
	// format's order, as they are: array and map offsets as their
	// in-memory words (the Native bytes on a little-endian machine).
	streams(fn func([]byte))
}

// elemRange is where the elements of rows [from, from+n) of an Array or
// Map column with these cumulative offsets lie in its element columns.
func elemRange(offsets proto.ColUInt64, from, n int) (lo, hi uint64) {
	if from > 0 {
		lo = offsets[from-1]
	}
	return lo, offsets[from+n-1]
}

// wordBytes is the memory of a slice of words, as bytes.
func wordBytes(v []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}

// errShort is returned when a row ends inside a value.
var errShort = chtype.ErrShort

// columnOf returns a column for a parsed type.
func columnOf(t *chtype.Type) column {
	switch t.Kind {
	case chtype.String:
		// A JSON value is carried as its text, a String; the server parses
		// it into the column on insert (26.9 converts a String column to
		// JSON in the native protocol and Native format). The server
		// converts a String column into LowCardinality(String) on insert,
		// so sluice sends the plain column and saves the dictionary work;
		// other LowCardinality types are sent as their inner type too.
		return &stringColumn{}
	case chtype.Nullable:
		return &nullableColumn{inner: columnOf(t.Elem)}
	case chtype.Array:
		return &arrayColumn{t: t, inner: columnOf(t.Elem)}
	case chtype.Map:
		return &mapColumn{t: t, keys: columnOf(t.Key), values: columnOf(t.Elem)}
	case chtype.Tuple:
		c := &tupleColumn{t: t}
		for _, e := range t.Seq {
			c.elems = append(c.elems, columnOf(e))
		}
		return c
	}
	return &fixedColumn{t: t, width: t.Width(), check: t.Checked()}
}

// fixedColumn holds a fixed-width type. Its RowBinary and Native encodings
// are the same bytes, so decoding is a bounds check and a copy.
type fixedColumn struct {
	t     *chtype.Type
	width int
	check bool // t.Check can refuse a value
	buf   []byte
}

func (c *fixedColumn) Type() proto.ColumnType { return proto.ColumnType(c.t.Bare) }
func (c *fixedColumn) Rows() int              { return len(c.buf) / c.width }
func (c *fixedColumn) EncodeColumn(b *proto.Buffer) {
	b.Buf = append(b.Buf, c.buf...)
}
func (c *fixedColumn) WriteColumn(w *proto.Writer) { w.ChainWrite(c.buf) }
func (c *fixedColumn) decode(b []byte) (int, error) {
	if len(b) < c.width {
		return 0, errShort
	}
	v := b[:c.width]
	if c.check {
		if err := c.t.Check(v); err != nil {
			return 0, err
		}
	}
	// One load and store for the common widths instead of a copy.
	switch c.width {
	case 8:
		c.buf = binary.LittleEndian.AppendUint64(c.buf, binary.LittleEndian.Uint64(v))
	case 4:
		c.buf = binary.LittleEndian.AppendUint32(c.buf, binary.LittleEndian.Uint32(v))
	case 2:
		c.buf = binary.LittleEndian.AppendUint16(c.buf, binary.LittleEndian.Uint16(v))
	case 1:
		c.buf = append(c.buf, v[0])
	default:
		c.buf = append(c.buf, v...)
	}
	return c.width, nil
}
func (c *fixedColumn) appendDefault() {
	// An enum's default is its first declared value; the value written
	// under a NULL is never read, and 0 keeps the column decodable.
	for i := 0; i < c.width; i++ {
		c.buf = append(c.buf, 0)
	}
}
func (c *fixedColumn) truncate(n int)        { c.buf = c.buf[:n*c.width] }
func (c *fixedColumn) reset()                { c.buf = c.buf[:0] }
func (c *fixedColumn) shape(dst []int) []int { return append(dst, len(c.buf)) }
func (c *fixedColumn) reserve(s []int) []int {
	c.buf = make([]byte, 0, s[0])
	return s[1:]
}
func (c *fixedColumn) size() int               { return len(c.buf) }
func (c *fixedColumn) streams(fn func([]byte)) { fn(c.buf) }

// stringColumn holds String values. A String has the same bytes in
// RowBinary and in the Native format (a uvarint length, then the bytes), so
// the column keeps each value as it came and encodes with one copy.
type stringColumn struct {
	buf  []byte   // the values, each length-prefixed
	ends []uint32 // where each value ends in buf
}

func (c *stringColumn) Type() proto.ColumnType       { return proto.ColumnTypeString }
func (c *stringColumn) Rows() int                    { return len(c.ends) }
func (c *stringColumn) EncodeColumn(b *proto.Buffer) { b.Buf = append(b.Buf, c.buf...) }
func (c *stringColumn) WriteColumn(w *proto.Writer)  { w.ChainWrite(c.buf) }
func (c *stringColumn) decode(b []byte) (int, error) {
	end, err := chtype.StringLen(b)
	if err != nil {
		return 0, err
	}
	if len(c.buf)+end > math.MaxUint32 {
		return 0, errColumnFull
	}
	c.buf = append(c.buf, b[:end]...)
	c.ends = append(c.ends, uint32(len(c.buf)))
	return end, nil
}

func (c *stringColumn) appendDefault() {
	c.buf = append(c.buf, 0)
	c.ends = append(c.ends, uint32(len(c.buf)))
}
func (c *stringColumn) truncate(n int) {
	if n == 0 {
		c.reset()
		return
	}
	c.buf = c.buf[:c.ends[n-1]]
	c.ends = c.ends[:n]
}
func (c *stringColumn) shape(dst []int) []int { return append(dst, len(c.buf), len(c.ends)) }
func (c *stringColumn) reserve(s []int) []int {
	c.buf, c.ends = make([]byte, 0, s[0]), make([]uint32, 0, s[1])
	return s[2:]
}
func (c *stringColumn) reset() {
	c.buf = c.buf[:0]
	c.ends = c.ends[:0]
}
func (c *stringColumn) size() int               { return len(c.buf) }
func (c *stringColumn) streams(fn func([]byte)) { fn(c.buf) }

// value is row i's bytes, without their length.
func (c *stringColumn) value(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = c.ends[i-1]
	}
	v := c.buf[start:c.ends[i]]
	if v[0] < 0x80 {
		return v[1:]
	}
	_, k := binary.Uvarint(v)
	return v[k:]
}

// errColumnFull is returned when a column of one block would pass 4 GiB.
var errColumnFull = fmt.Errorf("the block's column would exceed 4 GiB; lower clickhouse.chunk_bytes")

// nullableColumn is a null map followed by the inner column, with a default
// value in the inner column for every NULL.
type nullableColumn struct {
	nulls []byte
	inner column
}

func (c *nullableColumn) Type() proto.ColumnType {
	return proto.ColumnType("Nullable(" + string(c.inner.Type()) + ")")
}
func (c *nullableColumn) Rows() int { return len(c.nulls) }
func (c *nullableColumn) EncodeColumn(b *proto.Buffer) {
	b.Buf = append(b.Buf, c.nulls...)
	c.inner.EncodeColumn(b)
}
func (c *nullableColumn) WriteColumn(w *proto.Writer) {
	w.ChainWrite(c.nulls)
	c.inner.WriteColumn(w)
}
func (c *nullableColumn) decode(b []byte) (int, error) {
	null, err := chtype.NullFlag(b)
	if err != nil {
		return 0, err
	}
	if null {
		c.nulls = append(c.nulls, 1)
		c.inner.appendDefault()
		return 1, nil
	}
	n, err := c.inner.decode(b[1:])
	if err != nil {
		return 0, err
	}
	c.nulls = append(c.nulls, 0)
	return n + 1, nil
}
func (c *nullableColumn) appendDefault() {
	c.nulls = append(c.nulls, 1)
	c.inner.appendDefault()
}
func (c *nullableColumn) truncate(n int) {
	c.nulls = c.nulls[:n]
	c.inner.truncate(n)
}
func (c *nullableColumn) shape(dst []int) []int { return c.inner.shape(append(dst, len(c.nulls))) }
func (c *nullableColumn) reserve(s []int) []int {
	c.nulls = make([]byte, 0, s[0])
	return c.inner.reserve(s[1:])
}
func (c *nullableColumn) reset() {
	c.nulls = c.nulls[:0]
	c.inner.reset()
}
func (c *nullableColumn) size() int { return len(c.nulls) + c.inner.size() }
func (c *nullableColumn) streams(fn func([]byte)) {
	fn(c.nulls)
	c.inner.streams(fn)
}

// arrayColumn is a column of cumulative offsets followed by the flattened
// elements.
type arrayColumn struct {
	t       *chtype.Type
	offsets proto.ColUInt64
	inner   column
}

func (c *arrayColumn) Type() proto.ColumnType {
	return proto.ColumnType("Array(" + string(c.inner.Type()) + ")")
}
func (c *arrayColumn) Rows() int { return len(c.offsets) }
func (c *arrayColumn) EncodeColumn(b *proto.Buffer) {
	c.offsets.EncodeColumn(b)
	c.inner.EncodeColumn(b)
}
func (c *arrayColumn) WriteColumn(w *proto.Writer) {
	c.offsets.WriteColumn(w)
	c.inner.WriteColumn(w)
}
func (c *arrayColumn) decode(b []byte) (int, error) {
	n, pos, err := c.t.Count(b)
	if err != nil {
		return 0, err
	}
	before := c.inner.Rows()
	for range n {
		m, err := c.inner.decode(b[pos:])
		if err != nil {
			c.inner.truncate(before)
			return 0, err
		}
		pos += m
	}
	c.offsets.Append(uint64(before + n))
	return pos, nil
}
func (c *arrayColumn) appendDefault() {
	c.offsets.Append(uint64(c.inner.Rows()))
}
func (c *arrayColumn) truncate(n int) {
	c.offsets = c.offsets[:n]
	if n == 0 {
		c.inner.truncate(0)
		return
	}
	c.inner.truncate(int(c.offsets[n-1]))
}
func (c *arrayColumn) shape(dst []int) []int { return c.inner.shape(append(dst, len(c.offsets))) }
func (c *arrayColumn) reserve(s []int) []int {
	c.offsets = make(proto.ColUInt64, 0, s[0])
	return c.inner.reserve(s[1:])
}
func (c *arrayColumn) reset() {
	c.offsets = c.offsets[:0]
	c.inner.reset()
}
func (c *arrayColumn) size() int { return 8*len(c.offsets) + c.inner.size() }
func (c *arrayColumn) streams(fn func([]byte)) {
	fn(wordBytes(c.offsets))
	c.inner.streams(fn)
}

// mapColumn is Map(K, V): in the Native format an Array(Tuple(K, V)),
// cumulative offsets then the key column then the value column; in
// RowBinary a count and that many key, value pairs.
type mapColumn struct {
	t            *chtype.Type
	offsets      proto.ColUInt64
	keys, values column
}

func (c *mapColumn) Type() proto.ColumnType {
	return proto.ColumnType("Map(" + string(c.keys.Type()) + ", " + string(c.values.Type()) + ")")
}
func (c *mapColumn) Rows() int { return len(c.offsets) }
func (c *mapColumn) EncodeColumn(b *proto.Buffer) {
	c.offsets.EncodeColumn(b)
	c.keys.EncodeColumn(b)
	c.values.EncodeColumn(b)
}
func (c *mapColumn) WriteColumn(w *proto.Writer) {
	c.offsets.WriteColumn(w)
	c.keys.WriteColumn(w)
	c.values.WriteColumn(w)
}
func (c *mapColumn) decode(b []byte) (int, error) {
	n, pos, err := c.t.Count(b)
	if err != nil {
		return 0, err
	}
	before := c.keys.Rows()
	for range n {
		m, err := c.keys.decode(b[pos:])
		if err == nil {
			pos += m
			m, err = c.values.decode(b[pos:])
		}
		if err != nil {
			c.keys.truncate(before)
			c.values.truncate(before)
			return 0, err
		}
		pos += m
	}
	c.offsets.Append(uint64(before + n))
	return pos, nil
}
func (c *mapColumn) appendDefault() { c.offsets.Append(uint64(c.keys.Rows())) }
func (c *mapColumn) truncate(n int) {
	c.offsets = c.offsets[:n]
	end := 0
	if n > 0 {
		end = int(c.offsets[n-1])
	}
	c.keys.truncate(end)
	c.values.truncate(end)
}
func (c *mapColumn) shape(dst []int) []int {
	return c.values.shape(c.keys.shape(append(dst, len(c.offsets))))
}
func (c *mapColumn) reserve(s []int) []int {
	c.offsets = make(proto.ColUInt64, 0, s[0])
	return c.values.reserve(c.keys.reserve(s[1:]))
}
func (c *mapColumn) reset() {
	c.offsets = c.offsets[:0]
	c.keys.reset()
	c.values.reset()
}
func (c *mapColumn) size() int { return 8*len(c.offsets) + c.keys.size() + c.values.size() }
func (c *mapColumn) streams(fn func([]byte)) {
	fn(wordBytes(c.offsets))
	c.keys.streams(fn)
	c.values.streams(fn)
}

// tupleColumn is Tuple(T1, …) or Tuple(name1 T1, …): one column per
// element, in order, in both RowBinary and the Native format.
type tupleColumn struct {
	t     *chtype.Type
	elems []column
}

func (c *tupleColumn) Type() proto.ColumnType {
	var b strings.Builder
	b.WriteString("Tuple(")
	for i, e := range c.elems {
		if i > 0 {
			b.WriteString(", ")
		}
		if name := c.t.Names[i]; name != "" {
			b.WriteString(tupleName(name) + " ")
		}
		b.WriteString(string(e.Type()))
	}
	b.WriteString(")")
	return proto.ColumnType(b.String())
}

// tupleName spells a Tuple element's name: bare when it is an identifier,
// else in backquotes.
func tupleName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return quoteIdent(s)
		}
	}
	return s
}

func (c *tupleColumn) Rows() int { return c.elems[0].Rows() }
func (c *tupleColumn) EncodeColumn(b *proto.Buffer) {
	for _, e := range c.elems {
		e.EncodeColumn(b)
	}
}
func (c *tupleColumn) WriteColumn(w *proto.Writer) {
	for _, e := range c.elems {
		e.WriteColumn(w)
	}
}
func (c *tupleColumn) decode(b []byte) (int, error) {
	before := c.Rows()
	pos := 0
	for i, e := range c.elems {
		m, err := e.decode(b[pos:])
		if err != nil {
			for _, d := range c.elems[:i] {
				d.truncate(before)
			}
			return 0, err
		}
		pos += m
	}
	return pos, nil
}
func (c *tupleColumn) appendDefault() {
	for _, e := range c.elems {
		e.appendDefault()
	}
}
func (c *tupleColumn) truncate(n int) {
	for _, e := range c.elems {
		e.truncate(n)
	}
}
func (c *tupleColumn) shape(dst []int) []int {
	for _, e := range c.elems {
		dst = e.shape(dst)
	}
	return dst
}
func (c *tupleColumn) reserve(s []int) []int {
	for _, e := range c.elems {
		s = e.reserve(s)
	}
	return s
}
func (c *tupleColumn) reset() {
	for _, e := range c.elems {
		e.reset()
	}
}
func (c *tupleColumn) streams(fn func([]byte)) {
	for _, e := range c.elems {
		e.streams(fn)
	}
}

func (c *tupleColumn) size() int {
	n := 0
	for _, e := range c.elems {
		n += e.size()
	}
	return n
}
