package instrument

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Section ids.
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secMemory   = 5
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secElement  = 9
	secCode     = 10
	secData     = 11
	secDataCnt  = 12
	secTag      = 13
)

// order is each known section's position in the order the binary format
// requires (the tag section sits between memory and global).
var order = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCnt: 11, secCode: 12, secData: 13,
}

type section struct {
	id   byte
	body []byte
	off  int // of the body in the binary, for errors
}

// module is what Rewrite learns about the module before rewriting its code:
// the extent of each of its index spaces, which every index in the module
// must be within, and what the rewrite needs to know.
type module struct {
	params          []uint32 // parameter count of each type
	results         [][]byte // result types of each type
	importTypes     []uint32 // type index of each imported function
	funcTypes       []uint32 // type index of each defined function
	importedFuncs   uint32
	importedGlobals uint32
	globalMut       []bool // whether each global, imported first, is mutable
	memories        uint32
	hasMemory       bool
	tables          []table
	elems           uint32 // element segments
	dataCount       uint32 // data segments, as the data count section says
	hasDataCount    bool
	start           uint32
	hasStart        bool
	hasCode         bool
	// refs marks the functions ref.func may name in code: those an element
	// segment, an export or a global's initializer names.
	refs []bool
	err  error // the first reason the module is invalid
	// exports and names name functions in errors.
	exports []funcExport
	names   []byte // the name section's body
}

type funcExport struct {
	index uint32
	name  string
}

func (m *module) funcs() uint32   { return m.importedFuncs + uint32(len(m.funcTypes)) }
func (m *module) globals() uint32 { return uint32(len(m.globalMut)) }

// declare marks function f, which must exist, as one ref.func may name.
func (m *module) declare(f uint32) {
	if m.refs == nil {
		m.refs = make([]bool, m.funcs())
	}
	m.refs[f] = true
}

// declared reports whether ref.func may name function f.
func (m *module) declared(f uint32) bool { return f < uint32(len(m.refs)) && m.refs[f] }

// fail records why the module is invalid, if it is the first reason: the
// scan and the rewrite go on, so that the framing and the limits of the
// whole module are checked before a module is called invalid.
func (m *module) fail(err error) {
	if m.err == nil && err != nil {
		m.err = err
	}
}

// typeOf is the type index of function f, which must exist.
func (m *module) typeOf(f uint32) uint32 {
	if f < m.importedFuncs {
		return m.importTypes[f]
	}
	return m.funcTypes[f-m.importedFuncs]
}

// paramCount and resultTypes are what type t takes and returns; a type out
// of range (the module is invalid) takes and returns nothing.
func (m *module) paramCount(t uint32) uint32 {
	if t < uint32(len(m.params)) {
		return m.params[t]
	}
	return 0
}

func (m *module) resultTypes(t uint32) []byte {
	if t < uint32(len(m.results)) {
		return m.results[t]
	}
	return nil
}

// utf8Name reads a name that must be UTF-8, as the names of imports,
// exports and custom sections must.
func (m *module) utf8Name(r *reader, what string) string {
	s := r.name()
	if r.err == nil && !utf8.ValidString(s) {
		m.fail(invalidf("%s: a name that is not UTF-8", what))
	}
	return s
}

// funcName describes function f for an error: its index, and its export or
// debug name if it has one.
func (m *module) funcName(f uint32) string {
	for _, e := range m.exports {
		if e.index == f && e.name != "" {
			return fmt.Sprintf("function %d (%s)", f, printable(e.name))
		}
	}
	if name := debugName(m.names, f); name != "" {
		return fmt.Sprintf("function %d (%s)", f, printable(name))
	}
	return fmt.Sprintf("function %d", f)
}

// printable is a name the module chose, as an error shows it: as it is if
// it is short and printable, else quoted and cut, so that it cannot break
// the line or fake the rest of the message.
func printable(name string) string {
	const max = 64
	plain := len(name) <= max
	for _, c := range name {
		if !unicode.IsPrint(c) || c == '"' || c == '(' || c == ')' {
			plain = false
		}
	}
	if plain {
		return name
	}
	if len(name) > max {
		name = name[:max] + "…"
	}
	return strconv.Quote(name)
}

// table is a table the module defines.
type table struct {
	ref      byte
	min, max uint32
	hasMax   bool
}

// maxPages is the most pages a 32-bit memory can have.
const maxPages = 1 << 16

