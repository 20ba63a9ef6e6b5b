package clickhouse

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/internal/chtype"
)

// A MergeTree table sorts each part it writes by its sorting key, unless
// the block is sorted already: the server checks that first
// (MergeTreeDataWriterBlocksAlreadySorted) and then neither sorts nor
// copies the block's columns into the sorted order. On the sensor-batch
// workload that sort is about a third of the server's CPU for an insert,
// on 18.16 and on 26.9 alike (ADR 0005). So sluice sends an insert's rows
// in the order of the table's sorting key when it knows that order: when
// every element of the key is one of the inserted columns, of a type
// whose order is that of its bytes or of its integer value. Rows equal in
// the key keep the order they came in (the sort is stable), as the
// server's own sort keeps them, which a ReplacingMergeTree or a
// CollapsingMergeTree depends on. A key this cannot order (an expression,
// a float, a Nullable column) leaves the rows as they came.

// keyOrder is how a sorting key column's values compare.
type keyOrder uint8

const (
	orderUnsigned keyOrder = iota // a little-endian unsigned integer of the column's width
	orderSigned                   // a little-endian two's complement integer
	orderString                   // a String's bytes
	orderBytes                    // a FixedString's bytes
)

// sortKey is a table's sorting key as block columns sluice can order by.
type sortKey struct {
	cols   []int // the block column of each element
	orders []keyOrder
	widths []int // of orderUnsigned, orderSigned and orderBytes
}

// parseSortKey returns the sorting key expr (system.tables.sorting_key, e.g.
// "sensor, batch_ts") of the table with columns t as block columns, or nil
// and why not.
func parseSortKey(expr string, t *Table) (*sortKey, string) {
	elems, ok := splitKey(expr)
	if !ok || len(elems) == 0 {
		return nil, fmt.Sprintf("sorting key %q is not a list of columns", expr)
	}
	k := &sortKey{}
	for _, e := range elems {
		i := slices.IndexFunc(t.Insert, func(c Column) bool { return c.Name == e })
		if i < 0 {
			return nil, fmt.Sprintf("sorting key element %s is not an inserted column", e)
		}
		order, width, ok := orderOf(t.types[i])
		if !ok {
			return nil, fmt.Sprintf("sorting key column %s is %s, whose order sluice does not reproduce", e, t.Insert[i].Type)
		}
		k.cols, k.orders, k.widths = append(k.cols, i), append(k.orders, order), append(k.widths, width)
	}
	return k, ""
}

// splitKey splits a sorting key into column names: plain identifiers or
// backquoted names, separated by commas; false for anything else (a
// function call, an expression, a literal).
func splitKey(expr string) ([]string, bool) {
	var names []string
	s := strings.TrimSpace(expr)
	for s != "" {
		var name string
		if s[0] == '`' {
			var b strings.Builder
			i := 1
			for ; i < len(s) && s[i] != '`'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
			}
			if i == len(s) {
				return nil, false
			}
			name, s = b.String(), s[i+1:]
		} else {
			i := 0
			for i < len(s) && (s[i] == '_' || s[i] == '.' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || i > 0 && s[i] >= '0' && s[i] <= '9') {
				i++
			}
			if i == 0 {
				return nil, false
			}
			name, s = s[:i], s[i:]
		}
		names = append(names, name)
		s = strings.TrimSpace(s)
		if s == "" {
			break
		}
		if s[0] != ',' {
			return nil, false
		}
		s = strings.TrimSpace(s[1:])
		if s == "" {
			return nil, false
		}
	}
	return names, true
}

