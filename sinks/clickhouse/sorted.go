package clickhouse

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// A sorted insert leaves its parts as they are and writes their rows in
// key order as it encodes them: each column of the block is gathered from
// the parts run by run (sortRun) into one buffer of the worker's, which
// goes to the server before the next column is gathered (over a plain
// connection; a compressed one encodes its block in memory anyway). So a
// sorted insert costs one column's bytes of memory beside its parts, not
// a second copy of its rows, and every attempt encodes the same order.
// On a compressed connection the rows go as blocks of at most
// maxCompressedBlock bytes, counted by their rows (a larger row alone),
// consecutive slices of the order: the server joins an insert's blocks in
// the order they came before it writes a part, so the part is sorted all
// the same.

// maxKeptSortRows bounds the rows a worker's sort buffers are kept for
// between inserts (about 20 bytes a row; an insert ends at 1,000,000 rows
// by default); a var for the tests.
var maxKeptSortRows = 1 << 21

// maxKeptDictBytes bounds each dictionary (the sort's and the
// LowCardinality encoders') a worker keeps between inserts; a var for the
// tests.
var maxKeptDictBytes = maxArena

// sortedEncoder is a worker's state for sorted inserts, kept between them.
type sortedEncoder struct {
	sorter rowSorter
	runs   []sortRun
	buf    []byte // a plain connection's column, until it is written
	// lc are the LowCardinality encoders, per column type.
	lc  map[proto.ColumnType]lowCardinalityEncoder
	err error // of writing a column to the connection

	// The insert being sent: its parts, the plan and the rows left.
	plan   *insertPlan
	parts  []*subBlock
	types  []*chtype.Type
	lcCols bool
	// blockBytes bounds a block's bytes (0: one block); a block takes at
	// least one row.
	blockBytes int
	left       []sortRun
}

// start prepares ins's rows in key order for blocks of next; false when
// they are in that order already (the insert goes as its parts are).
// compressed bounds each block's bytes; lc encodes LowCardinality columns
// as such.
func (e *sortedEncoder) start(plan *insertPlan, ins *openInsert, compressed, lc bool) bool {
	ins.sorted = false // until this attempt is
	e.parts = e.parts[:0]
	bytes, rows := 0, 0
	for _, p := range ins.parts {
		e.parts = append(e.parts, p.sub)
		bytes, rows = bytes+p.sub.size(), rows+p.sub.rows
	}
	// The bound holds for the insert as collected, which may have taken
	// more than sortable saw.
	ok := bytes <= maxSortBytes && rows < math.MaxUint32
	for _, c := range e.parts[0].cols {
		ok = ok && gatherable(c)
	}
	var order []uint32
	if ok {
		order = e.sorter.sort(ins.t.sortKey, e.parts)
	}
	if order == nil {
		e.release()
		return false
	}
	e.runs = e.sorter.runs(order, e.runs)
	e.plan, e.types, e.lcCols, e.left, e.err = plan, ins.t.types, lc, e.runs, nil
	e.blockBytes = 0
	if compressed && bytes > maxCompressedBlock {
		e.blockBytes = maxCompressedBlock
	}
	ins.sorted = true
	return true
}

// next is the next block's input, nil once every row has gone.
func (e *sortedEncoder) next() proto.Input {
	if len(e.left) == 0 {
		return nil
	}
	// The block's runs: as many as blockBytes holds, by the bytes of their
	// rows (rows of one key can be far larger than the insert's average),
	// the last one cut where the bound falls; a row larger than the bound
	// goes alone.
	rows, bytes, k, cut := 0, 0, 0, 0
	for ; k < len(e.left); k++ {
		r := e.left[k]
		if e.blockBytes == 0 {
			rows += r.n
			continue
		}
		n, b := e.rowsWithin(r, e.blockBytes-bytes)
		if rows == 0 && n == 0 {
			n = 1
		}
		if n < r.n {
			cut = n
			break
		}
		rows, bytes = rows+n, bytes+b
	}
	runs := e.left[:k:k]
	if cut > 0 {
		r := e.left[k]
		runs = append(runs, sortRun{p: r.p, from: r.from, n: cut})
		e.left[k] = sortRun{p: r.p, from: r.from + cut, n: r.n - cut}
		rows += cut
	}
	e.left = e.left[k:]
	in := make(proto.Input, len(e.plan.cols))
	for i := range in {
		srcs := make([]column, len(e.parts))
		for j, p := range e.parts {
			srcs[j] = p.cols[i]
		}
		c := sortedColumn{e: e, srcs: srcs, runs: runs, rows: rows, typ: srcs[0].Type()}
		var data proto.ColInput = &c
		if e.lcCols && e.plan.lcKind[i] != 0 && lowCardinalityFits(srcs[0]) {
			c.lc = e.lcEncoder(i)
			c.typ = c.lc.Type()
			data = &sortedLowCardinality{c}
		}
		in[i] = proto.InputColumn{Name: e.plan.target.columns[i], Data: data}
	}
	return in
}

