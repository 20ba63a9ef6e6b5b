package clickhouse

import (
	"encoding/binary"
	"slices"

	"github.com/ClickHouse/ch-go/proto"
)

// An insert whose parts are all at hand goes as one Native block rather
// than a block per part. The server squashes the blocks of an insert into
// one before it writes the part, copying every row once more and
// re-indexing every LowCardinality value into one dictionary; with blocks
// of a default chunk (about 12,000 sensor-batch rows) that cost 26.9
// about a fifth more CPU per row than one block of the same rows (ADR
// 0005). Joining costs sluice no copy: each of the Native format's
// streams of a column is written as the parts' in turn, array offsets
// made cumulative across them, and a LowCardinality column as one
// granule per part, each with its own dictionary, which the format
// allows (ClickHouse writes a new dictionary whenever one fills). The
// granules are encoded as each part joins a block (prepare), so that what
// the block puts into the arena is known before it takes the next part.

// preparedLC is one part's LowCardinality column with its granule
// encoded, into the arena: for an Array of them, the elements' granule,
// which follows the array's offsets.
type preparedLC struct {
	enc     lowCardinalityEncoder
	arr     *arrayColumn // the Array's offsets; nil for a plain column
	granule []byte
}

func (p *preparedLC) Type() proto.ColumnType      { return p.enc.Type() }
func (p *preparedLC) Rows() int                   { return p.enc.Rows() }
func (p *preparedLC) EncodeState(b *proto.Buffer) { p.enc.EncodeState(b) }
func (p *preparedLC) EncodeColumn(b *proto.Buffer) {
	if p.arr != nil {
		p.arr.offsets.EncodeColumn(b)
	}
	b.Buf = append(b.Buf, p.granule...)
}

func (p *preparedLC) WriteColumn(w *proto.Writer) {
	if p.arr != nil {
		p.arr.offsets.WriteColumn(w)
	}
	if len(p.granule) > 0 {
		w.ChainWrite(p.granule)
	}
}

// prepare returns col with its LowCardinality granule encoded into arena,
// or col when it is not a LowCardinality encoder.
func prepare(col proto.ColInput, arena *proto.Buffer) proto.ColInput {
	var arr *arrayColumn
	var enc *lowCardinalityString
	switch c := col.(type) {
	case *lowCardinalityString:
		enc = c
	case *lowCardinalityArray:
		arr, enc = c.src, c.elem
	default:
		return col
	}
	at := len(arena.Buf)
	enc.EncodeColumn(arena) // a column with no rows writes nothing
	return &preparedLC{enc: col.(lowCardinalityEncoder), arr: arr, granule: arena.Buf[at:len(arena.Buf):len(arena.Buf)]}
}

// offsetBytes is what joining col puts into the arena besides its
// granules: its array and map offsets, made cumulative.
func offsetBytes(col proto.ColInput) int {
	switch c := col.(type) {
	case *preparedLC:
		if c.arr != nil {
			return 8 * len(c.arr.offsets)
		}
	case *nullableColumn:
		return offsetBytes(c.inner)
	case *arrayColumn:
		return 8*len(c.offsets) + offsetBytes(c.inner)
	case *mapColumn:
		return 8*len(c.offsets) + offsetBytes(c.keys) + offsetBytes(c.values)
	case *tupleColumn:
		n := 0
		for _, e := range c.elems {
			n += offsetBytes(e)
		}
		return n
	}
	return 0
}

// joinedColumn is one column of several parts, written as one column.
type joinedColumn struct {
	parts []proto.ColInput
	rows  int
	arena *proto.Buffer
}

// joinedLowCardinality is a joinedColumn of prepared LowCardinality
// columns: the serialization version goes once, before the first granule.
type joinedLowCardinality struct{ joinedColumn }

func (j *joinedLowCardinality) EncodeState(b *proto.Buffer) {
	j.parts[0].(proto.StateEncoder).EncodeState(b)
}

func (j *joinedColumn) Type() proto.ColumnType { return j.parts[0].Type() }
func (j *joinedColumn) Rows() int              { return j.rows }

// EncodeColumn appends the joined column to b (a compressed block).
func (j *joinedColumn) EncodeColumn(b *proto.Buffer) { joinStreams(bufferSink{b}, j.parts) }

// WriteColumn chains the parts' buffers to w; the offsets it has to
// compute go into the arena, which is only appended to until the block is
// sent.
func (j *joinedColumn) WriteColumn(w *proto.Writer) {
	joinStreams(writerSink{w: w, arena: j.arena}, j.parts)
}

// streamSink takes a column's bytes in order.
type streamSink interface {
	// bytes takes b as it is; b is not changed until the block is sent.
	bytes(b []byte)
	// encode takes what fn appends to the buffer it is given.
	encode(fn func(*proto.Buffer))
}

type bufferSink struct{ b *proto.Buffer }

func (s bufferSink) bytes(b []byte)                { s.b.Buf = append(s.b.Buf, b...) }
func (s bufferSink) encode(fn func(*proto.Buffer)) { fn(s.b) }

type writerSink struct {
	w     *proto.Writer
	arena *proto.Buffer
}

func (s writerSink) bytes(b []byte) {
	if len(b) > 0 {
		s.w.ChainWrite(b)
	}
}

