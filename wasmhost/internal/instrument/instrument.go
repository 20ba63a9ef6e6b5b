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
	"fmt"
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

// Rewrite returns the instrumented module, within DefaultLimits. It fails
// on a binary it cannot decode, one over the limits, or one that already
// exports a name it would add.
func Rewrite(wasm []byte) ([]byte, Stats, error) { return RewriteWithLimits(wasm, DefaultLimits) }

// RewriteWithLimits is Rewrite within lim.
func RewriteWithLimits(wasm []byte, lim Limits) ([]byte, Stats, error) {
	out, st, invalid, err := rewriteModule(wasm, lim)
	switch {
	case err != nil:
		return nil, st, err
	case invalid != nil:
		return nil, st, invalid
	}
	if err := verify(wasm, out); err != nil {
		return nil, st, &refusal{errRewriteCheck, "the host's rewrite of the module failed its own check, a defect of the host: " + err.Error()}
	}
	return out, st, nil
}

// rewriteModule is RewriteWithLimits, but for a module that it read through
// without an error (its framing and limits are sound) yet found invalid, it
// returns the rewritten module all the same, and why it is invalid apart.
// The fuzz tests use it to compare with wazero's judgment of the module.
func rewriteModule(wasm []byte, lim Limits) (out []byte, st Stats, invalid, err error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, st, nil, invalidf("not a WebAssembly binary")
	}
	if v := binary.LittleEndian.Uint32(wasm[4:8]); v != 1 {
		return nil, st, nil, invalidf("binary format version %d; only version 1 is supported", v)
	}
	var secs []section
	r := &reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		n := r.u32()
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, st, nil, fmt.Errorf("section %d: %w", id, r.err)
		}
		if id == secCustom && isDWARF(body) {
			continue
		}
		secs = append(secs, section{id: id, body: body, off: r.off - len(body)})
	}
	m, secs, err := scan(secs, lim)
	if err != nil {
		return nil, st, nil, err
	}
	if secs, err = capTables(secs, m, lim.TableElements, &st); err != nil {
		return nil, st, nil, err
	}

	g := m.globals()
	interrupt, oom, budget, depth, stackHit := g, g+1, g+2, g+3, g+4
	nfuncs := m.importedFuncs + uint32(len(m.funcTypes))
	slowFunc, growFunc := nfuncs, nfuncs+1
	typeVoid, typeGrow := uint32(len(m.params)), uint32(len(m.params))+1

	for i, s := range secs {
		if s.id != secCode {
			continue
		}
		body, err := rewriteCode(s.body, s.off, m, codeIndices{budget: budget, slow: slowFunc, grow: growFunc, depth: depth, stackHit: stackHit,
			firstBlockType: typeVoid + 2}, lim, &st)
		if err != nil {
			return nil, st, nil, err
		}
		secs[i].body = body
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

	out = make([]byte, 0, len(wasm)+len(wasm)/4+64)
	out = append(out, wasm[:8]...)
	for _, s := range secs {
		out = append(out, s.id)
		out = appendU32(out, uint32(len(s.body)))
		out = append(out, s.body...)
	}
	return out, st, m.err, nil
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
			m.fail(invalidf("table %d: maximum %d is below its minimum %d", i, t.max, t.min))
		}
		mins += uint64(t.min)
	}
	st.TableElements = mins
	if mins > uint64(limit) {
		return nil, limitf("the module's tables declare %d elements at least; at most %d are allowed", mins, limit)
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

func boolCount(b bool) uint32 {
	if b {
		return 1
	}
	return 0
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