// scan reads and checks every section but the code, and returns what the
// rewrite needs to know and the sections to keep. It checks every vector
// length before wazero allocates by it, and every index against the index
// space it is in, as this module defines it: the rewrite appends to those
// spaces, and an index past their ends would reach what it adds.
func scan(secs []section, lim Limits) (*module, []section, error) {
	m := &module{}
	kept := secs[:0]
	last := 0
	var datas uint32
	for _, s := range secs {
		if s.id != secCustom {
			pos, ok := order[s.id]
			switch {
			case !ok:
				m.fail(invalidf("unknown section id %d", s.id))
				continue
			case pos <= last:
				m.fail(invalidf("section %d out of order or repeated", s.id))
			}
			last = max(last, pos)
		}
		sr := &reader{b: s.body}
		switch s.id {
		case secCustom:
			m.utf8Name(sr, "custom section")
			if sr.err != nil {
				return nil, nil, fmt.Errorf("custom section: %w", sr.err)
			}
			if !namesOK(s.body) {
				continue // a name section wazero would choke on: drop it
			}
			if name := (&reader{b: s.body}).name(); name == "name" {
				m.names = s.body[sr.off:]
			}
			kept = append(kept, s)
			continue
		case secType:
			n := sr.count()
			if err := over(n, lim.Types, "types"); err != nil {
				return nil, nil, err
			}
			for i := uint32(0); i < n && sr.err == nil; i++ {
				if f := sr.byte(); f != 0x60 && sr.err == nil {
					sr.off--
					sr.fail(fmt.Sprintf("function type form %#x", f))
				}
				var params uint32
				var results []byte
				for k := range 2 { // params, results
					c := sr.count()
					for j := uint32(0); j < c && sr.err == nil; j++ {
						sr.valType()
						if k == 1 && sr.err == nil {
							results = append(results, sr.b[sr.off-1])
						}
					}
					if k == 0 {
						params = c
					}
				}
				m.params = append(m.params, params)
				m.results = append(m.results, results)
			}
		case secImport:
			n := sr.count()
			if err := over(n, lim.Imports, "imports"); err != nil {
				return nil, nil, err
			}
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.utf8Name(sr, "import")
				m.utf8Name(sr, "import")
				switch kind := sr.byte(); kind {
				case 0x00: // func
					t := sr.u32()
					if sr.err == nil && t >= uint32(len(m.params)) {
						m.fail(invalidf("import %d: function type %d out of range (the module has %d types)", i, t, len(m.params)))
					}
					m.importTypes = append(m.importTypes, t)
					m.importedFuncs++
				case 0x01: // table
					return nil, nil, unsupportedf("the module imports a table; a module must define its own")
				case 0x02: // memory
					m.fail(sr.memoryType())
					m.memories++
				case 0x03: // global
					m.globalMut = append(m.globalMut, sr.globalType())
					m.importedGlobals++
				case 0x04: // tag
					return nil, nil, unsupportedf("the module imports an exception tag; exception handling is not enabled")
				default:
					sr.off--
					sr.fail(fmt.Sprintf("import kind %#x", kind))
				}
			}
		case secFunction:
			n := sr.count()
			if n > uint32(lim.Functions) {
				return nil, nil, limitf("the module defines %d functions; at most %d are allowed", n, lim.Functions)
			}
			for i := uint32(0); i < n && sr.err == nil; i++ {
				t := sr.u32()
				if sr.err == nil && t >= uint32(len(m.params)) {
					m.fail(invalidf("function section: function %d has type %d, out of range (the module has %d types)", m.importedFuncs+i, t, len(m.params)))
				}
				m.funcTypes = append(m.funcTypes, t)
			}
		case secMemory:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.fail(sr.memoryType())
				m.memories++
			}
		case secTable:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				var t table
				sr.refType()
				if sr.err == nil {
					t.ref = sr.b[sr.off-1]
				}
				switch flags := sr.byte(); flags {
				case 0x00:
					t.min = sr.u32()
				case 0x01:
					t.min, t.max, t.hasMax = sr.u32(), sr.u32(), true
				default:
					sr.off--
					sr.fail(fmt.Sprintf("table limits flags %#x", flags))
				}
				m.tables = append(m.tables, t)
			}
		case secTag:
			return nil, nil, unsupportedf("the module declares exception tags; exception handling is not enabled")
		case secStart:
			m.start, m.hasStart = sr.u32(), true
			switch {
			case sr.err != nil:
			case m.start >= m.funcs():
				m.fail(invalidf("start section: function %d out of range (the module has %d functions)", m.start, m.funcs()))
			case m.paramCount(m.typeOf(m.start)) != 0 || len(m.resultTypes(m.typeOf(m.start))) != 0:
				m.fail(invalidf("start section: %s takes parameters or returns results", m.funcName(m.start)))
			}
		case secGlobal:
			n := sr.count()
			if err := over(n, lim.Globals, "globals"); err != nil {
				return nil, nil, err
			}
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.globalMut = append(m.globalMut, sr.globalType())
				m.constExpr(sr, m.importedGlobals)
			}
		case secExport:
			n := sr.count()
			if err := over(n, lim.Exports, "exports"); err != nil {
				return nil, nil, err
			}
			seen := make(map[string]bool, n)
			for i := uint32(0); i < n && sr.err == nil; i++ {
				name := m.utf8Name(sr, "export")
				switch name {
				case InterruptGlobal, OOMGlobal, BudgetGlobal, StackGlobal, StartFunc:
					return nil, nil, unsupportedf("the module already exports %s", name)
				}
				if seen[name] && sr.err == nil {
					m.fail(invalidf("export section: %q exported twice", name))
				}
				seen[name] = true
				kind, idx := sr.byte(), sr.u32()
				if sr.err != nil {
					break
				}
				var have uint32
				switch kind {
				case 0x00:
					have = m.funcs()
					if idx < have {
						m.declare(idx)
						m.exports = append(m.exports, funcExport{idx, name})
					}
				case 0x01:
					have = uint32(len(m.tables))
				case 0x02:
					have = m.memories
				case 0x03:
					have = m.globals()
				case 0x04:
					return nil, nil, unsupportedf("the module exports an exception tag; exception handling is not enabled")
				default:
					sr.off--
					sr.fail(fmt.Sprintf("export kind %#x", kind))
				}
				if idx >= have && sr.err == nil {
					m.fail(invalidf("export %q: %s %d out of range (the module has %s)", name, externName[kind], idx, plural(uint64(have), externName[kind])))
				}
			}
		case secElement:
			var err error
			if m.elems, err = m.elements(sr, lim); err != nil {
				return nil, nil, err
			}
		case secData:
			datas = sr.count()
			if err := over(datas, lim.DataSegments, "data segments"); err != nil {
				return nil, nil, err
			}
			for i := uint32(0); i < datas && sr.err == nil; i++ {
				switch flags := sr.u32(); flags {
				case 0:
					m.needMemory("an active data segment")
					m.constExpr(sr, m.globals())
				case 1:
				case 2:
					if idx := sr.u32(); idx != 0 && sr.err == nil {
						m.fail(invalidf("data segment %d: memory %d out of range", i, idx))
					}
					m.needMemory("an active data segment")
					m.constExpr(sr, m.globals())
				default:
					sr.fail(fmt.Sprintf("data segment flags %d", flags))
				}
				sr.bytes(int(sr.u32()))
			}
		case secDataCnt:
			m.dataCount, m.hasDataCount = sr.u32(), true
		case secCode:
			// The code is checked as it is rewritten.
			m.hasCode = true
		}
		if sr.err != nil {
			return nil, nil, fmt.Errorf("section %d: %w", s.id, sr.err)
		}
		if s.id != secCode && sr.off != len(s.body) {
			m.fail(invalidf("section %d: %d bytes after its content", s.id, len(s.body)-sr.off))
		}
		kept = append(kept, s)
	}
	if m.memories > 1 {
		return nil, nil, unsupportedf("the module has %d memories; at most one is supported", m.memories)
	}
	m.hasMemory = m.memories > 0
	if len(m.funcTypes) > 0 && !m.hasCode {
		m.fail(invalidf("the function section declares %d functions and there is no code section", len(m.funcTypes)))
	}
	if m.hasDataCount && datas != m.dataCount {
		m.fail(invalidf("the data count section says %d data segments; the data section has %d", m.dataCount, datas))
	}
	return m, kept, nil
}

