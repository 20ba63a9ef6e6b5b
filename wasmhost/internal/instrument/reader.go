package instrument

import (
	"encoding/binary"
	"fmt"
)

// reader decodes the binary format. The first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = &refusal{ErrInvalid, "unexpected end"}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = invalidf("bad %s at offset %d", what, r.off)
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
		if shift == 28 && c&0x70 != 0 { // more than 32 bits
			break
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

// sleb reads a signed LEB128 integer of the given width.
func (r *reader) sleb(bits int) int64 {
	var v int64
	last := (bits+6)/7 - 1
	for n := 0; n <= last; n++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if n == last { // its bits past the width must extend the sign
			mask := byte(0x7F) &^ (1<<(bits-7*n-1) - 1)
			if p := c & mask; c&0x80 != 0 || (p != 0 && p != mask) {
				break
			}
		}
		v |= int64(c&0x7F) << (7 * n)
		if c&0x80 == 0 {
			if shift := 7 * (n + 1); shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	r.fail("LEB128 integer")
	return 0
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

// memoryType reads a memory's limits, in pages, and returns why they are
// invalid, if they are.
func (r *reader) memoryType() error {
	start := r.off
	flags := r.byte()
	switch flags {
	case 0x00, 0x01:
	case 0x02, 0x03:
		if r.err == nil {
			r.err = unsupportedf("a shared memory (threads are not enabled)")
		}
		r.off = len(r.b)
		return nil
	default:
		r.off = start
		r.fail(fmt.Sprintf("memory limits flags %#x", flags))
		return nil
	}
	lo := r.u32()
	hi := lo
	if flags == 0x01 {
		hi = r.u32()
	}
	switch {
	case r.err != nil:
	case lo > maxPages || hi > maxPages:
		return invalidf("a memory of more than %d pages", maxPages)
	case hi < lo:
		return invalidf("a memory whose maximum, %d pages, is below its minimum, %d", hi, lo)
	}
	return nil
}

// globalType reads a global's type and returns whether it is mutable.
func (r *reader) globalType() bool {
	r.valType()
	switch mut := r.byte(); mut {
	case 0x00:
		return false
	case 0x01:
		return true
	default:
		r.off--
		r.fail(fmt.Sprintf("global mutability %#x", mut))
		return false
	}
}

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

func (r *reader) memArg() {
	r.u32()
	r.u32()
}

// blockType reads a block type: empty (0x40), a value type, or a type index
// as a signed LEB128 (s33). It returns the type index, or -1 for the others.
func (r *reader) blockType() int64 {
	if r.off >= len(r.b) {
		r.byte()
		return -1
	}
	switch r.b[r.off] {
	case 0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		r.off++
		return -1
	}
	v := r.sleb(33)
	if v < 0 {
		r.fail("block type")
		return -1
	}
	return v
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
