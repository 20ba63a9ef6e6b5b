package sluice

import (
	"strconv"
	"unsafe"
)

// reader decodes the little-endian framing of the ABI. The first error sticks;
// reads after it return zero values, so decoding code checks r.err once.
type reader struct {
	p   []byte
	off int
	err error
}

type decodeError struct {
	off int
	msg string
}

func (e *decodeError) Error() string { return e.msg + " at offset " + strconv.Itoa(e.off) }

func (r *reader) short(what string) {
	if r.err == nil {
		r.err = &decodeError{off: r.off, msg: "truncated reading " + what}
	}
}

// u32, u64 and bytes have fast paths that inline. After an error r.off is
// len(r.p), so that they all take the slow path.

func (r *reader) u32(what string) uint32 {
	if r.off <= len(r.p)-4 {
		v := le32(r.p[r.off:])
		r.off += 4
		return v
	}
	r.short(what)
	r.off = len(r.p)
	return 0
}

func (r *reader) u64(what string) uint64 {
	if r.off <= len(r.p)-8 {
		v := le64(r.p[r.off:])
		r.off += 8
		return v
	}
	r.short(what)
	r.off = len(r.p)
	return 0
}

// bytes reads a str. The slice aliases the payload and its capacity ends
// where it does, so an append by the caller cannot overwrite what follows.
func (r *reader) bytes(what string) []byte {
	n := int(r.u32(what))
	if end := r.off + n; end <= len(r.p) && end >= r.off {
		b := r.p[r.off:end:end]
		r.off = end
		return b
	}
	r.short(what)
	r.off = len(r.p)
	return nil
}

// str reads a str as a string that aliases the payload (no copy).
func (r *reader) str(what string) string {
	b := r.bytes(what)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// count reads a u32 element count and checks it against the bytes left,
// given that an element takes at least minSize bytes, so a corrupt count can
// neither make the decoder loop for long nor allocate much.
func (r *reader) count(minSize int, what string) int {
	n := r.u32(what)
	if r.err == nil && uint64(n)*uint64(minSize) > uint64(len(r.p)-r.off) {
		r.err = &decodeError{off: r.off - 4, msg: what + " " + strconv.FormatUint(uint64(n), 10) + " does not fit in the payload"}
		r.off = len(r.p)
		return 0
	}
	return int(n)
}

// inputCap is the capacity sluice_alloc gives its input buffer when a
// call of size bytes does not fit the one it has: a quarter more, and at
// least 64 KiB. A quarter, not double: wasm memory never shrinks, and
// doubling for a batch one byte over the buffer left an instance with
// twice the memory its calls need for good (1.6 MiB of buffer for calls
// of 0.8 MiB). Slowly growing batches still reallocate only once per
// quarter of growth.
func inputCap(size int) int { return max(size+size/4, 64<<10) }
