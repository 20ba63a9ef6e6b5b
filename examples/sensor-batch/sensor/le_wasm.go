//go:build wasm

package sensor

import "unsafe"

// le64 reads the little-endian uint64 at p+i, which the caller has checked
// is within its message. On wasm (little-endian, unaligned loads allowed)
// it is one load; binary.LittleEndian's form is eight.
func le64(p unsafe.Pointer, i int) uint64 { return *(*uint64)(unsafe.Add(p, i)) }

// st64 stores v little-endian at p+i, which the caller has checked is
// within its buffer: one store.
func st64(p unsafe.Pointer, i int, v uint64) { *(*uint64)(unsafe.Add(p, i)) = v }