func (s writerSink) encode(fn func(*proto.Buffer)) {
	start := len(s.arena.Buf)
	fn(s.arena)
	// A later append may move the arena; these bytes stay where they are.
	s.bytes(s.arena.Buf[start:len(s.arena.Buf):len(s.arena.Buf)])
}

// joinStreams writes parts, the same column of several parts (each of the
// same type), as one column.
func joinStreams(s streamSink, parts []proto.ColInput) {
	if _, ok := parts[0].(*preparedLC); ok {
		if parts[0].(*preparedLC).arr != nil {
			offsets, elems := make([]proto.ColUInt64, len(parts)), make([]int, len(parts))
			for i, p := range parts {
				a := p.(*preparedLC).arr
				offsets[i], elems[i] = a.offsets, a.inner.Rows()
			}
			joinOffsets(s, offsets, elems)
		}
		for _, p := range parts {
			s.bytes(p.(*preparedLC).granule)
		}
		return
	}
	cols := make([]column, len(parts))
	for i, p := range parts {
		cols[i] = p.(column)
	}
	joinColumns(s, cols)
}

// joinColumns writes cols, of one type, as one column.
func joinColumns(s streamSink, cols []column) {
	switch cols[0].(type) {
	case *fixedColumn:
		for _, c := range cols {
			s.bytes(c.(*fixedColumn).buf)
		}
	case *stringColumn:
		for _, c := range cols {
			s.bytes(c.(*stringColumn).buf)
		}
	case *nullableColumn:
		inner := make([]column, len(cols))
		for i, c := range cols {
			n := c.(*nullableColumn)
			s.bytes(n.nulls)
			inner[i] = n.inner
		}
		joinColumns(s, inner)
	case *arrayColumn:
		offsets, elems, inner := make([]proto.ColUInt64, len(cols)), make([]int, len(cols)), make([]column, len(cols))
		for i, c := range cols {
			a := c.(*arrayColumn)
			offsets[i], elems[i], inner[i] = a.offsets, a.inner.Rows(), a.inner
		}
		joinOffsets(s, offsets, elems)
		joinColumns(s, inner)
	case *mapColumn:
		offsets, elems := make([]proto.ColUInt64, len(cols)), make([]int, len(cols))
		keys, values := make([]column, len(cols)), make([]column, len(cols))
		for i, c := range cols {
			m := c.(*mapColumn)
			offsets[i], elems[i], keys[i], values[i] = m.offsets, m.keys.Rows(), m.keys, m.values
		}
		joinOffsets(s, offsets, elems)
		joinColumns(s, keys)
		joinColumns(s, values)
	case *tupleColumn:
		elems := make([]column, len(cols))
		for e := range cols[0].(*tupleColumn).elems {
			for i, c := range cols {
				elems[i] = c.(*tupleColumn).elems[e]
			}
			joinColumns(s, elems)
		}
	default:
		panic("joinColumns: a column type it does not know")
	}
}

// joinOffsets writes the offsets of several parts' arrays (or maps) as one
// column's: each part's cumulative offsets plus the elements of the parts
// before it, elems[i] being part i's.
func joinOffsets(s streamSink, offsets []proto.ColUInt64, elems []int) {
	s.encode(func(b *proto.Buffer) {
		base := uint64(0)
		for i, offs := range offsets {
			at := len(b.Buf)
			b.Buf = slices.Grow(b.Buf, 8*len(offs))[:at+8*len(offs)]
			out := b.Buf[at:]
			for k, o := range offs {
				binary.LittleEndian.PutUint64(out[8*k:], o+base)
			}
			base += uint64(elems[i])
		}
	})
}

// joinable reports whether the parts' columns, as given, can be joined:
// each of the same structure, of a kind joinStreams knows.
func joinable(cols []proto.ColInput) bool {
	for _, c := range cols {
		if !sameKind(c, cols[0]) {
			return false
		}
	}
	return true
}

// sameKind reports whether a and b are columns of the same structure, of
// kinds joinStreams knows (so sameKind(a, a) says whether it knows a's).
func sameKind(a, b proto.ColInput) bool {
	switch a := a.(type) {
	case *preparedLC:
		n, ok := b.(*preparedLC)
		return ok && (a.arr == nil) == (n.arr == nil)
	case *fixedColumn:
		f, ok := b.(*fixedColumn)
		return ok && f.width == a.width
	case *stringColumn:
		_, ok := b.(*stringColumn)
		return ok
	case *nullableColumn:
		n, ok := b.(*nullableColumn)
		return ok && sameKind(a.inner, n.inner)
	case *arrayColumn:
		n, ok := b.(*arrayColumn)
		return ok && sameKind(a.inner, n.inner)
	case *mapColumn:
		n, ok := b.(*mapColumn)
		return ok && sameKind(a.keys, n.keys) && sameKind(a.values, n.values)
	case *tupleColumn:
		n, ok := b.(*tupleColumn)
		if !ok || len(n.elems) != len(a.elems) {
			return false
		}
		for i := range a.elems {
			if !sameKind(a.elems[i], n.elems[i]) {
				return false
			}
		}
		return true
	}
	return false
}
