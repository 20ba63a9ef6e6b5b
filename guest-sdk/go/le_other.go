//go:build !wasm

package sluice

import (
	"encoding/binary"
	"unsafe"
)

// le32 and le64 read little-endian integers from the front of b (see
// le_wasm.go).
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// put8 to put64 store little-endian integers at p, which has the room (see
// le_wasm.go).
func put8(p unsafe.Pointer, v uint8) { *(*uint8)(p) = v }

func put16(p unsafe.Pointer, v uint16) { binary.LittleEndian.PutUint16(unsafe.Slice((*byte)(p), 2), v) }

func put32(p unsafe.Pointer, v uint32) { binary.LittleEndian.PutUint32(unsafe.Slice((*byte)(p), 4), v) }

func put64(p unsafe.Pointer, v uint64) { binary.LittleEndian.PutUint64(unsafe.Slice((*byte)(p), 8), v) }