// orderOf is how the server orders values of t, when sluice can order
// them the same way: integers (and what is stored as one: dates, times,
// enums, Decimal32 and Decimal64 of one scale, IPv4) by value, String and
// FixedString by their bytes. Floats are left out (the server orders NaN
// and -0 its own way), as are Nullable columns and wider integers.
func orderOf(t *chtype.Type) (keyOrder, int, bool) {
	switch t.Kind {
	case chtype.UInt8, chtype.UInt16, chtype.UInt32, chtype.UInt64, chtype.Bool,
		chtype.Date, chtype.DateTime, chtype.IPv4:
		return orderUnsigned, t.Width(), true
	case chtype.Int8, chtype.Int16, chtype.Int32, chtype.Int64, chtype.Enum8, chtype.Enum16,
		chtype.Date32, chtype.DateTime64, chtype.Decimal32, chtype.Decimal64:
		return orderSigned, t.Width(), true
	case chtype.String:
		if t.JSON {
			return 0, 0, false
		}
		return orderString, 0, true
	case chtype.FixedString:
		return orderBytes, t.Size, true
	}
	return 0, 0, false
}

// word is an integer key value as a word that orders as the value does.
func word(b []byte, width int, signed bool) uint64 {
	var v uint64
	switch width {
	case 1:
		v = uint64(b[0])
		if signed {
			v = uint64(int64(int8(b[0])))
		}
	case 2:
		v = uint64(binary.LittleEndian.Uint16(b))
		if signed {
			v = uint64(int64(int16(v)))
		}
	case 4:
		v = uint64(binary.LittleEndian.Uint32(b))
		if signed {
			v = uint64(int64(int32(v)))
		}
	default:
		v = binary.LittleEndian.Uint64(b)
	}
	if signed {
		v ^= 1 << 63
	}
	return v
}

// rowSorter orders the rows of several parts of one table by its sorting
// key. Its buffers are kept for the next insert.
type rowSorter struct {
	key   *sortKey
	parts []*subBlock
	// A row is named by its place in the parts taken in turn: part[g] is
	// the part of row g, first[p] part p's first row.
	part  []uint32
	first []uint32
	// words is each row's first key value as an ordered word (for a
	// String or FixedString, its rank among the parts' distinct values).
	words     []uint64
	perm, tmp []uint32
	counts    []uint32
	views     []keyView // per part, per key element
	// dict numbers a String or FixedString first key's distinct values;
	// rank holds their order and each one's rank.
	dict *lowCardinalityString
	rank []uint32
}

// keyView is a key element's column in one part, as compareAt reads it.
type keyView struct {
	buf   []byte        // a fixed-width column's values
	str   *stringColumn // a String column
	width int
	order keyOrder
}

// compare orders rows a and b by key elements from j on.
func (s *rowSorter) compare(a, b uint32, j int) int {
	pa, pb := s.part[a], s.part[b]
	return s.compareAt(pa, int(a-s.first[pa]), pb, int(b-s.first[pb]), j)
}

// compareAt orders row ra of part pa and row rb of part pb by key
// elements from j on.
func (s *rowSorter) compareAt(pa uint32, ra int, pb uint32, rb int, j int) int {
	n := len(s.key.cols)
	va, vb := s.views[int(pa)*n:int(pa+1)*n], s.views[int(pb)*n:int(pb+1)*n]
	for ; j < n; j++ {
		x, y := &va[j], &vb[j]
		switch x.order {
		case orderUnsigned:
			var a, b uint64
			switch x.width {
			case 8:
				a, b = binary.LittleEndian.Uint64(x.buf[ra*8:]), binary.LittleEndian.Uint64(y.buf[rb*8:])
			case 4:
				a, b = uint64(binary.LittleEndian.Uint32(x.buf[ra*4:])), uint64(binary.LittleEndian.Uint32(y.buf[rb*4:]))
			case 2:
				a, b = uint64(binary.LittleEndian.Uint16(x.buf[ra*2:])), uint64(binary.LittleEndian.Uint16(y.buf[rb*2:]))
			default:
				a, b = uint64(x.buf[ra]), uint64(y.buf[rb])
			}
			if a != b {
				return cmp.Compare(a, b)
			}
		case orderSigned:
			var a, b int64
			switch x.width {
			case 8:
				a, b = int64(binary.LittleEndian.Uint64(x.buf[ra*8:])), int64(binary.LittleEndian.Uint64(y.buf[rb*8:]))
			case 4:
				a, b = int64(int32(binary.LittleEndian.Uint32(x.buf[ra*4:]))), int64(int32(binary.LittleEndian.Uint32(y.buf[rb*4:])))
			case 2:
				a, b = int64(int16(binary.LittleEndian.Uint16(x.buf[ra*2:]))), int64(int16(binary.LittleEndian.Uint16(y.buf[rb*2:])))
			default:
				a, b = int64(int8(x.buf[ra])), int64(int8(y.buf[rb]))
			}
			if a != b {
				return cmp.Compare(a, b)
			}
		case orderString:
			if r := bytes.Compare(x.str.value(ra), y.str.value(rb)); r != 0 {
				return r
			}
		default:
			w := x.width
			if r := bytes.Compare(x.buf[ra*w:(ra+1)*w], y.buf[rb*w:(rb+1)*w]); r != 0 {
				return r
			}
		}
	}
	return 0
}

