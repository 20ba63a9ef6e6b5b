package clickhouse

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chsql"
)

// column is a columnar buffer for one ClickHouse column that decodes its
// values from RowBinary. RowBinary and the Native format share the encoding
// of a single fixed-width or String value, so most columns copy bytes.
type column interface {
	proto.ColInput
	// decode appends one value read from the front of b and returns how many
	// bytes it consumed.
	decode(b []byte) (int, error)
	// skip returns the length of the value at the front of b without
	// decoding it (routing looks past the columns before the sharding key).
	skip(b []byte) (int, error)
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
}

// errShort is returned when a row ends inside a value.
var errShort = fmt.Errorf("row ends inside a value")

// newColumn returns a column for a ClickHouse type as the server spells it.
func newColumn(typ string) (column, error) {
	t := strings.TrimSpace(typ)
	name, args := splitType(t)
	switch name {
	case "UInt8", "Int8":
		return &fixedColumn{typ: t, width: 1}, nil
	case "Bool":
		return &fixedColumn{typ: t, width: 1, check: checkBool}, nil
	case "UInt16", "Int16", "Date":
		return &fixedColumn{typ: t, width: 2}, nil
	case "UInt32", "Int32", "Float32", "DateTime", "IPv4", "Date32":
		return &fixedColumn{typ: t, width: 4}, nil
	case "UInt64", "Int64", "Float64", "DateTime64":
		return &fixedColumn{typ: t, width: 8}, nil
	case "UInt128", "Int128", "UUID", "IPv6":
		return &fixedColumn{typ: t, width: 16}, nil
	case "UInt256", "Int256":
		return &fixedColumn{typ: t, width: 32}, nil
	case "Decimal32":
		return &fixedColumn{typ: t, width: 4}, nil
	case "Decimal64":
		return &fixedColumn{typ: t, width: 8}, nil
	case "Decimal128":
		return &fixedColumn{typ: t, width: 16}, nil
	case "Decimal256":
		return &fixedColumn{typ: t, width: 32}, nil
	case "JSON":
		// Module output carries a JSON value as its text, a String; the
		// server parses it into the column on insert (26.9 converts a
		// String column to JSON in the native protocol and Native format).
		return &stringColumn{}, nil
	case "Decimal":
		parts := chsql.SplitTopLevel(args)
		if len(parts) != 2 {
			return nil, fmt.Errorf("type %s: want Decimal(P, S)", t)
		}
		p, err := strconv.Atoi(parts[0])
		if err != nil || p < 1 || p > 76 {
			return nil, fmt.Errorf("type %s: bad precision", t)
		}
		switch {
		case p <= 9:
			return &fixedColumn{typ: t, width: 4}, nil
		case p <= 18:
			return &fixedColumn{typ: t, width: 8}, nil
		case p <= 38:
			return &fixedColumn{typ: t, width: 16}, nil
		default:
			return &fixedColumn{typ: t, width: 32}, nil
		}
	case "FixedString":
		n, err := strconv.Atoi(strings.TrimSpace(args))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("type %s: bad length", t)
		}
		return &fixedColumn{typ: t, width: n}, nil
	case "Enum8", "Enum16":
		values, err := parseEnum(args)
		if err != nil {
			return nil, fmt.Errorf("type %s: %w", t, err)
		}
		width := 1
		if name == "Enum16" {
			width = 2
		}
		return &fixedColumn{typ: t, width: width, check: enumCheck(values, width)}, nil
	case "String":
		return &stringColumn{}, nil
	case "LowCardinality":
		inner := strings.TrimSpace(args)
		// The server converts a String column into LowCardinality(String) on
		// insert, so sluice sends the plain column and saves the dictionary
		// work; other LowCardinality types are sent as their inner type too.
		return newColumn(inner)
	case "Nullable":
		inner, err := newColumn(args)
		if err != nil {
			return nil, err
		}
		return &nullableColumn{inner: inner}, nil
	case "Array":
		inner, err := newColumn(args)
		if err != nil {
			return nil, err
		}
		return &arrayColumn{inner: inner}, nil
	case "Map":
		parts := chsql.SplitTopLevel(args)
		if len(parts) != 2 {
			return nil, fmt.Errorf("type %s: want Map(K, V)", t)
		}
		key, err := newColumn(parts[0])
		if err != nil {
			return nil, err
		}
		value, err := newColumn(parts[1])
		if err != nil {
			return nil, err
		}
		return &mapColumn{keys: key, values: value}, nil
	case "Tuple":
		parts := chsql.SplitTopLevel(args)
		if len(parts) == 0 {
			return nil, fmt.Errorf("type %s: a Tuple needs elements", t)
		}
		c := &tupleColumn{}
		for _, p := range parts {
			name, elemType := tupleElement(p)
			elem, err := newColumn(elemType)
			if err != nil {
				return nil, err
			}
			c.names = append(c.names, name)
			c.elems = append(c.elems, elem)
		}
		return c, nil
	}
	return nil, fmt.Errorf("unsupported type %s", t)
}

