package instrument

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// reader decodes the binary format. The first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("unexpected end")

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad %s at offset %d", what, r.off)
	}
	r.off = len(r.b)
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		if r.err == nil {
			r.err = errShort
		}
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || n > len(r.b)-r.off {
		if r.err == nil {
			r.err = errShort
		}
		r.off = len(r.b)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(c&0x7F) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("LEB128 u32")
	return 0
}

// count reads a vector's length and checks it against the bytes left,
// given that an element takes at least one byte. wazero's decoder allocates
// by such counts before reading the elements, so a tiny module with a huge
// count would make it allocate gigabytes: Rewrite runs first and refuses it.
func (r *reader) count() uint32 {
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(len(r.b)-r.off) {
		r.fail(fmt.Sprintf("vector length %d (more than the %d bytes left)", n, len(r.b)-r.off))
		return 0
	}
	return n
}

func (r *reader) sleb(bits int) {
	for n := 0; n < (bits+6)/7; n++ {
		c := r.byte()
		if r.err != nil || c&0x80 == 0 {
			return
		}
	}
	r.fail("LEB128 integer")
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

func (r *reader) valType() {
	switch c := r.byte(); c {
	case 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
	default:
		r.off--
		r.fail(fmt.Sprintf("value type %#x", c))
	}
}

func (r *reader) refType() {
	switch c := r.byte(); c {
	case 0x70, 0x6F:
	default:
		r.off--
		r.fail(fmt.Sprintf("reference type %#x", c))
	}
}

func (r *reader) limits() {
	switch flags := r.byte(); flags {
	case 0x00:
		r.u32()
	case 0x01, 0x03:
		r.u32()
		r.u32()
	default:
		r.fail(fmt.Sprintf("limits flags %#x", flags))
	}
}

func (r *reader) memArg() {
	r.u32()
	r.u32()
}

// blockType reads a block type: empty (0x40), a value type, or a type index
// as a signed LEB128 (s33).
func (r *reader) blockType() {
	if r.off >= len(r.b) {
		r.byte()
		return
	}
	switch r.b[r.off] {
	case 0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		r.off++
		return
	}
	r.sleb(33)
}

// appendU32 appends v as unsigned LEB128, which is Go's uvarint.
func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// appendS32 appends v as signed LEB128.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
