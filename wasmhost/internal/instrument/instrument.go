// Package instrument rewrites a WebAssembly binary so that its host can stop
// it cheaply ("epoch interruption"), so that the Go scheduler can stop it for
// a garbage collection, and so that the host can tell when it ran out of
// memory. See docs/adr/0002-batch-deadline.md.
//
// Every loop header, and the entry of every function that makes calls,
// counts down a module-wide budget:
//
//	global.get $budget; i32.const 1; i32.sub; global.set $budget
//	global.get $budget; i32.eqz; if; call $slow; end
//
// so that a loop, however tight, and a call chain, however deep, reach
// $slow (an added function) every Budget steps. $slow traps with
// unreachable if the exported global InterruptGlobal is set; otherwise it
// yields to the host (a memory.grow of 0 pages, which wazero runs in Go:
// there the goroutine can be preempted, so that a stop-the-world pause of
// the host's garbage collector does not wait for the end of the guest's
// call) and refills the budget. To interrupt the guest the host sets
// InterruptGlobal to 1 and BudgetGlobal to 1, from any goroutine: the guest
// traps at its next loop iteration or call.
//
// Every memory.grow becomes a call to an added function that does the grow
// and sets the exported global OOMGlobal to 1 when it fails, so that a guest
// that dies after a failed grow (a Go guest prints "out of memory" and
// aborts) is recognised as having hit its memory cap. A start section
// becomes the export StartFunc, for the host to run under its deadline.
//
// Wasm's structured control flow keeps every change local: only function
// bodies and section sizes change; no branch target, function, type, global
// or local index moves (new entries are appended at the ends of their index
// spaces). DWARF custom sections, whose code offsets would be wrong after
// the rewrite, are dropped; the name section is kept.
//
// Rewrite also guards wazero's decoder, which allocates by the lengths a
// binary declares before reading the elements: it refuses vectors longer
// than the bytes left and absurd numbers of locals.
//
// The rewriter decodes the instruction set wazero accepts by default
// (WebAssembly 2.0: MVP, sign extension, non-trapping conversions, bulk
// memory, reference types, multi-value, SIMD) and refuses anything else.
package instrument

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The names under which the rewrite exports what it adds.
const (
	InterruptGlobal = "__sluice_interrupt"
	// StackGlobal is set to 1 when the guest traps for passing
	// Limits.StackUnits.
	StackGlobal  = "__sluice_stack"
	BudgetGlobal = "__sluice_budget"
	OOMGlobal    = "__sluice_oom"
	// StartFunc is the export that replaces a start section, so that the
	// host runs the start function under a deadline instead of inside
	// instantiation, where nothing can interrupt it.
	StartFunc = "__sluice_start"
)

// Budget is how many loop iterations and calls (of functions that make
// calls) a guest runs between two yields to the host.
const Budget = 1 << 14

// maxLocals bounds a function's locals (wazero allocates them up front; a
// 4-byte declaration can ask for 2^32). Other runtimes use the same bound.
const maxLocals = 50000

// maxTotalLocals bounds the locals of all functions together, for the
// same reason (a Go guest of 2 MB declares a few hundred thousand).
const maxTotalLocals = 4 << 20

// Limits bound a module's structure, so that what wazero spends compiling
// and instantiating it is bounded whatever the binary (a few MB of deeply
// nested blocks, a huge br_table or one huge function compile for minutes
// otherwise). Rewrite refuses a module over them, naming the limit.
type Limits struct {
	// TableElements bounds the elements of all tables together: the
	// declared minimums must fit, and each table's maximum is lowered so
	// that the maximums sum to at most TableElements, which bounds
	// table.grow (wazero keeps 8 bytes per element).
	TableElements uint32
	// Functions bounds the functions a module defines.
	Functions int
	// FunctionBytes bounds one function body (locals and code), in bytes.
	FunctionBytes int
	// Nesting bounds how deep blocks, loops and ifs nest in a function.
	Nesting int
	// BrTableTargets bounds the targets of one br_table.
	BrTableTargets int
	// FunctionCost and ModuleCost bound the estimated compile cost of one
	// function and of all of them: a body byte costs 1, a br_table target
	// BlockCost, and a block, loop or if BlockCost plus its depth/16
	// (measured with wazero 1.12's compiler, a byte of straight-line code
	// takes about 0.4 µs to compile, a br_table target about 10 µs, a block
	// 16 µs at depth 256 and 30 µs at depth 1024).
	FunctionCost, ModuleCost int64
	// StackUnits bounds the call stack: a function that makes calls adds
	// its frame's weight (1 + its params and locals/4 + its body bytes/4096,
	// in units of about 64 bytes of wazero's stack) while it runs, and a
	// call that would pass StackUnits traps (setting StackGlobal).
	StackUnits uint32
}