// runBytes is the bytes of rows [from, from+n) of part p, its columns'
// size as size counts it.
func (e *sortedEncoder) runBytes(p, from, n int) int {
	b := 0
	for _, c := range e.parts[p].cols {
		b += rangeSize(c, from, n)
	}
	return b
}

// rowsWithin is how many of run r's first rows fit in limit bytes, all of
// them with their bytes, or fewer.
func (e *sortedEncoder) rowsWithin(r sortRun, limit int) (n, bytes int) {
	if b := e.runBytes(r.p, r.from, r.n); b <= limit {
		return r.n, b
	}
	// The most rows that fit: the bytes grow with the rows.
	return sort.Search(r.n, func(n int) bool { return e.runBytes(r.p, r.from, n+1) > limit }), 0
}

// lcEncoder is the LowCardinality encoder for block column i's type.
func (e *sortedEncoder) lcEncoder(i int) lowCardinalityEncoder {
	typ := e.parts[0].cols[i].Type()
	if enc := e.lc[typ]; enc != nil {
		return enc
	}
	if e.lc == nil {
		e.lc = map[proto.ColumnType]lowCardinalityEncoder{}
	}
	// Bound to an empty column of its own: it keys the parts' values run
	// by run (encodeSortedLowCardinality), and keeps no part.
	enc := newLowCardinality(columnOf(e.types[i]))
	e.lc[typ] = enc
	return enc
}

// finish ends the insert, keeping no reference to its parts, and returns
// the error of writing a column, if any.
func (e *sortedEncoder) finish() error {
	e.release()
	err := e.err
	e.err = nil
	return err
}

// release drops the references to the insert's parts, and the buffers an
// insert far larger than the defaults make left behind.
func (e *sortedEncoder) release() {
	clear(e.parts)
	e.parts, e.left, e.plan, e.types = e.parts[:0], nil, nil, nil
	e.sorter.parts = nil
	clear(e.sorter.views)
	if cap(e.buf) > maxArena {
		e.buf = nil
	}
	if cap(e.sorter.perm) > maxKeptSortRows {
		e.sorter = rowSorter{}
	}
	if d := e.sorter.dict; d != nil && d.footprint() > maxKeptDictBytes {
		e.sorter.dict = nil
	}
	// Runs and LowCardinality dictionaries as large as the largest insert
	// are not kept for the next.
	if cap(e.runs) > maxKeptSortRows {
		e.runs = nil
	}
	for typ, enc := range e.lc {
		if enc.footprint() > maxKeptDictBytes {
			delete(e.lc, typ)
		}
	}
}

// sortedColumn is a column of an insert's parts, its rows in key order.
type sortedColumn struct {
	e    *sortedEncoder
	srcs []column // the column in each part
	runs []sortRun
	rows int
	typ  proto.ColumnType
	lc   lowCardinalityEncoder // a LowCardinality column's
}

func (c *sortedColumn) Type() proto.ColumnType { return c.typ }
func (c *sortedColumn) Rows() int              { return c.rows }

func (c *sortedColumn) EncodeColumn(b *proto.Buffer) {
	if c.lc == nil {
		b.Buf = appendSorted(b.Buf, c.srcs, c.runs)
		return
	}
	switch enc := c.lc.(type) {
	case *lowCardinalityString:
		encodeSortedLowCardinality(b, enc, c.srcs, c.runs, c.rows)
	case *lowCardinalityArray:
		offsets := make([]proto.ColUInt64, len(c.srcs))
		inner := make([]column, len(c.srcs))
		for i, s := range c.srcs {
			a := s.(*arrayColumn)
			offsets[i], inner[i] = a.offsets, a.inner
		}
		var elems []sortRun
		b.Buf, elems = appendSortedOffsets(b.Buf, offsets, c.runs)
		n := 0
		for _, r := range elems {
			n += r.n
		}
		if n > 0 { // nothing when every array is empty, as ClickHouse writes it
			encodeSortedLowCardinality(b, enc.elem, inner, elems, n)
		}
	}
}

// encodeSortedLowCardinality appends one granule of the runs' rows of
// srcs (String or Nullable(String) columns), rows in all, keyed by enc.
func encodeSortedLowCardinality(b *proto.Buffer, enc *lowCardinalityString, srcs []column, runs []sortRun, rows int) {
	enc.begin()
	for _, r := range runs {
		switch s := srcs[r.p].(type) {
		case *stringColumn:
			enc.appendKeys(s, nil, r.from, r.from+r.n)
		case *nullableColumn:
			enc.appendKeys(s.inner.(*stringColumn), s.nulls, r.from, r.from+r.n)
		}
	}
	enc.writeGranule(b, rows)
}

// WriteColumn writes the column to the connection at once, so that its
// buffer serves the next column.
func (c *sortedColumn) WriteColumn(w *proto.Writer) {
	b := proto.Buffer{Buf: c.e.buf[:0]}
	c.EncodeColumn(&b)
	c.e.buf = b.Buf
	w.ChainWrite(b.Buf)
	if _, err := w.Flush(); err != nil && c.e.err == nil {
		c.e.err = err
	}
}

