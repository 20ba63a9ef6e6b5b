package instrument

import (
	"errors"
	"fmt"
	"strings"
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
}

// module is what Rewrite learns about the module before rewriting its code.
type module struct {
	params          []uint32 // parameter count of each type
	results         [][]byte // result types of each type
	funcTypes       []uint32 // type index of each defined function
	importedFuncs   uint32
	importedGlobals uint32
	definedGlobals  uint32
	hasMemory       bool
	start           uint32
	hasStart        bool
	tables          []table
}

// table is a table the module defines.
type table struct {
	ref      byte
	min, max uint32
	hasMax   bool
}

// scan reads every section but the code, checking every vector length
// before wazero allocates by it, and returns what the rewrite needs to know
// and the sections to keep.
func scan(secs []section) (*module, []section, error) {
	m := &module{}
	kept := secs[:0]
	for _, s := range secs {
		sr := &reader{b: s.body}
		switch s.id {
		case secCustom:
			if !namesOK(s.body) {
				continue // a name section wazero would choke on: drop it
			}
		case secType:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				if f := sr.byte(); f != 0x60 && sr.err == nil {
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
			for i := uint32(0); i < n && sr.err == nil; i++ {
				sr.name()
				sr.name()
				switch kind := sr.byte(); kind {
				case 0x00: // func
					sr.u32()
					m.importedFuncs++
				case 0x01: // table
					return nil, nil, errors.New("the module imports a table; a module must define its own")
				case 0x02: // memory
					sr.limits()
					m.hasMemory = true
				case 0x03: // global
					sr.valType()
					sr.byte()
					m.importedGlobals++
				case 0x04: // tag
					sr.byte()
					sr.u32()
				default:
					sr.fail(fmt.Sprintf("import kind %#x", kind))
				}
			}
		case secFunction:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				m.funcTypes = append(m.funcTypes, sr.u32())
			}
		case secMemory:
			if sr.count() > 0 {
				m.hasMemory = true
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
					sr.fail(fmt.Sprintf("table limits flags %#x", flags))
				}
				m.tables = append(m.tables, t)
			}
		case secTag:
			sr.count()
		case secStart:
			m.start, m.hasStart = sr.u32(), true
		case secGlobal:
			m.definedGlobals = sr.count()
		case secExport:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				name := sr.name()
				switch name {
				case InterruptGlobal, OOMGlobal, BudgetGlobal, StackGlobal, StartFunc:
					return nil, nil, fmt.Errorf("the module already exports %s", name)
				}
				sr.byte()
				sr.u32()
			}
		case secElement:
			checkElements(sr)
		case secData:
			n := sr.count()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				switch flags := sr.u32(); flags {
				case 0:
					constExpr(sr)
				case 1:
				case 2:
					sr.u32()
					constExpr(sr)
				default:
					sr.fail(fmt.Sprintf("data segment flags %d", flags))
				}
				sr.bytes(int(sr.u32()))
			}
		case secDataCnt:
			sr.u32()
		case secCode:
			// The code is checked as it is rewritten.
		default:
			return nil, nil, fmt.Errorf("unknown section id %d", s.id)
		}
		if sr.err != nil {
			return nil, nil, fmt.Errorf("section %d: %w", s.id, sr.err)
		}
		switch s.id {
		case secType, secImport, secFunction, secTable, secStart, secExport, secElement, secData, secDataCnt:
			if sr.off != len(s.body) {
				return nil, nil, fmt.Errorf("section %d: %d bytes after its content", s.id, len(s.body)-sr.off)
			}
		}
		kept = append(kept, s)
	}
	for _, t := range m.funcTypes {
		if t >= uint32(len(m.params)) {
			return nil, nil, fmt.Errorf("function section: type index %d out of range", t)
		}
	}
	return m, kept, nil
}

// checkElements reads an element section, checking its vector lengths.
func checkElements(r *reader) {
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			r.fail(fmt.Sprintf("element segment flags %d", flags))
			return
		}
		if flags&1 == 0 { // active: [table index,] offset expression
			if flags&2 != 0 {
				r.u32()
			}
			constExpr(r)
		}
		if flags&3 != 0 { // element kind or reference type
			r.byte()
		}
		m := r.count()
		for j := uint32(0); j < m && r.err == nil; j++ {
			if flags&4 != 0 {
				constExpr(r)
			} else {
				r.u32()
			}
		}
	}
}

// constExpr reads a constant expression, up to and including its end.
func constExpr(r *reader) {
	for r.err == nil {
		op := r.byte()
		if op == 0x0B {
			return
		}
		if err := skipImmediates(r, op); err != nil {
			r.fail(err.Error())
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
