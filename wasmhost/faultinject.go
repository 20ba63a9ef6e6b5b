//go:build sluice_faultinject

package wasmhost

import "encoding/binary"

// This file is compiled only into binaries built with the
// sluice_faultinject tag, for the tests that simulate the deadline's guard
// failing (docs/adr/0007-stuck-call-detection.md). A production binary
// has no way to load a module without the instrumentation.

// faultInjectSection is the custom section that makes a faultinject
// binary load a module without the deadline instrumentation, so that a
// loop in it can never be interrupted.
const faultInjectSection = "sluice.faultinject.uninstrumented"

// FaultInjection reports whether this binary was built with the
// sluice_faultinject tag.
const FaultInjection = true

// loadUninstrumented reports whether wasm carries faultInjectSection.
func loadUninstrumented(wasm []byte) bool {
	if !IsWasm(wasm) {
		return false
	}
	b := wasm[8:]
	for len(b) > 0 {
		id := b[0]
		size, n := binary.Uvarint(b[1:])
		if n <= 0 || size > uint64(len(b)-1-n) {
			return false
		}
		body := b[1+n : 1+n+int(size)]
		b = b[1+n+int(size):]
		if id != 0 {
			continue
		}
		l, m := binary.Uvarint(body)
		if m > 0 && l <= uint64(len(body)-m) && string(body[m:m+int(l)]) == faultInjectSection {
			return true
		}
	}
	return false
}