// BlockCost is what a block, loop, if or br_table target adds to the
// compile cost of Limits.FunctionCost and ModuleCost.
const BlockCost = 40

// DefaultLimits are the limits of Rewrite. A standard Go guest of 3 MB
// (examples/log-normalize) has tables of 6,012 elements, 1,916 functions,
// 1.8 MB of code, a largest body of 29 KB, blocks nested 549 deep, 57,417
// blocks, br_tables of up to 895 targets and 64,481 in all: a cost of
// about 7M, 0.1M for its costliest function.
var DefaultLimits = Limits{
	TableElements:  1 << 20,
	Functions:      100_000,
	FunctionBytes:  512 << 10,
	Nesting:        1024,
	BrTableTargets: 4096,
	FunctionCost:   2_000_000,
	ModuleCost:     32_000_000,
	StackUnits:     1 << 16,
}

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

// Stats says what Rewrite changed.
type Stats struct {
	Functions  int  // function bodies rewritten
	Loops      int  // loop headers that got a check
	Entries    int  // function entries that got a check
	MemoryGrow int  // memory.grow instructions redirected
	Start      bool // the start section became the StartFunc export

	// What the module has, against Limits.
	TableElements    uint64 // the tables' declared minimums, summed
	MaxFunctionBytes int
	MaxNesting       int
	MaxBrTable       int
	Blocks           int   // blocks, loops and ifs
	BrTableTargets   int   // of all br_tables
	CodeBytes        int   // of all function bodies
	Cost             int64 // estimated compile cost (see Limits.ModuleCost)
	MaxFunctionCost  int64

	blockTypes [][]byte // result types of the multi-value depth blocks, as added types
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

// Rewrite returns the instrumented module, within DefaultLimits. It fails
// on a binary it cannot decode, one over the limits, or one that already
// exports a name it would add.
func Rewrite(wasm []byte) ([]byte, Stats, error) { return RewriteWithLimits(wasm, DefaultLimits) }

// RewriteWithLimits is Rewrite within lim.
func RewriteWithLimits(wasm []byte, lim Limits) ([]byte, Stats, error) {
	var st Stats
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, st, errors.New("not a WebAssembly binary")
	}
	if v := binary.LittleEndian.Uint32(wasm[4:8]); v != 1 {
		return nil, st, fmt.Errorf("binary format version %d; only version 1 is supported", v)
	}
	var secs []section
	r := &reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		n := r.u32()
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, st, fmt.Errorf("section %d: %w", id, r.err)
		}
		if id == secCustom && isDWARF(body) {
			continue
		}
		secs = append(secs, section{id: id, body: body})
	}
	m, secs, err := scan(secs)
	if err != nil {
		return nil, st, err
	}
	if len(m.funcTypes) > lim.Functions {
		return nil, st, fmt.Errorf("the module defines %d functions; at most %d are allowed", len(m.funcTypes), lim.Functions)
	}
	if secs, err = capTables(secs, m, lim.TableElements, &st); err != nil {
		return nil, st, err
	}

	g := m.importedGlobals + m.definedGlobals
	interrupt, oom, budget, depth, stackHit := g, g+1, g+2, g+3, g+4
	nfuncs := m.importedFuncs + uint32(len(m.funcTypes))
	slowFunc, growFunc := nfuncs, nfuncs+1
	typeVoid, typeGrow := uint32(len(m.params)), uint32(len(m.params))+1

	for i, s := range secs {
		if s.id != secCode {
			continue
		}
		body, err := rewriteCode(s.body, m, codeIndices{budget: budget, slow: slowFunc, grow: growFunc, depth: depth, stackHit: stackHit,
			firstBlockType: typeVoid + 2}, lim, &st)
		if err != nil {
			return nil, st, err
		}
		secs[i].body = body
	}
	if st.MemoryGrow > 0 && !m.hasMemory {
		return nil, st, errors.New("memory.grow in a module without a memory")
	}

	if m.hasStart {
		st.Start = true
		kept := secs[:0]
		for _, s := range secs {
			if s.id != secStart {
				kept = append(kept, s)
			}
		}
		secs = kept
	}
	secs = edit(secs, secGlobal, func(b []byte) []byte {
		return appendVec(b, func(out []byte) []byte {
			out = append(out, 0x7F, 0x01, 0x41, 0x00, 0x0B) // $interrupt (mut i32) 0
			out = append(out, 0x7F, 0x01, 0x41, 0x00, 0x0B) // $oom (mut i32) 0
			out = append(out, 0x7F, 0x01, 0x41)             // $budget (mut i32) Budget
			out = appendS32(out, Budget)
			out = append(out, 0x0B)
			out = append(out, 0x7F, 0x01, 0x41, 0x00, 0x0B)  // $depth (mut i32) 0
			return append(out, 0x7F, 0x01, 0x41, 0x00, 0x0B) // $stackHit (mut i32) 0
		}, 5)
	})
	secs = edit(secs, secExport, func(b []byte) []byte {
		return appendVec(b, func(out []byte) []byte {
			for _, e := range []struct {
				name string
				idx  uint32
			}{{InterruptGlobal, interrupt}, {OOMGlobal, oom}, {BudgetGlobal, budget}, {StackGlobal, stackHit}} {
				out = appendName(out, e.name)
				out = append(out, 0x03)
				out = appendU32(out, e.idx)
			}
			if m.hasStart {
				out = appendName(out, StartFunc)
				out = append(out, 0x00)
				out = appendU32(out, m.start)
			}
			return out
		}, 4+boolCount(m.hasStart))
	})
	secs = edit(secs, secType, func(b []byte) []byte {
		return appendVec(b, func(out []byte) []byte {
			out = append(out, 0x60, 0x00, 0x00)             // () -> ()
			out = append(out, 0x60, 0x01, 0x7F, 0x01, 0x7F) // (i32) -> i32
			for _, res := range st.blockTypes {             // () -> results, for the depth blocks
				out = append(out, 0x60, 0x00)
				out = appendU32(out, uint32(len(res)))
				out = append(out, res...)
			}
			return out
		}, 2+uint32(len(st.blockTypes)))
	})
	nadd := uint32(1)
	if m.hasMemory {
		nadd = 2
	}
	secs = edit(secs, secFunction, func(b []byte) []byte {
		return appendVec(b, func(out []byte) []byte {
			out = appendU32(out, typeVoid)
			if m.hasMemory {
				out = appendU32(out, typeGrow)
			}
			return out
		}, nadd)
	})
	secs = edit(secs, secCode, func(b []byte) []byte {
		return appendVec(b, func(out []byte) []byte {
			out = appendFunc(out, slowBody(interrupt, budget, m.hasMemory))
			if m.hasMemory {
				out = appendFunc(out, growBody(oom))
			}
			return out
		}, nadd)
	})

	out := make([]byte, 0, len(wasm)+len(wasm)/4+64)
	out = append(out, wasm[:8]...)
	for _, s := range secs {
		out = append(out, s.id)
		out = appendU32(out, uint32(len(s.body)))
		out = append(out, s.body...)
	}
	return out, st, nil
}

