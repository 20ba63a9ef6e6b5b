// Package wasmtest assembles small WebAssembly binaries by hand for the
// tests of wasmhost and its instrumentation: modules whose every byte a test
// controls, which no guest toolchain would produce.
package wasmtest

import "encoding/binary"

// Value types and other binary-format constants.
const (
	I32 byte = 0x7F
	I64 byte = 0x7E
)

// U32 is v as unsigned LEB128, which is Go's uvarint.
func U32(v uint32) []byte { return binary.AppendUvarint(nil, uint64(v)) }

// Name is a length-prefixed string.
func Name(s string) []byte { return append(U32(uint32(len(s))), s...) }

// Vec is a count followed by the items.
func Vec(items ...[]byte) []byte {
	b := U32(uint32(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

// Section is a section with its id and size.
func Section(id byte, body []byte) []byte {
	b := append([]byte{id}, U32(uint32(len(body)))...)
	return append(b, body...)
}

// Binary is the module header followed by the sections.
func Binary(sections ...[]byte) []byte {
	b := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		b = append(b, s...)
	}
	return b
}

// FuncType is a function type.
func FuncType(params, results []byte) []byte {
	b := []byte{0x60}
	b = append(b, U32(uint32(len(params)))...)
	b = append(b, params...)
	b = append(b, U32(uint32(len(results)))...)
	return append(b, results...)
}

// Code is one entry of the code section: locals (already encoded as a
// vector) and the instructions, which must end with 0x0B.
func Code(locals []byte, instrs ...byte) []byte {
	body := append(append([]byte{}, locals...), instrs...)
	return append(U32(uint32(len(body))), body...)
}

// NoLocals is an empty locals vector.
var NoLocals = []byte{0x00}

// Func is a function of a Sluice module.
type Func struct {
	Type   uint32 // index into SluiceTypes, or a type the module adds
	Locals []byte // nil: none
	Body   []byte // instructions, ending with 0x0B
	Export string // "" for none
}

// Import is an imported function.
type Import struct {
	Module, Name string
	Type         uint32
}

// The types every Sluice module declares, by index.
const (
	TypeI32         = 0 // () -> i32
	TypeI32ToI32    = 1 // (i32) -> i32
	TypeI32I32ToI64 = 2 // (i32, i32) -> i64
	TypeVoid        = 3 // () -> ()
	TypeI32x3ToI32  = 4 // (i32, i32, i32) -> i32
	TypeI32x3       = 5 // (i32, i32, i32) -> ()
)

var sluiceTypes = [][]byte{
	FuncType(nil, []byte{I32}),
	FuncType([]byte{I32}, []byte{I32}),
	FuncType([]byte{I32, I32}, []byte{I64}),
	FuncType(nil, nil),
	FuncType([]byte{I32, I32, I32}, []byte{I32}),
	FuncType([]byte{I32, I32, I32}, nil),
}

// Module describes a minimal module that speaks the sluice guest ABI:
// sluice_abi_version returns Version, sluice_alloc returns address 1024 of
// a memory of MemoryPages pages, sluice_init accepts everything, and
// sluice_transform runs Transform (type (i32, i32) -> i64).
type Module struct {
	Version int32
	// ABIVersion, when set, are the instructions of sluice_abi_version
	// (ending with 0x0B) in place of returning Version.
	ABIVersion []byte
	// Init, when set, are the instructions of sluice_init (ending with
	// 0x0B) in place of accepting everything.
	Init        []byte
	MemoryPages uint32
	Imports     []Import
	Transform   []byte // instructions of sluice_transform, ending with 0x0B
	// TransformLocals are sluice_transform's local declarations (a vector),
	// nil for none; its locals come after its two parameters.
	TransformLocals []byte
	Extra           []Func // more functions, after the four ABI ones
	Start           int    // 1 + the index into Extra of the start function; 0 for none
	Tables          []Table
	// Types are more function types (FuncType), after the ones every
	// module declares: the first is type index TypeExtra.
	Types [][]byte
}

// TypeExtra is the index of the first of Module.Types.
const TypeExtra = 6

// Table is a funcref table the module defines.
type Table struct {
	Min, Max uint32
	HasMax   bool
}

// Build assembles the module.
func (m Module) Build() []byte {
	nimp := uint32(len(m.Imports))
	var imports [][]byte
	for _, im := range m.Imports {
		e := append(Name(im.Module), Name(im.Name)...)
		e = append(e, 0x00)
		imports = append(imports, append(e, U32(im.Type)...))
	}
	version := append(append([]byte{0x41}, S64(int64(m.Version))...), 0x0B)
	if m.ABIVersion != nil {
		version = m.ABIVersion
	}
	init := []byte{0x42, 0x00, 0x0B} // i64.const 0
	if m.Init != nil {
		init = m.Init
	}
	funcs := []Func{
		{Type: TypeI32, Body: version, Export: "sluice_abi_version"},
		{Type: TypeI32ToI32, Body: []byte{0x41, 0x80, 0x08, 0x0B}, Export: "sluice_alloc"}, // i32.const 1024
		{Type: TypeI32I32ToI64, Body: init, Export: "sluice_init"},
		{Type: TypeI32I32ToI64, Locals: m.TransformLocals, Body: m.Transform, Export: "sluice_transform"},
	}
	funcs = append(funcs, m.Extra...)
	var decls, codes, exports [][]byte
	for i, f := range funcs {
		decls = append(decls, U32(f.Type))
		locals := f.Locals
		if locals == nil {
			locals = NoLocals
		}
		codes = append(codes, Code(locals, f.Body...))
		if f.Export != "" {
			e := append(Name(f.Export), 0x00)
			exports = append(exports, append(e, U32(nimp+uint32(i))...))
		}
	}
	exports = append(exports, append(Name("memory"), 0x02, 0x00))
	pages := m.MemoryPages
	if pages == 0 {
		pages = 1
	}
	secs := [][]byte{Section(1, Vec(append(append([][]byte{}, sluiceTypes...), m.Types...)...))}
	if len(imports) > 0 {
		secs = append(secs, Section(2, Vec(imports...)))
	}
	secs = append(secs, Section(3, Vec(decls...)))
	if len(m.Tables) > 0 {
		var tables [][]byte
		for _, t := range m.Tables {
			e := []byte{0x70, 0x00}
			if t.HasMax {
				e[1] = 0x01
			}
			e = append(e, U32(t.Min)...)
			if t.HasMax {
				e = append(e, U32(t.Max)...)
			}
			tables = append(tables, e)
		}
		secs = append(secs, Section(4, Vec(tables...)))
	}
	secs = append(secs,
		Section(5, Vec(append([]byte{0x00}, U32(pages)...))),
		Section(7, Vec(exports...)),
	)
	if m.Start > 0 {
		secs = append(secs, Section(8, U32(nimp+4+uint32(m.Start-1))))
	}
	secs = append(secs, Section(10, Vec(codes...)))
	return Binary(secs...)
}

// S64 is v as signed LEB128, the immediate of i32.const and i64.const.
func S64(v int64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