// sort returns the parts' rows in key order, each as its place in the
// parts taken in turn, rows of equal keys in their order; nil when the
// rows are in that order already. The result is valid until the next
// call.
func (s *rowSorter) sort(key *sortKey, parts []*subBlock) []uint32 {
	s.key, s.parts = key, parts
	n := 0
	s.first = s.first[:0]
	for _, p := range parts {
		s.first = append(s.first, uint32(n))
		n += p.rows
	}
	s.part = slices.Grow(s.part[:0], n)
	s.views = s.views[:0]
	for i, p := range parts {
		for range p.rows {
			s.part = append(s.part, uint32(i))
		}
		for j, c := range key.cols {
			v := keyView{width: key.widths[j], order: key.orders[j]}
			str, isStr := p.cols[c].(*stringColumn)
			fixed, isFixed := p.cols[c].(*fixedColumn)
			switch {
			case v.order == orderString && isStr:
				v.str = str
			case v.order != orderString && isFixed:
				v.buf = fixed.buf
			default:
				// Not a column orderOf admits: the rows go as they are.
				return nil
			}
			s.views = append(s.views, v)
		}
	}
	sorted := true
	for g := 1; g < n; g++ {
		if s.compare(uint32(g-1), uint32(g), 0) > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return nil
	}
	s.firstWords(n)
	s.radix(n)
	// Rows of one first value are in their order; sort each such run by
	// the rest of the key where it is not in order already.
	if len(s.key.cols) > 1 {
		rest := func(a, b uint32) int { return s.compare(a, b, 1) }
		for i := 0; i < n; {
			j := i + 1
			ordered := true
			w := s.words[s.perm[i]]
			prev := s.perm[i]
			for ; j < n && s.words[s.perm[j]] == w; j++ {
				if ordered {
					ordered = s.compare(prev, s.perm[j], 1) <= 0
					prev = s.perm[j]
				}
			}
			if !ordered {
				// The run's rows are in their order, so ties broken by
				// that order keep the sort stable, in O(n log n) whatever
				// the rows.
				slices.SortFunc(s.perm[i:j], func(a, b uint32) int { return cmp.Or(rest(a, b), cmp.Compare(a, b)) })
			}
			i = j
		}
	}
	return s.perm
}