// capTables refuses tables whose declared minimums sum to more than
// limit elements and rewrites the table section so that each table's
// maximum leaves the others their share: the maximums sum to at most
// limit, and table.grow (which wazero refuses past a table's maximum)
// cannot pass it.
func capTables(secs []section, m *module, limit uint32, st *Stats) ([]section, error) {
	if len(m.tables) == 0 {
		return secs, nil
	}
	var mins uint64
	for i, t := range m.tables {
		if t.hasMax && t.max < t.min {
			return nil, fmt.Errorf("table %d: maximum %d is below its minimum %d", i, t.max, t.min)
		}
		mins += uint64(t.min)
	}
	st.TableElements = mins
	if mins > uint64(limit) {
		return nil, fmt.Errorf("the module's tables declare %d elements at least; at most %d are allowed", mins, limit)
	}
	share := (uint64(limit) - mins) / uint64(len(m.tables))
	body := appendU32(nil, uint32(len(m.tables)))
	for _, t := range m.tables {
		hi := uint64(t.min) + share
		if t.hasMax && uint64(t.max) < hi {
			hi = uint64(t.max)
		}
		body = append(body, t.ref, 0x01)
		body = appendU32(body, t.min)
		body = appendU32(body, uint32(max(hi, uint64(t.min))))
	}
	for i := range secs {
		if secs[i].id == secTable {
			secs[i].body = body
		}
	}
	return secs, nil
}

