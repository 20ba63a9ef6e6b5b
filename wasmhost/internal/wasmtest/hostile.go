package wasmtest

// Hostile modules: each attacks one of the host's limits with the worst
// input for it. Those that run do the attack in the export "hostile"
// (Extra function 0), which sluice_transform calls before returning no
// output; the compile bombs never get to run.

// HostileIndex is the function index of "hostile" in a module without
// imports (with imports, add their count).
const HostileIndex = 4

// transformCalling is a sluice_transform that calls function fn, drops its
// result if it has one, and returns no output.
func transformCalling(fn uint32, result bool) []byte {
	b := append([]byte{0x10}, U32(fn)...)
	if result {
		b = append(b, 0x1A)
	}
	return append(b, 0x42, 0x00, 0x0B)
}

func hostile(f Func, imports []Import, types [][]byte, tables []Table, pages uint32) []byte {
	f.Export = "hostile"
	return Module{Version: 1, MemoryPages: pages, Imports: imports, Types: types, Tables: tables,
		Transform: transformCalling(uint32(len(imports))+HostileIndex, f.Type != TypeVoid),
		Extra:     []Func{f}}.Build()
}

// TableBomb declares eight tables of 2^27 elements each (wazero's
// largest): 8 GiB of host memory if instantiated, in about 100 bytes.
func TableBomb() []byte {
	tables := make([]Table, 8)
	for i := range tables {
		tables[i].Min = 1 << 27
	}
	return hostile(Func{Type: TypeVoid, Body: []byte{0x0B}}, nil, nil, tables, 1)
}

// TableGrow's hostile grows its table (of t's limits) by 4096 elements at
// a time until table.grow fails, and returns the table's size.
func TableGrow(t Table) []byte {
	grow := []byte{
		0x03, 0x40, // loop
		0xD0, 0x70, // ref.null func
		0x41, 0x80, 0x20, // i32.const 4096
		0xFC, 0x0F, 0x00, // table.grow 0
		0x41, 0x7F, // i32.const -1
		0x47,       // i32.ne
		0x0D, 0x00, // br_if 0
		0x0B,             // end
		0xFC, 0x10, 0x00, // table.size 0
		0x0B,
	}
	return hostile(Func{Type: TypeI32, Body: grow}, nil, nil, []Table{t}, 1)
}

// StdoutFlood's hostile makes one fd_write to stdout of iovecs iovecs,
// each of the first bufLen bytes of memory (pages pages), and returns its
// errno. The iovecs lie after the buffer.
func StdoutFlood(pages, bufLen, iovecs uint32) []byte {
	i32 := func(v uint32) []byte { return append([]byte{0x41}, S64(int64(int32(v)))...) }
	var b []byte
	b = append(b, 0x02, 0x40, 0x03, 0x40) // block; loop
	b = append(b, 0x20, 0x00)             // local.get i
	b = append(b, i32(iovecs)...)
	b = append(b, 0x4F, 0x0D, 0x01)                         // i32.ge_u; br_if 1
	b = append(b, 0x20, 0x00, 0x41, 0x03, 0x74)             // local.get i; i32.const 3; i32.shl
	b = append(b, i32(bufLen)...)                           //
	b = append(b, 0x6A)                                     // i32.add: the iovec's address
	b = append(b, i32(bufLen)...)                           // its length
	b = append(b, 0x36, 0x02, 0x04)                         // i32.store offset=4
	b = append(b, 0x20, 0x00, 0x41, 0x01, 0x6A, 0x21, 0x00) // i++
	b = append(b, 0x0C, 0x00, 0x0B, 0x0B)                   // br 0; end; end
	b = append(b, 0x41, 0x01)                               // fd 1
	b = append(b, i32(bufLen)...)                           // iovs
	b = append(b, i32(iovecs)...)                           // iovs_len
	b = append(b, 0x41, 0x10, 0x10, 0x00, 0x0B)             // nwritten at 16; call fd_write; end
	return hostile(Func{Type: TypeI32, Locals: []byte{0x01, 0x01, I32}, Body: b},
		[]Import{{Module: "wasi_snapshot_preview1", Name: "fd_write", Type: TypeExtra}},
		[][]byte{FuncType([]byte{I32, I32, I32, I32}, []byte{I32})}, nil, pages)
}