// firstWords sets words to each row's first key value as an ordered word.
func (s *rowSorter) firstWords(n int) {
	s.words = slices.Grow(s.words[:0], n)[:n]
	c, o, w := s.key.cols[0], s.key.orders[0], s.key.widths[0]
	if o == orderUnsigned || o == orderSigned {
		g := 0
		for _, p := range s.parts {
			buf := p.cols[c].(*fixedColumn).buf
			for r := range p.rows {
				s.words[g] = word(buf[r*w:], w, o == orderSigned)
				g++
			}
		}
		return
	}
	// Bytes: number the distinct values in the order met, then rank
	// them. A value equal to the row before's takes its number at once:
	// a record's rows often share one. The numbering is the dictionary of
	// a LowCardinality encoder, which keeps a copy of each distinct value.
	if s.dict == nil {
		s.dict = newLowCardinalityString(&stringColumn{})
	}
	dict := s.dict
	dict.reset()
	var prev []byte
	var prevID uint32
	g := 0
	for _, p := range s.parts {
		for r := range p.rows {
			var v []byte
			if o == orderString {
				v = p.cols[c].(*stringColumn).value(r)
			} else {
				v = p.cols[c].(*fixedColumn).buf[r*w : (r+1)*w]
			}
			if g == 0 || !bytes.Equal(v, prev) {
				prev, prevID = v, dict.key(v)
			}
			s.words[g] = uint64(prevID)
			g++
		}
	}
	distinct := dict.index.Rows()
	value := func(k uint32) []byte { p := dict.index.Pos[k]; return dict.index.Buf[p.Start:p.End] }
	s.rank = slices.Grow(s.rank[:0], 2*distinct)[:2*distinct]
	order, rank := s.rank[:distinct], s.rank[distinct:]
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return bytes.Compare(value(a), value(b)) })
	for r, id := range order {
		rank[id] = uint32(r)
	}
	for g := range s.words {
		s.words[g] = uint64(rank[s.words[g]])
	}
}

// radixBits is the width of one digit of the radix sort.
const radixBits = 11

// radix sets perm to the rows in the order of their words, stably: a
// least-significant-digit radix sort that skips the digits no two words
// differ in.
func (s *rowSorter) radix(n int) {
	s.perm = slices.Grow(s.perm[:0], n)[:n]
	s.tmp = slices.Grow(s.tmp[:0], n)[:n]
	for g := range s.perm {
		s.perm[g] = uint32(g)
	}
	var diff uint64
	for _, w := range s.words {
		diff |= w ^ s.words[0]
	}
	if s.counts == nil {
		s.counts = make([]uint32, 1<<radixBits)
	}
	for shift := 0; shift < 64; shift += radixBits {
		if (diff>>shift)&(1<<radixBits-1) == 0 {
			continue
		}
		clear(s.counts)
		for _, g := range s.perm {
			s.counts[(s.words[g]>>shift)&(1<<radixBits-1)]++
		}
		sum := uint32(0)
		for i, c := range s.counts {
			s.counts[i] = sum
			sum += c
		}
		for _, g := range s.perm {
			d := (s.words[g] >> shift) & (1<<radixBits - 1)
			s.tmp[s.counts[d]] = g
			s.counts[d]++
		}
		s.perm, s.tmp = s.tmp, s.perm
	}
}

// sortRun is rows [from, from+n) of part p.
type sortRun struct{ p, from, n int }

// runs cuts order (places in the parts taken in turn) into runs of rows
// that follow each other in one part.
func (s *rowSorter) runs(order []uint32, dst []sortRun) []sortRun {
	dst = dst[:0]
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && order[j] == order[j-1]+1 && s.part[order[j]] == s.part[order[i]] {
			j++
		}
		p := int(s.part[order[i]])
		dst = append(dst, sortRun{p: p, from: int(order[i] - s.first[p]), n: j - i})
		i = j
	}
	return dst
}

// maxSortBytes bounds the inserts sluice sorts (rows are numbered with
// 32 bits); a var for the tests.
var maxSortBytes = 1 << 30

// sortable says whether ins goes in its table's key order.
func (w *worker) sortable(ins *openInsert) bool {
	return w.s.cfg.SortRows == "key" && w.s.cfg.Transport == TransportNative && ins.t.sortKey != nil && len(ins.t.shards) == 1 &&
		ins.bytes <= maxSortBytes && ins.rows > 1
}