// slowBody is $slow: trap if interrupted, else yield to the host and
// refill the budget.
func slowBody(interrupt, budget uint32, yield bool) []byte {
	f := []byte{0x00}                     // no locals
	f = append(f, 0x23)                   // global.get $interrupt
	f = appendU32(f, interrupt)           //
	f = append(f, 0x04, 0x40, 0x00, 0x0B) // if; unreachable; end
	if yield {
		f = append(f, 0x41, 0x00, 0x40, 0x00, 0x1A) // i32.const 0; memory.grow 0; drop
	}
	f = append(f, 0x41) // i32.const Budget
	f = appendS32(f, Budget)
	f = append(f, 0x24) // global.set $budget
	f = appendU32(f, budget)
	return append(f, 0x0B)
}

// growBody is the memory.grow wrapper: the grow, and $oom = 1 if it fails.
func growBody(oom uint32) []byte {
	f := []byte{0x01, 0x01, 0x7F} // one local i32: the result
	f = append(f,
		0x20, 0x00, // local.get 0
		0x40, 0x00, // memory.grow 0
		0x22, 0x01, // local.tee 1
		0x41, 0x7F, // i32.const -1
		0x46,       // i32.eq
		0x04, 0x40, // if
		0x41, 0x01, // i32.const 1
		0x24) // global.set $oom
	f = appendU32(f, oom)
	return append(f, 0x0B, 0x20, 0x01, 0x0B) // end; local.get 1; end
}