// splitType splits "Name(args)" into Name and args.
func splitType(t string) (string, string) {
	i := strings.IndexByte(t, '(')
	if i < 0 || !strings.HasSuffix(t, ")") {
		return t, ""
	}
	return t[:i], t[i+1 : len(t)-1]
}

// parseEnum reads "'a' = 1, 'b' = 2" into the set of declared values.
func parseEnum(args string) (map[int16]bool, error) {
	values := map[int16]bool{}
	for _, part := range chsql.SplitTopLevel(args) {
		eq := strings.LastIndexByte(part, '=')
		if eq < 0 {
			return nil, fmt.Errorf("enum element %q has no value", part)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(part[eq+1:]), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("enum element %q: %w", part, err)
		}
		values[int16(v)] = true
	}
	if len(values) == 0 {
		return nil, fmt.Errorf("enum declares no values")
	}
	return values, nil
}

func checkBool(b []byte) error {
	if b[0] > 1 {
		return fmt.Errorf("Bool value %d is neither 0 nor 1", b[0])
	}
	return nil
}

func enumCheck(values map[int16]bool, width int) func([]byte) error {
	// A dense table keeps the per-value check to one index.
	var allowed [1 << 16]bool
	for v := range values {
		allowed[uint16(v)] = true
	}
	return func(b []byte) error {
		var v int16
		if width == 1 {
			v = int16(int8(b[0]))
		} else {
			v = int16(binary.LittleEndian.Uint16(b))
		}
		if !allowed[uint16(v)] {
			return fmt.Errorf("enum value %d is not declared", v)
		}
		return nil
	}
}

// fixedColumn holds a fixed-width type. Its RowBinary and Native encodings
// are the same bytes, so decoding is a bounds check and a copy.
type fixedColumn struct {
	typ   string
	width int
	check func([]byte) error
	buf   []byte
}

