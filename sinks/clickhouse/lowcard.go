package clickhouse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"unsafe"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// LowCardinality columns are decoded and held as their inner type. The
// native protocol at revision 54031 converts such a column on insert; the
// Native format over HTTP does not (18.16: "Bad cast from type
// DB::ColumnString to DB::ColumnLowCardinality"), so Native encoding
// writes LowCardinality(String) and LowCardinality(Nullable(String))
// columns in their own serialization: a dictionary of the block's distinct
// values ("additional keys") and a key per row.

// lowCardinalityKind reports how a column type is encoded in the Native
// format: 0 as itself, 1 LowCardinality(String), 2
// LowCardinality(Nullable(String)), 3 Array(LowCardinality(String)), 4
// Array(LowCardinality(Nullable(String))); other LowCardinality types at
// the top are an error (nested ones go as their inner type).
func lowCardinalityKind(typ string) (int, error) {
	t, err := chtype.Parse(typ)
	if err != nil {
		return 0, nil
	}
	if t.Kind == chtype.Array && t.Elem.LowCardinality {
		if k := lowCardinalityStringKind(t.Elem); k != 0 {
			return k + 2, nil
		}
		return 0, nil
	}
	if !t.LowCardinality {
		return 0, nil
	}
	if k := lowCardinalityStringKind(t); k != 0 {
		return k, nil
	}
	return 0, fmt.Errorf("type %s cannot be sent in the Native format over HTTP to this server (only LowCardinality(String) and LowCardinality(Nullable(String)) can, unless the server converts columns: input_format_native_allow_types_conversion); use transport native", typ)
}

func isString(t *chtype.Type) bool { return t.Kind == chtype.String && !t.JSON }

// lowCardinalityStringKind is 1 for LowCardinality(String), 2 for
// LowCardinality(Nullable(String)), 0 for any other type.
func lowCardinalityStringKind(t *chtype.Type) int {
	switch {
	case !t.LowCardinality:
		return 0
	case isString(t):
		return 1
	case t.Kind == chtype.Nullable && isString(t.Elem):
		return 2
	}
	return 0
}

// httpLowCardinality reports an error for a type whose LowCardinality parts
// the Native format over HTTP cannot carry without the server converting
// columns (input_format_native_allow_types_conversion, not in 18.16):
// LowCardinality other than LowCardinality(String) and
// LowCardinality(Nullable(String)) at the top, and any LowCardinality
// nested in Array, Map, Tuple or Nullable but the element of
// Array(LowCardinality(String)) and Array(LowCardinality(Nullable(String))),
// which sluice sends as the inner type.
func httpLowCardinality(typ string) error {
	if _, err := lowCardinalityKind(typ); err != nil {
		return err
	}
	t, err := chtype.Parse(typ)
	if err != nil {
		return nil // NewTable reports it
	}
	if kind, _ := lowCardinalityKind(typ); kind < 3 && nestedLowCardinality(children(t)) {
		return fmt.Errorf("type %s cannot be sent in the Native format over HTTP to this server: it has LowCardinality inside, and the server does not convert columns (input_format_native_allow_types_conversion); use transport native", typ)
	}
	return nil
}

// nestedLowCardinality reports whether any of the types is or holds a
// LowCardinality.
func nestedLowCardinality(ts []*chtype.Type) bool {
	for _, t := range ts {
		if t.LowCardinality || nestedLowCardinality(children(t)) {
			return true
		}
	}
	return false
}

// children are the types a type holds.
func children(t *chtype.Type) []*chtype.Type {
	if t.Kind == chtype.Nullable {
		return []*chtype.Type{t.Elem}
	}
	return t.Seq
}

// LowCardinality serialization constants (ClickHouse
// SerializationLowCardinality).
const (
	lcSharedDictionariesWithAdditionalKeys = 1
	lcHasAdditionalKeys                    = 1 << 9
	lcNeedUpdateDictionary                 = 1 << 10
)

