package clickhouse

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// insertPlan is how the parts of one table version go into an INSERT: which
// of the block's columns, under which names, converted how. A table's own
// plan sends every column as encoded. When the table's schema changes while
// blocks of the old version are still queued or parked (an ALTER … ADD,
// DROP or MODIFY COLUMN), adaptPlan makes the plan that inserts them into
// the table as it is then: a column the table dropped is left out, one it
// added is left to its default, and one whose type was widened is
// converted, because 18.16 does not convert a block's types on insert.
type insertPlan struct {
	target *target
	// cols is the block column of each inserted column; conv, when
	// non-nil, converts it to the table's type.
	cols []int
	conv []func(column) column
	// lcKind is, per inserted column, how the HTTP transport's Native body
	// encodes it (see lowCardinalityKind).
	lcKind []int
	// err says why the blocks cannot be inserted into the table as it was
	// last described; such a plan sends nothing and is made again before
	// each attempt.
	err error
	// converted: a server that does not convert columns (a revision from
	// 54405 to 54419) wanted one of this plan's as another type than
	// sluice encodes it, so its inserts go at compatRevision, where the
	// server converts.
	converted atomic.Bool
}

// identityPlan inserts every column of t as it is encoded.
func identityPlan(t *Table) *insertPlan {
	p := &insertPlan{target: t.target, cols: make([]int, len(t.Insert)),
		conv: make([]func(column) column, len(t.Insert)), lcKind: t.lcKind}
	for i := range p.cols {
		p.cols[i] = i
	}
	return p
}

// planFor is the plan t's blocks are inserted with into shard sh.
func (t *Table) planFor(sh *shard) *insertPlan {
	if p, ok := t.plans.Load(sh); ok {
		return p.(*insertPlan)
	}
	return t.plan
}

// identity says whether the plan sends every block column as it is.
func (p *insertPlan) identity() bool {
	if p.err != nil {
		return false
	}
	for i, c := range p.cols {
		if c != i || p.conv[i] != nil {
			return false
		}
	}
	return true
}

// sameAs says whether o inserts the same columns in the same way as p.
func (p *insertPlan) sameAs(o *insertPlan) bool {
	if p.err != nil || o.err != nil {
		return p.err != nil && o.err != nil && p.err.Error() == o.err.Error()
	}
	if p.target.insertSQL != o.target.insertSQL || !slices.Equal(p.lcKind, o.lcKind) {
		return false
	}
	for i := range p.conv {
		if (p.conv[i] == nil) != (o.conv[i] == nil) {
			return false
		}
	}
	return true
}

// schemaChanged says whether a permanent insert error can come from a
// change of the table's schema since the block was encoded: a column
// dropped or renamed, or a type changed that the server does not convert.
func schemaChanged(err error) bool {
	code, _ := errorCode(err)
	switch proto.Error(code) {
	case proto.ErrNoSuchColumnInTable, proto.ErrThereIsNoColumn, proto.ErrNotFoundColumnInBlock,
		proto.ErrUnknownIdentifier, proto.ErrTypeMismatch, proto.ErrBadCast, proto.ErrCannotConvertType,
		proto.ErrNumberOfColumnsDoesntMatch, proto.ErrIllegalColumn:
		return true
	}
	return false
}

// input is part s as the plan's ch-go input columns.
func (p *insertPlan) input(s *subBlock) proto.Input {
	in := make(proto.Input, len(p.cols))
	for i := range p.cols {
		in[i] = proto.InputColumn{Name: p.target.columns[i], Data: p.column(s, i)}
	}
	return in
}

// column is the plan's i-th column of part s.
func (p *insertPlan) column(s *subBlock, i int) proto.ColInput {
	c := s.cols[p.cols[i]]
	if f := p.conv[i]; f != nil {
		return f(c)
	}
	return c
}

// adaptPlan is the plan that inserts blocks of t into the table now
// described by now (the insert table's columns on the server). It fails
// when no block of t can be inserted: a column the table now needs that t
// does not have is left to the server's default, so that happens only when
// no column is left or a type changed in a way sluice does not convert and
// the server does not either.
func adaptPlan(t *Table, now []Column, serverConverts bool) (*insertPlan, error) {
	have := map[string]Column{}
	for _, c := range now {
		have[c.Name] = c
	}
	p := &insertPlan{}
	var names []Column
	for i, c := range t.Insert {
		cur, ok := have[c.Name]
		if !ok || cur.DefaultKind == "MATERIALIZED" || cur.DefaultKind == "ALIAS" {
			continue // dropped, or computed by the server now
		}
		var conv func(column) column
		kind := t.lcKind[i]
		if strings.TrimSpace(cur.Type) != strings.TrimSpace(c.Type) {
			to, err := chtype.Parse(cur.Type)
			if err != nil {
				return nil, fmt.Errorf("column %s is %s now: %w", c.Name, cur.Type, err)
			}
			conv, err = converter(t.types[i], to)
			if err != nil && !serverConverts {
				return nil, fmt.Errorf("column %s was %s and is %s now: %w", c.Name, c.Type, cur.Type, err)
			}
			kind, _ = lowCardinalityKind(cur.Type)
		}
		p.cols = append(p.cols, i)
		p.conv = append(p.conv, conv)
		p.lcKind = append(p.lcKind, kind)
		names = append(names, c)
	}
	if len(p.cols) == 0 {
		return nil, fmt.Errorf("none of the block's columns (%s) is in the table any more", columnList(t.Insert))
	}
	p.target = newTarget(t.target.database, t.target.table, names)
	return p, nil
}