var externName = map[byte]string{0x00: "function", 0x01: "table", 0x02: "memory", 0x03: "global"}

// needMemory fails m unless the module has a memory.
func (m *module) needMemory(what string) {
	if m.memories == 0 {
		m.fail(invalidf("%s, and the module has no memory", what))
	}
}

// elements reads an element section, checking its vector lengths and
// indices, and returns its segment count.
func (m *module) elements(r *reader, lim Limits) (uint32, error) {
	n := r.count()
	if err := over(n, lim.ElementSegments, "element segments"); err != nil {
		return 0, err
	}
	var total uint64
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			r.fail(fmt.Sprintf("element segment flags %d", flags))
			return 0, nil
		}
		if flags&1 == 0 { // active: [table index,] offset expression
			t := uint32(0)
			if flags&2 != 0 {
				t = r.u32()
			}
			if t >= uint32(len(m.tables)) && r.err == nil {
				m.fail(invalidf("element segment %d: table %d out of range (the module has %s)", i, t, plural(uint64(len(m.tables)), "table")))
			}
			m.constExpr(r, m.globals())
		}
		if flags&3 != 0 { // element kind or reference type
			if flags&4 != 0 {
				r.refType()
			} else if k := r.byte(); k != 0x00 && r.err == nil {
				r.off--
				r.fail(fmt.Sprintf("element kind %#x", k))
			}
		}
		items := r.count()
		if total += uint64(items); total > uint64(lim.ElementItems) {
			return 0, limitf("the module's element segments hold more than %d items; at most %d are allowed", lim.ElementItems, lim.ElementItems)
		}
		for j := uint32(0); j < items && r.err == nil; j++ {
			if flags&4 != 0 {
				m.constExpr(r, m.globals())
				continue
			}
			if f := r.u32(); r.err == nil {
				if f >= m.funcs() {
					m.fail(invalidf("element segment %d: function %d out of range (the module has %s)", i, f, plural(uint64(m.funcs()), "function")))
				} else {
					m.declare(f)
				}
			}
		}
	}
	return n, nil
}