// sortedLowCardinality is a sortedColumn of a LowCardinality type, which
// has a serialization state.
type sortedLowCardinality struct{ sortedColumn }

func (c *sortedLowCardinality) EncodeState(b *proto.Buffer) { c.lc.EncodeState(b) }

// rangeSize is the size of rows [from, from+n) of c, as size counts a
// whole column, for the kinds gatherable takes.
func rangeSize(c column, from, n int) int {
	if n == 0 {
		return 0
	}
	switch c := c.(type) {
	case *fixedColumn:
		return c.width * n
	case *stringColumn:
		lo := uint32(0)
		if from > 0 {
			lo = c.ends[from-1]
		}
		return int(c.ends[from+n-1] - lo)
	case *nullableColumn:
		return n + rangeSize(c.inner, from, n)
	case *arrayColumn:
		lo, hi := elemRange(c.offsets, from, n)
		return 8*n + rangeSize(c.inner, int(lo), int(hi-lo))
	case *mapColumn:
		lo, hi := elemRange(c.offsets, from, n)
		return 8*n + rangeSize(c.keys, int(lo), int(hi-lo)) + rangeSize(c.values, int(lo), int(hi-lo))
	case *tupleColumn:
		b := 0
		for _, el := range c.elems {
			b += rangeSize(el, from, n)
		}
		return b
	}
	panic(fmt.Sprintf("clickhouse: rangeSize of a %T", c))
}

// gatherable says whether appendSorted writes columns of c's kind.
func gatherable(c column) bool {
	switch c := c.(type) {
	case *fixedColumn, *stringColumn:
		return true
	case *nullableColumn:
		return gatherable(c.inner)
	case *arrayColumn:
		return gatherable(c.inner)
	case *mapColumn:
		return gatherable(c.keys) && gatherable(c.values)
	case *tupleColumn:
		for _, e := range c.elems {
			if !gatherable(e) {
				return false
			}
		}
		return true
	}
	return false
}

// appendSorted appends the Native bytes of the runs' rows of srcs (one
// column per part, all of one type) to b.
func appendSorted(b []byte, srcs []column, runs []sortRun) []byte {
	switch srcs[0].(type) {
	case *fixedColumn:
		for _, r := range runs {
			s := srcs[r.p].(*fixedColumn)
			b = append(b, s.buf[r.from*s.width:(r.from+r.n)*s.width]...)
		}
	case *stringColumn:
		for _, r := range runs {
			s := srcs[r.p].(*stringColumn)
			start := uint32(0)
			if r.from > 0 {
				start = s.ends[r.from-1]
			}
			b = append(b, s.buf[start:s.ends[r.from+r.n-1]]...)
		}
	case *nullableColumn:
		inner := make([]column, len(srcs))
		for i, s := range srcs {
			inner[i] = s.(*nullableColumn).inner
		}
		for _, r := range runs {
			b = append(b, srcs[r.p].(*nullableColumn).nulls[r.from:r.from+r.n]...)
		}
		b = appendSorted(b, inner, runs)
	case *arrayColumn:
		offsets := make([]proto.ColUInt64, len(srcs))
		inner := make([]column, len(srcs))
		for i, s := range srcs {
			a := s.(*arrayColumn)
			offsets[i], inner[i] = a.offsets, a.inner
		}
		var elems []sortRun
		b, elems = appendSortedOffsets(b, offsets, runs)
		b = appendSorted(b, inner, elems)
	case *mapColumn:
		offsets := make([]proto.ColUInt64, len(srcs))
		keys, values := make([]column, len(srcs)), make([]column, len(srcs))
		for i, s := range srcs {
			m := s.(*mapColumn)
			offsets[i], keys[i], values[i] = m.offsets, m.keys, m.values
		}
		var elems []sortRun
		b, elems = appendSortedOffsets(b, offsets, runs)
		b = appendSorted(b, keys, elems)
		b = appendSorted(b, values, elems)
	case *tupleColumn:
		n := len(srcs[0].(*tupleColumn).elems)
		for k := range n {
			elem := make([]column, len(srcs))
			for i, s := range srcs {
				elem[i] = s.(*tupleColumn).elems[k]
			}
			b = appendSorted(b, elem, runs)
		}
	}
	return b
}

// appendSortedOffsets appends the cumulative offsets of the runs' rows of
// an Array or Map column (offsets per part) to b, and returns the runs of
// their elements.
func appendSortedOffsets(b []byte, offsets []proto.ColUInt64, runs []sortRun) ([]byte, []sortRun) {
	var elems []sortRun
	total := uint64(0)
	for _, r := range runs {
		off := offsets[r.p]
		lo, hi := elemRange(off, r.from, r.n)
		for _, o := range off[r.from : r.from+r.n] {
			b = binary.LittleEndian.AppendUint64(b, o-lo+total)
		}
		total += hi - lo
		if hi > lo {
			elems = append(elems, sortRun{p: r.p, from: int(lo), n: int(hi - lo)})
		}
	}
	return b, elems
}