// converter returns how to convert a column of type from into one of type
// to: nil when the encodings are the same, else a function. It converts
// what an ALTER … MODIFY COLUMN to a wider type makes of a column: an
// integer to a wider integer that holds every value, Float32 to Float64, an
// integer of up to 32 bits to Float64, and T to Nullable(T).
func converter(from, to *chtype.Type) (func(column) column, error) {
	if from.Bare == to.Bare || sameEncoding(from, to) {
		return nil, nil
	}
	if to.Kind == chtype.Nullable && from.Kind != chtype.Nullable {
		inner, err := converter(from, to.Elem)
		if err != nil {
			return nil, err
		}
		return func(c column) column {
			if inner != nil {
				c = inner(c)
			}
			return &nullableColumn{inner: c, nulls: make([]byte, c.Rows())}
		}, nil
	}
	if from.Kind == chtype.Nullable && to.Kind == chtype.Nullable {
		inner, err := converter(from.Elem, to.Elem)
		if err != nil {
			return nil, err
		}
		return func(c column) column {
			n := c.(*nullableColumn)
			return &nullableColumn{inner: inner(n.inner), nulls: n.nulls}
		}, nil
	}
	if widen := numericWidening(from.Kind, to.Kind); widen != nil {
		width := from.Width()
		return func(c column) column {
			src := c.(*fixedColumn)
			dst := &fixedColumn{t: to, width: to.Width(), buf: make([]byte, 0, src.Rows()*to.Width())}
			for i := 0; i+width <= len(src.buf); i += width {
				dst.buf = widen(dst.buf, src.buf[i:i+width])
			}
			return dst
		}, nil
	}
	return nil, fmt.Errorf("sluice does not convert %s to %s", from.Bare, to.Bare)
}

// sameEncoding says whether values of from are values of to byte for byte:
// LowCardinality and JSON carry their inner type's bytes.
func sameEncoding(from, to *chtype.Type) bool {
	if from.Kind != to.Kind {
		return false
	}
	switch from.Kind {
	case chtype.String, chtype.Enum8, chtype.Enum16:
		// An enum's values are its numbers; the server checks that each
		// is one the new type names.
		return true
	case chtype.Nullable:
		return sameEncoding(from.Elem, to.Elem)
	}
	return false
}

// numericWidening returns the function that appends a value of kind from,
// widened to kind to, or nil when to does not hold every value of from.
func numericWidening(from, to chtype.Kind) func(dst, v []byte) []byte {
	bits := map[chtype.Kind]int{chtype.Int8: 8, chtype.Int16: 16, chtype.Int32: 32, chtype.Int64: 64,
		chtype.UInt8: 8, chtype.UInt16: 16, chtype.UInt32: 32, chtype.UInt64: 64}
	fb, fromInt := bits[from]
	tb, toInt := bits[to]
	switch {
	case fromInt && toInt:
		// A signed value fits only a wider signed type; an unsigned one a
		// wider unsigned type, or a signed one wider still.
		if tb <= fb || (from.Signed() && !to.Signed()) {
			return nil
		}
		return func(dst, v []byte) []byte {
			x := readInt(v, from.Signed())
			switch tb {
			case 16:
				return binary.LittleEndian.AppendUint16(dst, uint16(x))
			case 32:
				return binary.LittleEndian.AppendUint32(dst, uint32(x))
			}
			return binary.LittleEndian.AppendUint64(dst, uint64(x))
		}
	case from == chtype.Float32 && to == chtype.Float64:
		return func(dst, v []byte) []byte {
			f := math.Float32frombits(binary.LittleEndian.Uint32(v))
			return binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(f)))
		}
	case fromInt && fb <= 32 && to == chtype.Float64:
		return func(dst, v []byte) []byte {
			f := float64(readInt(v, from.Signed()))
			return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
		}
	}
	return nil
}

// readInt reads a little-endian integer of len(v) bytes, sign-extended when
// signed.
func readInt(v []byte, signed bool) int64 {
	var u uint64
	for i := len(v) - 1; i >= 0; i-- {
		u = u<<8 | uint64(v[i])
	}
	if signed {
		shift := 64 - 8*len(v)
		return int64(u<<shift) >> shift
	}
	return int64(u)
}