func appendFunc(out, body []byte) []byte {
	out = appendU32(out, uint32(len(body)))
	return append(out, body...)
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

func boolCount(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func isDWARF(body []byte) bool {
	r := &reader{b: body}
	name := r.name()
	return r.err == nil && strings.HasPrefix(name, ".debug_")
}

// edit applies f to the body of the section with the given id, creating an
// empty one (a vector of 0 entries) in its place when there is none.
func edit(secs []section, id byte, f func([]byte) []byte) []section {
	for i := range secs {
		if secs[i].id == id {
			secs[i].body = f(secs[i].body)
			return secs
		}
	}
	at := len(secs)
	for i, s := range secs {
		if s.id != secCustom && order[s.id] > order[id] {
			at = i
			break
		}
	}
	s := section{id: id, body: f([]byte{0x00})}
	return append(secs[:at], append([]section{s}, secs[at:]...)...)
}

// appendVec adds n entries, written by add, to the vector that is body.
func appendVec(body []byte, add func([]byte) []byte, n uint32) []byte {
	r := &reader{b: body}
	count := r.u32()
	out := appendU32(nil, count+n)
	out = append(out, body[r.off:]...)
	return add(out)
}

// countSeq is the countdown at a loop header and at the entry of a
// function that makes calls. It uses no added local: wazevo keeps a local
// that changes in a loop live across the whole function, which costs more
// than the global's load and store (measured: +65% on a Go guest against
// +15%).
func countSeq(budget, slow uint32) []byte {
	b := []byte{0x23} // global.get $budget
	b = appendU32(b, budget)
	b = append(b, 0x41, 0x01, 0x6B, 0x24) // i32.const 1; i32.sub; global.set $budget
	b = appendU32(b, budget)
	b = append(b, 0x23) // global.get $budget: the value just set, not reloaded
	b = appendU32(b, budget)
	b = append(b, 0x45, 0x04, 0x40, 0x10) // i32.eqz; if; call $slow
	b = appendU32(b, slow)
	return append(b, 0x0B) // end
}

// rewriteCode rewrites every function body of a code section.
// codeIndices are what rewriteCode adds calls and checks to.
type codeIndices struct {
	budget, slow, grow, depth, stackHit uint32 // global and function indices
	firstBlockType                      uint32 // type index of Stats.blockTypes[0]
}

// depthEntry adds w to $depth and traps if it passes limit.
func depthEntry(c codeIndices, w, limit uint32) []byte {
	b := []byte{0x23}
	b = appendU32(b, c.depth)
	b = append(b, 0x41)
	b = appendS32(b, int32(w))
	b = append(b, 0x6A, 0x24) // i32.add; global.set
	b = appendU32(b, c.depth)
	b = append(b, 0x23)
	b = appendU32(b, c.depth)
	b = append(b, 0x41)
	b = appendS32(b, int32(limit))
	b = append(b, 0x4B, 0x04, 0x40, 0x41, 0x01, 0x24) // i32.gt_u; if; i32.const 1; global.set $stackHit
	b = appendU32(b, c.stackHit)
	return append(b, 0x00, 0x0B) // unreachable; end
}

// depthExit takes w from $depth.
func depthExit(c codeIndices, w uint32) []byte {
	b := []byte{0x23}
	b = appendU32(b, c.depth)
	b = append(b, 0x41)
	b = appendS32(b, int32(w))
	b = append(b, 0x6B, 0x24) // i32.sub; global.set
	return appendU32(b, c.depth)
}

func rewriteCode(sec []byte, m *module, c codeIndices, lim Limits, st *Stats) ([]byte, error) {
	budget, slowFunc := c.budget, c.slow
	call := appendU32([]byte{0x10}, c.grow)
	r := &reader{b: sec}
	n := r.count()
	if r.err != nil {
		return nil, fmt.Errorf("code section: %w", r.err)
	}
	if int(n) != len(m.funcTypes) {
		return nil, fmt.Errorf("code section has %d functions; the function section declares %d", n, len(m.funcTypes))
	}
	out := make([]byte, 0, len(sec)+len(sec)/4)
	out = appendU32(out, n)
	var body, code []byte
	var totalLocals uint64
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		fb := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("code section: function %d: %w", i, r.err)
		}
		if len(fb) > lim.FunctionBytes {
			return nil, fmt.Errorf("code section: function %d has a body of %d bytes; at most %d are allowed", i, len(fb), lim.FunctionBytes)
		}
		st.MaxFunctionBytes = max(st.MaxFunctionBytes, len(fb))
		fr := &reader{b: fb}
		ndecl := fr.count()
		var locals uint64
		for j := uint32(0); j < ndecl && fr.err == nil; j++ {
			locals += uint64(fr.u32())
			fr.valType()
		}
		if fr.err != nil {
			return nil, fmt.Errorf("code section: function %d locals: %w", i, fr.err)
		}
		if locals > maxLocals {
			return nil, fmt.Errorf("code section: function %d has %d locals; at most %d are allowed", i, locals, maxLocals)
		}
		if totalLocals += locals; totalLocals > maxTotalLocals {
			return nil, fmt.Errorf("code section: more than %d locals in all", maxTotalLocals)
		}
		check := countSeq(budget, slowFunc)
		res, err := rewriteBody(fb[fr.off:], check, call, nil, code[:0], lim)
		if err != nil {
			return nil, fmt.Errorf("code section: function %d: %w", i, err)
		}
		var w uint32
		if res.calls {
			// A function that makes calls counts its frame in $depth while
			// it runs: on entry, and back before each return and after a
			// block around its body that every other exit (the end, a
			// branch to the function's label) leaves.
			typ := m.funcTypes[i]
			w = uint32(1 + (uint64(m.params[typ])+locals)/4 + uint64(len(fb))/4096)
			if res, err = rewriteBody(fb[fr.off:], check, call, depthExit(c, w), code[:0], lim); err != nil {
				return nil, fmt.Errorf("code section: function %d: %w", i, err)
			}
		}
		code = res.code
		st.MaxNesting = max(st.MaxNesting, res.nesting)
		st.MaxBrTable = max(st.MaxBrTable, res.brTable)
		st.Blocks += res.blocks
		st.BrTableTargets += res.targets
		st.CodeBytes += len(fb)
		cost := int64(len(fb)) + BlockCost*int64(res.blocks+res.targets) + res.depthCost
		if cost > lim.FunctionCost {
			return nil, fmt.Errorf("code section: function %d would cost %d to compile (%d bytes, %d blocks, %d br_table targets); at most %d is allowed",
				i, cost, len(fb), res.blocks, res.targets, lim.FunctionCost)
		}
		st.MaxFunctionCost = max(st.MaxFunctionCost, cost)
		if st.Cost += cost; st.Cost > lim.ModuleCost {
			return nil, fmt.Errorf("code section: the functions up to %d would cost more than %d to compile (%d bytes of code, %d blocks, %d br_table targets so far)",
				i, lim.ModuleCost, st.CodeBytes, st.Blocks, st.BrTableTargets)
		}
		st.Functions++
		st.Loops += res.loops
		st.MemoryGrow += res.grows
		body = append(body[:0], fb[:fr.off]...)
		if res.calls {
			body = append(body, check...)
			st.Entries++
			if len(code) == 0 || code[len(code)-1] != 0x0B {
				return nil, fmt.Errorf("code section: function %d does not end with end", i)
			}
			body = append(body, depthEntry(c, w, lim.StackUnits)...)
			body = append(body, 0x02)
			body = appendBlockType(body, m.results[m.funcTypes[i]], c.firstBlockType, st)
			body = append(body, code...) // its end closes the block
			body = append(body, depthExit(c, w)...)
			body = append(body, 0x0B)
		} else {
			body = append(body, code...)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.off != len(sec) {
		return nil, fmt.Errorf("code section: %d bytes after the last function", len(sec)-r.off)
	}
	return out, nil
}

type bodyResult struct {
	code             []byte
	loops, grows     int
	calls            bool
	nesting, brTable int   // the deepest nesting and the largest br_table
	blocks, targets  int   // blocks, loops and ifs; br_table targets
	depthCost        int64 // the blocks' depths/16, summed
}

// appendBlockType appends the block type of a block with the given
// results: empty, one value type, or a type index (s33) of an added type.
func appendBlockType(b, results []byte, first uint32, st *Stats) []byte {
	switch len(results) {
	case 0:
		return append(b, 0x40)
	case 1:
		return append(b, results[0])
	}
	k := -1
	for j, r := range st.blockTypes {
		if string(r) == string(results) {
			k = j
		}
	}
	if k < 0 {
		k = len(st.blockTypes)
		st.blockTypes = append(st.blockTypes, results)
	}
	return appendS32(b, int32(first)+int32(k))
}

// rewriteBody copies one function's instructions into out, adding a check
// after each loop header, redirecting memory.grow and, if beforeReturn is
// not nil, putting it before each return; it checks the body against lim.
func rewriteBody(in, check, call, beforeReturn, out []byte, lim Limits) (bodyResult, error) {
	var res bodyResult
	r := &reader{b: in}
	depth := 0
	for r.off < len(in) && r.err == nil {
		start := r.off
		op := r.byte()
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			if depth++; depth > lim.Nesting {
				return res, fmt.Errorf("at offset %d: blocks nest more than %d deep", start, lim.Nesting)
			}
			res.nesting = max(res.nesting, depth)
			res.blocks++
			res.depthCost += int64(depth / 16)
			if op == 0x03 { // loop bt
				r.blockType()
				out = append(out, in[start:r.off]...)
				out = append(out, check...)
				res.loops++
				continue
			}
		case op == 0x0B:
			depth--
		case op == 0x0F && beforeReturn != nil: // return
			out = append(out, beforeReturn...)
		case op == 0x0E: // br_table: check its size before skipping it
			save := r.off
			n := r.count()
			if r.err == nil && int64(n) > int64(lim.BrTableTargets) {
				return res, fmt.Errorf("at offset %d: a br_table of %d targets; at most %d are allowed", start, n, lim.BrTableTargets)
			}
			res.brTable = max(res.brTable, int(n))
			res.targets += int(n)
			r.off = save
		case op == 0x40: // memory.grow memidx
			if m := r.u32(); m != 0 && r.err == nil {
				return res, fmt.Errorf("memory.grow of memory %d at offset %d: only one memory is supported", m, start)
			}
			out = append(out, call...)
			res.grows++
			continue
		case op == 0x10 || op == 0x11:
			res.calls = true
		}
		if err := skipImmediates(r, op); err != nil {
			return res, fmt.Errorf("at offset %d: %w", start, err)
		}
		out = append(out, in[start:r.off]...)
	}
	if r.err != nil {
		return res, r.err
	}
	res.code = out
	return res, nil
}

// skipImmediates reads the immediates of the instruction whose opcode
// (already read) is op.
func skipImmediates(r *reader, op byte) error {
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0B || op == 0x0F ||
		op == 0x1A || op == 0x1B || op == 0xD1 || (op >= 0x45 && op <= 0xC4):
		// no immediates
	case op == 0x02 || op == 0x04: // block, if
		r.blockType()
	case op == 0x0C || op == 0x0D || op == 0x10 || op == 0xD2 || // br, br_if, call, ref.func
		(op >= 0x20 && op <= 0x26) || op == 0x3F: // locals, globals, table.get/set, memory.size
		r.u32()
	case op == 0x0E: // br_table
		n := r.count()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11: // call_indirect typeidx tableidx
		r.u32()
		r.u32()
	case op == 0x1C: // select t*
		n := r.count()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valType()
		}
	case op >= 0x28 && op <= 0x3E: // loads and stores
		r.memArg()
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xD0: // ref.null t
		r.refType()
	case op == 0xFC:
		sub := r.u32()
		switch {
		case sub <= 7: // saturating truncations
		case sub == 8: // memory.init data mem
			r.u32()
			r.u32()
		case sub == 9 || sub == 13 || (sub >= 15 && sub <= 17): // data.drop, elem.drop, table.grow/size/fill
			r.u32()
		case sub == 10 || sub == 12 || sub == 14: // memory.copy, table.init, table.copy
			r.u32()
			r.u32()
		case sub == 11: // memory.fill
			r.u32()
		default:
			return fmt.Errorf("unsupported instruction 0xFC %d", sub)
		}
	case op == 0xFD:
		sub := r.u32()
		switch {
		case sub <= 0x0B || sub == 0x5C || sub == 0x5D: // v128 loads and store
			r.memArg()
		case sub == 0x0C || sub == 0x0D: // v128.const, i8x16.shuffle
			r.bytes(16)
		case sub >= 0x15 && sub <= 0x22: // extract/replace lane
			r.byte()
		case sub >= 0x54 && sub <= 0x5B: // load/store lane
			r.memArg()
			r.byte()
		case sub <= 0xFF:
			// no immediates
		default:
			return fmt.Errorf("unsupported instruction 0xFD %d", sub)
		}
	default:
		return fmt.Errorf("unsupported instruction %#x (a WebAssembly feature the host does not enable)", op)
	}
	return r.err
}

