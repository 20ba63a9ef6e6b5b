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
// allows (ClickHouse writes a new dictionary whenever one fills).

// joinedColumn is one column of several parts, written as one column.
type joinedColumn struct {
	parts []proto.ColInput
	rows  int
	arena *proto.Buffer
}

// joinedLowCardinality is a joinedColumn of LowCardinality encoders: the
// serialization version goes once, before the first granule.
type joinedLowCardinality struct{ joinedColumn }

func (j *joinedLowCardinality) EncodeState(b *proto.Buffer) {
	j.parts[0].(proto.StateEncoder).EncodeState(b)
}

func (j *joinedColumn) Type() proto.ColumnType { return j.parts[0].Type() }
func (j *joinedColumn) Rows() int              { return j.rows }

// EncodeColumn appends the joined column to b (a compressed block).
func (j *joinedColumn) EncodeColumn(b *proto.Buffer) { joinStreams(bufferSink{b}, j.parts) }

// WriteColumn chains the parts' buffers to w; what has to be computed
// (offsets, LowCardinality granules) is encoded into the arena, which is
// only appended to until the insert is sent.
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
	switch parts[0].(type) {
	case *lowCardinalityString:
		for _, p := range parts {
			s.encode(p.EncodeColumn) // a part with no rows writes nothing
		}
		return
	case *lowCardinalityArray:
		offsets, elems := make([]proto.ColUInt64, len(parts)), make([]int, len(parts))
		for i, p := range parts {
			a := p.(*lowCardinalityArray).src
			offsets[i], elems[i] = a.offsets, a.inner.Rows()
		}
		joinOffsets(s, offsets, elems)
		for _, p := range parts {
			s.encode(p.(*lowCardinalityArray).elem.EncodeColumn)
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

// joinable reports whether the parts' i-th columns, as given, can be
// joined: the same Go type each, of a kind joinStreams knows.
func joinable(cols []proto.ColInput) bool {
	for _, c := range cols[1:] {
		if !sameKind(c, cols[0]) {
			return false
		}
	}
	return knownKind(cols[0])
}

func knownKind(c proto.ColInput) bool {
	switch c := c.(type) {
	case *lowCardinalityString, *lowCardinalityArray, *fixedColumn, *stringColumn:
		return true
	case *nullableColumn:
		return knownKind(c.inner)
	case *arrayColumn:
		return knownKind(c.inner)
	case *mapColumn:
		return knownKind(c.keys) && knownKind(c.values)
	case *tupleColumn:
		for _, e := range c.elems {
			if !knownKind(e) {
				return false
			}
		}
		return true
	}
	return false
}

// sameKind reports whether a and b are columns of the same structure.
func sameKind(a, b proto.ColInput) bool {
	switch a := a.(type) {
	case *lowCardinalityString:
		_, ok := b.(*lowCardinalityString)
		return ok
	case *lowCardinalityArray:
		_, ok := b.(*lowCardinalityArray)
		return ok
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
