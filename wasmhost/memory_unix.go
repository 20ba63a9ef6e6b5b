//go:build unix

package wasmhost

import (
	"sync/atomic"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// Why map guest memory ourselves? wazero's default grows a linear memory
// by append: each grow past the capacity allocates a larger Go slice and
// copies, and the old one stays until a garbage collection, so a guest
// growing to its cap peaked at 3-4x the cap in host memory. Here each
// instance's memory is one anonymous mapping of its maximum, reserved but
// not committed (MAP_NORESERVE), grown in place and unmapped when the
// instance closes: the host spends what the guest touched, at most the
// cap, and gets it back at once.

// guestMemory is the wazero memory allocator of an instance.
var guestMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(allocateGuestMemory)

func allocateGuestMemory(_, max uint64) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		return &heapMemory{}
	}
	b, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON|mapNoReserve)
	if err != nil {
		return &heapMemory{max: max}
	}
	return &mappedMemory{buf: b}
}

// mappedMemory is a linear memory in a mapping of its maximum size.
type mappedMemory struct {
	buf  []byte
	size uint64 // the memory's size, counted in mappedBytes
}

// mappedBytes is the sum of the sizes of the mapped linear memories open
// in the process: an upper bound of what they hold outside the Go heap.
var mappedBytes atomic.Int64

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	mappedBytes.Add(int64(size) - int64(m.size))
	m.size = size
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
		mappedBytes.Add(-int64(m.size))
		m.size = 0
	}
}

func mappedMemoryBytes() int64 { return mappedBytes.Load() }