// lowCardinalityString encodes a String (or Nullable(String)) column as
// LowCardinality. It is kept with its block and reused, so its dictionary
// and buffers are allocated once. The dictionary is an open-addressing
// table of the values' hashes, each checked against the value it stands
// for: a map keyed by the value would allocate a string for every distinct
// value of every insert, and one keyed by the hash hashes it again.
type lowCardinalityString struct {
	typ   proto.ColumnType
	src   *stringColumn
	nulls []byte // the null map, for Nullable(String); nil otherwise
	seed  maphash.Seed
	// slots are the table, a power of two long; a slot holds a hash and
	// its value's key plus one (0: empty). used counts the full ones.
	slots []lcSlot
	used  int
	index proto.ColStr
	keys  []uint32
	// cache holds recent values of up to 16 bytes and their keys plus one
	// (0: empty), by a hash of their words; reset clears it with the
	// dictionary.
	cache [lcCacheSlots]lcCacheEntry
	state lcState
}

// lcCacheBits sizes an encoder's cache of short values: 1<<lcCacheBits
// slots.
const (
	lcCacheBits  = 7
	lcCacheSlots = 1 << lcCacheBits
	// lcCacheMisses is how far the misses of an encoding may pass its
	// hits before it stops using the cache.
	lcCacheMisses = 2 * lcCacheSlots
)

type lcCacheEntry struct {
	v   lcShort
	key uint32
}

// lcShort is a value of up to 16 bytes: its length and its bytes as two
// little-endian words, the first the bytes from its start (those past its
// length zero), the second, for 8 bytes or more, the last eight. Two
// values are equal when their lcShort are.
type lcShort struct {
	w0, w1 uint64
	n      int
}

// shortValue reads full[at:at+n] as an lcShort when n <= 16 and the eight
// bytes from at are within full (which may read past the value, within the
// buffer's capacity; the bytes past it are masked off).
func shortValue(full []byte, at, n int) (lcShort, bool) {
	if n > 16 || at+8 > len(full) {
		return lcShort{}, false
	}
	v := lcShort{w0: binary.LittleEndian.Uint64(full[at:]), n: n}
	if n >= 8 {
		v.w1 = binary.LittleEndian.Uint64(full[at+n-8:])
	} else {
		v.w0 &= 1<<(8*n) - 1
	}
	return v, true
}

// slot is where the cache keeps v. The cache only saves lookups: values
// that share a slot each miss, and the dictionary, whose hash is seeded,
// answers.
func (v lcShort) slot() int {
	h := (v.w0 ^ v.w1*0x9e3779b97f4a7c15 ^ uint64(v.n)) * 0xbf58476d1ce4e5b9
	return int(h >> (64 - lcCacheBits))
}

type lcSlot struct {
	hash uint64
	key  uint32 // the key plus one; 0 marks an empty slot
}

// lcMinSlots is the table's first size.
const lcMinSlots = 256

func newLowCardinalityString(col column) *lowCardinalityString {
	switch c := col.(type) {
	case *stringColumn:
		return &lowCardinalityString{typ: "LowCardinality(String)", src: c, seed: maphash.MakeSeed()}
	case *nullableColumn:
		return &lowCardinalityString{typ: "LowCardinality(Nullable(String))", src: c.inner.(*stringColumn),
			nulls: []byte{}, seed: maphash.MakeSeed()}
	}
	panic("lowCardinalityString of a non-string column")
}

// bind points the encoder at the column's current values (a Nullable
// column's null map may have been reallocated since).
func (c *lowCardinalityString) bind(col column) {
	if n, ok := col.(*nullableColumn); ok {
		c.nulls = n.nulls
	}
}

func (c *lowCardinalityString) Type() proto.ColumnType { return c.typ }
func (c *lowCardinalityString) Rows() int              { return c.src.Rows() }

// EncodeState writes the serialization version before the column.
func (c *lowCardinalityString) EncodeState(b *proto.Buffer) {
	b.PutInt64(lcSharedDictionariesWithAdditionalKeys)
}

func (c *lowCardinalityString) EncodeColumn(b *proto.Buffer) {
	rows := c.Rows()
	if rows == 0 {
		return
	}
	c.begin()
	c.appendKeys(c.src, c.nulls, 0, rows)
	c.writeGranule(b, rows)
}

// lcState is what keying carries from one row to the next.
type lcState struct {
	prev    lcShort
	prevKey uint32 // math.MaxUint32: no row before
	misses  int    // cache misses, less hits, so far
}

// begin starts an encoding: an empty dictionary, and for Nullable(String)
// its NULL.
func (c *lowCardinalityString) begin() {
	c.reset()
	if c.nulls != nil {
		// Without a global dictionary, key 0 of a Nullable dictionary is NULL.
		c.index.AppendBytes(nil)
	}
	c.state = lcState{prevKey: math.MaxUint32}
}