// over is the refusal of n entries of a kind past limit, nil within it.
func over(n uint32, limit int, what string) error {
	if int64(n) > int64(limit) {
		return limitf("the module declares %d %s; at most %d are allowed", n, what, limit)
	}
	return nil
}

// constExpr reads a constant expression up to its end, checking that it
// reads only the first globals globals and names functions of the module,
// which it declares for ref.func in code.
func (m *module) constExpr(r *reader, globals uint32) {
	for r.err == nil {
		start := r.off
		op := r.byte()
		switch op {
		case 0x0B:
			return
		case 0x41, 0x42, 0x43, 0x44, 0xD0, 0x23, 0xD2,
			0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E: // consts, ref.null, global.get, ref.func, i32 and i64 add, sub, mul
		case 0xFD:
			if sub := r.u32(); sub != 0x0C && r.err == nil { // v128.const
				r.off = start
				r.fail(fmt.Sprintf("instruction 0xFD %d in a constant expression", sub))
				return
			}
			r.bytes(16)
			continue
		default:
			r.off = start
			r.fail(fmt.Sprintf("instruction %#x in a constant expression", op))
			return
		}
		var o operands
		if err := readImmediates(r, op, &o); err != nil {
			return
		}
		if o.n == 0 {
			continue
		}
		switch i := o.index[0]; o.space[0] {
		case spaceGlobal:
			if i >= globals {
				m.fail(invalidf("a constant expression reads global %d; it may read only the %d globals before it", i, globals))
			}
		case spaceFunc:
			if i >= m.funcs() {
				m.fail(invalidf("a constant expression names function %d, out of range (the module has %s)", i, plural(uint64(m.funcs()), "function")))
			} else {
				m.declare(i)
			}
		}
	}
}

// namesOK reports whether a custom section is anything but a name section
// whose maps have impossible lengths.
func namesOK(body []byte) bool {
	r := &reader{b: body}
	if r.name() != "name" || r.err != nil {
		return true
	}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		switch id {
		case 1: // function names
			n := sub.count()
			for i := uint32(0); i < n && sub.err == nil; i++ {
				sub.u32()
				sub.name()
			}
		case 2: // local names
			n := sub.count()
			for i := uint32(0); i < n && sub.err == nil; i++ {
				sub.u32()
				m := sub.count()
				for j := uint32(0); j < m && sub.err == nil; j++ {
					sub.u32()
					sub.name()
				}
			}
		}
		if sub.err != nil {
			return false
		}
	}
	return r.err == nil
}

func isDWARF(body []byte) bool {
	r := &reader{b: body}
	name := r.name()
	return r.err == nil && strings.HasPrefix(name, ".debug_")
}

// debugName is function f's name in a name section's body, "" if it has none.
func debugName(names []byte, f uint32) string {
	r := &reader{b: names}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		if id != 1 {
			continue
		}
		n := sub.count()
		for i := uint32(0); i < n && sub.err == nil; i++ {
			idx, name := sub.u32(), sub.name()
			if idx == f && sub.err == nil && utf8.ValidString(name) {
				return name
			}
		}
	}
	return ""
}