func (c *fixedColumn) Type() proto.ColumnType { return proto.ColumnType(c.typ) }
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
	if c.check != nil {
		if err := c.check(v); err != nil {
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
func (c *fixedColumn) skip(b []byte) (int, error) {
	if len(b) < c.width {
		return 0, errShort
	}
	return c.width, nil
}
func (c *fixedColumn) appendDefault() {
	if c.check != nil {
		// An enum's default is its first declared value; the value written
		// under a NULL is never read, and 0 keeps the column decodable.
		c.buf = append(c.buf, make([]byte, c.width)...)
		return
	}
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
func (c *fixedColumn) size() int { return len(c.buf) }

// maxStringLen bounds a single String value decoded from module output.
const maxStringLen = 1 << 30

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
	end, err := c.skip(b)
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
func (c *stringColumn) skip(b []byte) (int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxStringLen || n > uint64(len(b)-k) {
		return 0, errShort
	}
	return k + int(n), nil
}

// value is the content of value i.
func (c *stringColumn) value(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = c.ends[i-1]
	}
	v := c.buf[start:c.ends[i]]
	_, k := binary.Uvarint(v)
	return v[k:]
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
func (c *stringColumn) size() int { return len(c.buf) }

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
	if len(b) < 1 {
		return 0, errShort
	}
	switch b[0] {
	case 1:
		c.nulls = append(c.nulls, 1)
		c.inner.appendDefault()
		return 1, nil
	case 0:
		n, err := c.inner.decode(b[1:])
		if err != nil {
			return 0, err
		}
		c.nulls = append(c.nulls, 0)
		return n + 1, nil
	}
	return 0, fmt.Errorf("Nullable flag %d is neither 0 nor 1", b[0])
}
func (c *nullableColumn) skip(b []byte) (int, error) {
	if len(b) < 1 {
		return 0, errShort
	}
	switch b[0] {
	case 1:
		return 1, nil
	case 0:
		n, err := c.inner.skip(b[1:])
		return n + 1, err
	}
	return 0, fmt.Errorf("Nullable flag %d is neither 0 nor 1", b[0])
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

// maxArrayLen bounds the element count of one Array value.
const maxArrayLen = 1 << 24

// arrayColumn is a column of cumulative offsets followed by the flattened
// elements.
type arrayColumn struct {
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
	n, k, err := c.length(b)
	if err != nil {
		return 0, err
	}
	before := c.inner.Rows()
	pos := k
	for i := uint64(0); i < n; i++ {
		m, err := c.inner.decode(b[pos:])
		if err != nil {
			c.inner.truncate(before)
			return 0, err
		}
		pos += m
	}
	c.offsets.Append(uint64(before) + n)
	return pos, nil
}

func (c *arrayColumn) skip(b []byte) (int, error) {
	n, k, err := c.length(b)
	if err != nil {
		return 0, err
	}
	pos := k
	for i := uint64(0); i < n; i++ {
		m, err := c.inner.skip(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += m
	}
	return pos, nil
}

// length reads an array value's element count and the size of its
// prefix, refusing a count the rest of the row cannot hold.
func (c *arrayColumn) length(b []byte) (uint64, int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return 0, 0, errShort
	}
	if n > maxArrayLen || n*uint64(c.minWidth()) > uint64(len(b)-k) {
		return 0, 0, fmt.Errorf("array of %d elements does not fit the row", n)
	}
	return n, k, nil
}

// minWidth is the smallest encoded size of one element, for a cheap bound
// on the declared element count.
func (c *arrayColumn) minWidth() int {
	if f, ok := c.inner.(*fixedColumn); ok {
		return f.width
	}
	return 1
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

// tupleElement splits a Tuple element, "T" or "name T", into its name ("" for
// none) and type. A type never has a space before its first '(' or the end,
// so a name is a leading identifier followed by white space.
func tupleElement(s string) (string, string) {
	s = strings.TrimSpace(s)
	i := strings.IndexAny(s, " \t\n(")
	if i <= 0 || s[i] == '(' {
		return "", s
	}
	name := strings.Trim(s[:i], "`")
	return name, strings.TrimSpace(s[i:])
}

// mapColumn is Map(K, V): in the Native format an Array(Tuple(K, V)),
// cumulative offsets then the key column then the value column; in
// RowBinary a count and that many key, value pairs.
type mapColumn struct {
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
	n, k := binary.Uvarint(b)
	// Every entry takes at least two bytes (a key and a value).
	if k <= 0 || n > maxArrayLen || 2*n > uint64(len(b)-k) {
		return 0, fmt.Errorf("map of %d entries does not fit the row", n)
	}
	before := c.keys.Rows()
	pos := k
	for i := uint64(0); i < n; i++ {
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
	c.offsets.Append(uint64(before) + n)
	return pos, nil
}
func (c *mapColumn) skip(b []byte) (int, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxArrayLen || 2*n > uint64(len(b)-k) {
		return 0, fmt.Errorf("map of %d entries does not fit the row", n)
	}
	pos := k
	for i := uint64(0); i < 2*n; i++ {
		col := c.keys
		if i%2 == 1 {
			col = c.values
		}
		m, err := col.skip(b[pos:])
		if err != nil {
			return 0, err
		}
		pos += m
	}
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

// tupleColumn is Tuple(T1, …) or Tuple(name1 T1, …): one column per
// element, in order, in both RowBinary and the Native format.
type tupleColumn struct {
	names []string // "" for an unnamed element
	elems []column
}

func (c *tupleColumn) Type() proto.ColumnType {
	var b strings.Builder
	b.WriteString("Tuple(")
	for i, e := range c.elems {
		if i > 0 {
			b.WriteString(", ")
		}
		if c.names[i] != "" {
			b.WriteString(c.names[i] + " ")
		}
		b.WriteString(string(e.Type()))
	}
	b.WriteString(")")
	return proto.ColumnType(b.String())
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
func (c *tupleColumn) skip(b []byte) (int, error) {
	pos := 0
	for _, e := range c.elems {
		m, err := e.skip(b[pos:])
		if err != nil {
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
func (c *tupleColumn) size() int {
	n := 0
	for _, e := range c.elems {
		n += e.size()
	}
	return n
}