// appendKeys appends the keys of rows [from, to) of src (nulls its null
// map, nil for a String column), adding their values to the dictionary.
//
// A value of up to 16 bytes is read as two words and its length, which
// are the value: it is compared with the row before's, then looked up in
// a small cache of the part's recent values, with no call and no hashing;
// a longer value, or one the cache does not hold, goes to the dictionary
// (key). A value equal to the row before's takes its key at once: a
// record's rows often repeat one (its sensor, its source), and so do the
// rows of a sorted insert. A column whose values miss the cache far more
// than they hit it goes from the row before's straight to the dictionary
// for the rest of the encoding.
func (c *lowCardinalityString) appendKeys(src *stringColumn, nulls []byte, from, to int) {
	buf, ends := src.buf, src.ends[from:to]
	full := buf[:cap(buf)]
	st := c.state
	start := 0
	if from > 0 {
		start = int(src.ends[from-1])
	}
	for i, e := range ends {
		end := int(e)
		at := start
		start = end
		if nulls != nil && nulls[from+i] == 1 {
			c.keys = append(c.keys, 0)
			continue
		}
		// The value's length prefix: one byte below 128.
		if buf[at] < 0x80 {
			at++
		} else {
			_, k := binary.Uvarint(buf[at:end])
			at += k
		}
		v, ok := shortValue(full, at, end-at)
		if !ok {
			st.prevKey = math.MaxUint32
			c.keys = append(c.keys, c.key(buf[at:end]))
			continue
		}
		if v == st.prev && st.prevKey != math.MaxUint32 {
			c.keys = append(c.keys, st.prevKey)
			continue
		}
		if st.misses > lcCacheMisses {
			// The column's values do not repeat within the cache's reach:
			// the cache would only cost.
			st.prev, st.prevKey = v, c.key(buf[at:end])
			c.keys = append(c.keys, st.prevKey)
			continue
		}
		e := &c.cache[v.slot()]
		if e.v != v || e.key == 0 {
			e.v, e.key = v, c.key(buf[at:end])+1
			st.misses++
		} else if st.misses > 0 {
			st.misses--
		}
		st.prev, st.prevKey = v, e.key-1
		c.keys = append(c.keys, st.prevKey)
	}
	c.state = st
}

// writeGranule appends the granule of the rows keyed since begin: the
// dictionary as additional keys, then a key per row.
func (c *lowCardinalityString) writeGranule(b *proto.Buffer, rows int) {
	n := c.index.Rows()
	var width, keyType int
	switch {
	case n <= math.MaxUint8+1:
		width, keyType = 1, 0
	case n <= math.MaxUint16+1:
		width, keyType = 2, 1
	default:
		width, keyType = 4, 2
	}
	b.PutInt64(int64(lcHasAdditionalKeys | lcNeedUpdateDictionary | keyType))
	b.PutInt64(int64(n))
	c.index.EncodeColumn(b)
	b.PutInt64(int64(rows))
	at := len(b.Buf)
	b.Buf = slices.Grow(b.Buf, rows*width)[:at+rows*width]
	out := b.Buf[at:]
	switch width {
	case 1:
		for i, k := range c.keys {
			out[i] = byte(k)
		}
	case 2:
		for i, k := range c.keys {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(k))
		}
	default:
		for i, k := range c.keys {
			binary.LittleEndian.PutUint32(out[4*i:], k)
		}
	}
}

// lowCardinalityEncoder is a column's Native encoding as LowCardinality,
// kept with its block and bound to the column before each insert.
type lowCardinalityEncoder interface {
	proto.ColInput
	proto.StateEncoder
	bind(col column)
	// footprint is the bytes its dictionary and table hold, for an owner
	// that keeps it between blocks to drop it past a bound.
	footprint() int
}

// lowCardinalityFits reports whether col holds what newLowCardinality
// encodes: String, Nullable(String), or an Array of either. A column the
// table changed to LowCardinality from another type, which the sink does
// not convert (the server does), holds something else and goes as it is.
func lowCardinalityFits(col column) bool {
	if a, ok := col.(*arrayColumn); ok {
		col = a.inner
	}
	if n, ok := col.(*nullableColumn); ok {
		col = n.inner
	}
	_, ok := col.(*stringColumn)
	return ok
}

