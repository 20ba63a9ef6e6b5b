//go:build !wasm

package sluice

import "encoding/binary"

// le32 and le64 read little-endian integers from the front of b (see
// le_wasm.go).
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
