package wasmhost

// heapMemory is a linear memory on the Go heap, for when a mapping cannot
// be made: it grows by copying, as wazero's own does.
type heapMemory struct {
	buf []byte
	max uint64
}

func (m *heapMemory) Reallocate(size uint64) []byte {
	if size > m.max {
		return nil
	}
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	b := make([]byte, size)
	copy(b, m.buf)
	m.buf = b
	return b
}

func (m *heapMemory) Free() { m.buf = nil }
