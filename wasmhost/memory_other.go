//go:build !unix

package wasmhost

import "github.com/tetratelabs/wazero/experimental"

// guestMemory is the wazero memory allocator of an instance: the Go heap.
var guestMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
	return &heapMemory{max: max}
})

func mappedMemoryBytes() int64 { return 0 }