// newLowCardinality returns the encoder of a column of lowCardinalityKind
// 1 to 4 (see lowCardinalityFits).
func newLowCardinality(col column) lowCardinalityEncoder {
	if a, ok := col.(*arrayColumn); ok {
		return &lowCardinalityArray{src: a, elem: newLowCardinalityString(a.inner)}
	}
	return newLowCardinalityString(col)
}

// lowCardinalityArray encodes Array(String) or Array(Nullable(String)) as
// Array(LowCardinality(…)): the array's offsets, then its elements as one
// LowCardinality column, the serialization version first (the Native
// format writes a column's state prefix, its nested columns' included,
// before its data).
type lowCardinalityArray struct {
	src  *arrayColumn
	elem *lowCardinalityString
}

func (c *lowCardinalityString) footprint() int {
	return cap(c.index.Buf) + 16*cap(c.index.Pos) + 4*cap(c.keys) + int(unsafe.Sizeof(lcSlot{}))*cap(c.slots)
}

func (c *lowCardinalityArray) footprint() int { return c.elem.footprint() }

func (c *lowCardinalityArray) bind(col column) {
	c.src = col.(*arrayColumn)
	c.elem.src = elemStrings(c.src.inner)
	c.elem.bind(c.src.inner)
}

// elemStrings is the String column of a String or Nullable(String) column.
func elemStrings(col column) *stringColumn {
	if n, ok := col.(*nullableColumn); ok {
		return n.inner.(*stringColumn)
	}
	return col.(*stringColumn)
}

func (c *lowCardinalityArray) Type() proto.ColumnType {
	return proto.ColumnType("Array(" + string(c.elem.typ) + ")")
}
func (c *lowCardinalityArray) Rows() int                   { return c.src.Rows() }
func (c *lowCardinalityArray) EncodeState(b *proto.Buffer) { c.elem.EncodeState(b) }
func (c *lowCardinalityArray) EncodeColumn(b *proto.Buffer) {
	c.src.offsets.EncodeColumn(b)
	c.elem.EncodeColumn(b) // nothing when every array is empty, as ClickHouse writes it
}
func (c *lowCardinalityArray) WriteColumn(w *proto.Writer) {
	var b proto.Buffer
	c.EncodeColumn(&b)
	w.ChainWrite(b.Buf)
}

// reset empties the dictionary for the next encoding. A table that grew
// far past what the last encoding needed shrinks back, so that one block
// of many distinct values does not make every later one clear a large
// table.
func (c *lowCardinalityString) reset() {
	if len(c.slots) > lcMinSlots && c.used*8 < len(c.slots) {
		c.slots = make([]lcSlot, max(lcMinSlots, len(c.slots)/2))
	} else {
		clear(c.slots)
	}
	c.used = 0
	c.index.Reset()
	c.keys = c.keys[:0]
	clear(c.cache[:])
}

// key returns v's dictionary key, adding v to the dictionary if it is new.
// Values of the same hash take the slots after it, each compared by value,
// so a collision costs a comparison, never a wrong key.
func (c *lowCardinalityString) key(v []byte) uint32 {
	if len(c.slots) == 0 {
		c.slots = make([]lcSlot, lcMinSlots)
	}
	h := maphash.Bytes(c.seed, v)
	mask := uint64(len(c.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.key == 0 {
			k := uint32(c.index.Rows())
			c.index.AppendBytes(v)
			*s = lcSlot{hash: h, key: k + 1}
			if c.used++; c.used*2 > len(c.slots) {
				c.grow()
			}
			return k
		}
		if s.hash == h {
			if p := c.index.Pos[s.key-1]; bytes.Equal(c.index.Buf[p.Start:p.End], v) {
				return s.key - 1
			}
		}
	}
}

// grow doubles the table, keeping it at most half full.
func (c *lowCardinalityString) grow() {
	old := c.slots
	c.slots = make([]lcSlot, 2*len(old))
	mask := uint64(len(c.slots) - 1)
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := s.hash & mask
		for c.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		c.slots[i] = s
	}
}

func (c *lowCardinalityString) WriteColumn(w *proto.Writer) {
	var b proto.Buffer
	c.EncodeColumn(&b)
	w.ChainWrite(b.Buf)
}