// reader decodes the binary format. The first error sticks.
type reader struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("unexpected end")

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("bad %s at offset %d", what, r.off)
	}
	r.off = len(r.b)
}

func (r *reader) byte() byte {
	if r.off >= len(r.b) {
		if r.err == nil {
			r.err = errShort
		}
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || n > len(r.b)-r.off {
		if r.err == nil {
			r.err = errShort
		}
		r.off = len(r.b)
		return nil
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}

func (r *reader) u32() uint32 {
	var v uint32
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(c&0x7F) << shift
		if c&0x80 == 0 {
			return v
		}
	}
	r.fail("LEB128 u32")
	return 0
}

// count reads a vector's length and checks it against the bytes left,
// given that an element takes at least one byte. wazero's decoder allocates
// by such counts before reading the elements, so a tiny module with a huge
// count would make it allocate gigabytes: Rewrite runs first and refuses it.
func (r *reader) count() uint32 {
	n := r.u32()
	if r.err == nil && uint64(n) > uint64(len(r.b)-r.off) {
		r.fail(fmt.Sprintf("vector length %d (more than the %d bytes left)", n, len(r.b)-r.off))
		return 0
	}
	return n
}

func (r *reader) sleb(bits int) {
	for n := 0; n < (bits+6)/7; n++ {
		c := r.byte()
		if r.err != nil || c&0x80 == 0 {
			return
		}
	}
	r.fail("LEB128 integer")
}

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

func (r *reader) valType() {
	switch c := r.byte(); c {
	case 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
	default:
		r.off--
		r.fail(fmt.Sprintf("value type %#x", c))
	}
}

func (r *reader) refType() {
	switch c := r.byte(); c {
	case 0x70, 0x6F:
	default:
		r.off--
		r.fail(fmt.Sprintf("reference type %#x", c))
	}
}

func (r *reader) limits() {
	switch flags := r.byte(); flags {
	case 0x00:
		r.u32()
	case 0x01, 0x03:
		r.u32()
		r.u32()
	default:
		r.fail(fmt.Sprintf("limits flags %#x", flags))
	}
}

func (r *reader) memArg() {
	r.u32()
	r.u32()
}

// blockType reads a block type: empty (0x40), a value type, or a type index
// as a signed LEB128 (s33).
func (r *reader) blockType() {
	if r.off >= len(r.b) {
		r.byte()
		return
	}
	switch r.b[r.off] {
	case 0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F:
		r.off++
		return
	}
	r.sleb(33)
}

// appendU32 appends v as unsigned LEB128, which is Go's uvarint.
func appendU32(b []byte, v uint32) []byte { return binary.AppendUvarint(b, uint64(v)) }

// appendS32 appends v as signed LEB128.
func appendS32(b []byte, v int32) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}