// MemoryGrow's hostile grows memory a page at a time, filling each new
// page, until memory.grow fails, and returns the memory's pages.
func MemoryGrow() []byte {
	grow := []byte{
		0x02, 0x40, 0x03, 0x40, // block; loop
		0x41, 0x01, 0x40, 0x00, // i32.const 1; memory.grow
		0x22, 0x00, // local.tee 0
		0x41, 0x7F, 0x46, 0x0D, 0x01, // i32.const -1; i32.eq; br_if 1
		0x20, 0x00, 0x41, 0x10, 0x74, // local.get 0; i32.const 16; i32.shl
		0x41, 0x01, 0x41, 0x80, 0x80, 0x04, // i32.const 1; i32.const 65536
		0xFC, 0x0B, 0x00, // memory.fill: the whole new page
		0x0C, 0x00, 0x0B, 0x0B, // br 0; end; end
		0x3F, 0x00, 0x0B, // memory.size; end
	}
	return hostile(Func{Type: TypeI32, Locals: []byte{0x01, 0x01, I32}, Body: grow}, nil, nil, nil, 1)
}

// StackOverflow's hostile calls itself until the call stack runs out.
func StackOverflow() []byte {
	return hostile(Func{Type: TypeVoid, Body: append(append([]byte{0x10}, U32(HostileIndex)...), 0x0B)}, nil, nil, nil, 1)
}

// Nested is inner inside depth blocks.
func Nested(depth int, inner []byte) []byte {
	var b []byte
	for range depth {
		b = append(b, 0x02, 0x40) // block
	}
	b = append(b, inner...)
	for range depth {
		b = append(b, 0x0B)
	}
	return b
}

// BrTable is a br_table of n targets to the enclosing depth blocks.
func BrTable(n, depth int) []byte {
	b := append([]byte{0x41, 0x00, 0x0E}, U32(uint32(n))...) // i32.const 0; br_table
	for i := range n {
		b = append(b, U32(uint32(i%depth))...)
	}
	return append(b, 0x00)
}

// Funcs is a module with n more functions of body code (without its end).
func Funcs(n int, code []byte) []byte {
	f := Func{Type: TypeVoid, Body: append(append([]byte{}, code...), 0x0B)}
	extra := make([]Func, n)
	for i := range extra {
		extra[i] = f
	}
	return Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Extra: extra}.Build()
}

// StraightCode is n bytes (rounded up to 3) of i32.const 1; drop.
func StraightCode(n int) []byte {
	b := make([]byte, 0, n+3)
	for len(b) < n {
		b = append(b, 0x41, 0x01, 0x1A)
	}
	return b
}

// UndeclaredGlobals is a module without globals whose export fn
// (sluice_abi_version, sluice_init or sluice_transform) loops writing
// global 0 and global 2. It is invalid; had the host instrumented it, the
// rewrite would have appended its own globals at those indices (the
// interrupt flag and the countdown of every loop), and the loop, setting
// both to 0 at each turn, would have run past every deadline.
func UndeclaredGlobals(fn string) []byte {
	loop := []byte{
		0x03, 0x40, // loop
		0x41, 0x00, 0x24, 0x00, // i32.const 0; global.set 0
		0x41, 0x00, 0x24, 0x02, // i32.const 0; global.set 2
		0x0C, 0x00, // br 0
		0x0B, // end
	}
	m := Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}
	switch fn {
	case "sluice_abi_version":
		m.ABIVersion = append(loop, 0x41, 0x01, 0x0B)
	case "sluice_init":
		m.Init = append(loop, 0x42, 0x00, 0x0B)
	case "sluice_transform":
		m.Transform = append(loop, 0x42, 0x00, 0x0B)
	default:
		panic("UndeclaredGlobals: no export " + fn)
	}
	return m.Build()
}
