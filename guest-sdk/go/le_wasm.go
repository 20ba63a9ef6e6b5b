//go:build wasm

package sluice

import "unsafe"

// le32 and le64 read little-endian integers from the front of b, which the
// caller has checked is long enough. On wasm (little-endian, unaligned
// loads allowed) they are one load each, which keeps the reader's fast
// paths within the inliner's budget; binary.LittleEndian's byte-by-byte
// form is not, on wasm.
func le32(b []byte) uint32 { return *(*uint32)(unsafe.Pointer(unsafe.SliceData(b))) }

func le64(b []byte) uint64 { return *(*uint64)(unsafe.Pointer(unsafe.SliceData(b))) }

// put8 to put64 store little-endian integers at p, which has the room: on
// wasm one store each.
func put8(p unsafe.Pointer, v uint8) { *(*uint8)(p) = v }

func put16(p unsafe.Pointer, v uint16) { *(*uint16)(p) = v }

func put32(p unsafe.Pointer, v uint32) { *(*uint32)(p) = v }

func put64(p unsafe.Pointer, v uint64) { *(*uint64)(p) = v }
