//go:build wasip1

package sluice

import "unsafe"

// The guest ABI v1 exports and imports (guest-sdk/ABI.md).

//go:wasmimport sluice log
func hostLog(level int32, ptr unsafe.Pointer, n int32)

func writeLog(level Level, msg string) {
	hostLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), int32(len(msg)))
}

// inBuf is the buffer sluice_alloc hands out; the host writes the next
// call's payload there.
var inBuf []byte

// refusal keeps sluice_init's message alive until the host's next call.
var refusal string

//go:wasmexport sluice_abi_version
func sluiceABIVersion() int32 { return ABIVersion }

//go:wasmexport sluice_alloc
func sluiceAlloc(size int32) unsafe.Pointer {
	if size < 0 {
		return nil
	}
	if int(size) > cap(inBuf) || inBuf == nil {
		// The old buffer becomes garbage, as the ABI allows.
		inBuf = make([]byte, inputCap(int(size)))
	}
	return unsafe.Pointer(unsafe.SliceData(inBuf))
}

func payload(ptr unsafe.Pointer, n int32) []byte {
	if ptr == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), n)
}

func pack(p unsafe.Pointer, n int) int64 {
	if n == 0 {
		return 0
	}
	return int64(uint64(uintptr(p))<<32 | uint64(uint32(n)))
}

// orphan answers for a module that never called Run: it refuses init, and
// fails every record of a batch.
var orphan = NewInstance(nil)

func instance() *Instance {
	if std == nil {
		return orphan
	}
	return std
}

//go:wasmexport sluice_init
func sluiceInit(ptr unsafe.Pointer, n int32) int64 {
	refusal = instance().Init(payload(ptr, n))
	return pack(unsafe.Pointer(unsafe.StringData(refusal)), len(refusal))
}

//go:wasmexport sluice_transform
func sluiceTransform(ptr unsafe.Pointer, n int32) int64 {
	out := instance().Transform(payload(ptr, n))
	return pack(unsafe.Pointer(unsafe.SliceData(out)), len(out))
}
