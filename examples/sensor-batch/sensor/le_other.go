//go:build !wasm

package sensor

import (
	"encoding/binary"
	"unsafe"
)

// le64 reads the little-endian uint64 at p+i, which the caller has checked
// is within its message.
func le64(p unsafe.Pointer, i int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, i))[:])
}

// st64 stores v little-endian at p+i, which the caller has checked is
// within its buffer.
func st64(p unsafe.Pointer, i int, v uint64) {
	binary.LittleEndian.PutUint64((*[8]byte)(unsafe.Add(p, i))[:], v)
}
