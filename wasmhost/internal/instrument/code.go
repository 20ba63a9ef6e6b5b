package instrument

import "fmt"

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

// rewriteCode checks and rewrites every function body of a code section.
func rewriteCode(sec []byte, secOff int, m *module, c codeIndices, lim Limits, st *Stats) ([]byte, error) {
	budget, slowFunc := c.budget, c.slow
	call := appendU32([]byte{0x10}, c.grow)
	r := &reader{b: sec}
	n := r.count()
	if r.err != nil {
		return nil, fmt.Errorf("code section: %w", r.err)
	}
	if int(n) != len(m.funcTypes) {
		m.fail(invalidf("code section has %d functions; the function section declares %d", n, len(m.funcTypes)))
	}
	out := make([]byte, 0, len(sec)+len(sec)/4)
	out = appendU32(out, n)
	var body, code []byte
	var totalLocals uint64
	blocks := make([]byte, 0, 64)
	for i := uint32(0); i < n; i++ {
		f := m.importedFuncs + i
		size := r.u32()
		fb := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("code section: %s: %w", m.funcName(f), r.err)
		}
		if len(fb) > lim.FunctionBytes {
			return nil, limitf("code section: %s has a body of %d bytes; at most %d are allowed", m.funcName(f), len(fb), lim.FunctionBytes)
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
			return nil, fmt.Errorf("code section: %s locals: %w", m.funcName(f), fr.err)
		}
		if locals > maxLocals {
			return nil, limitf("code section: %s has %d locals; at most %d are allowed", m.funcName(f), locals, maxLocals)
		}
		if totalLocals += locals; totalLocals > maxTotalLocals {
			return nil, limitf("code section: more than %d locals in all", maxTotalLocals)
		}
		typ := uint32(len(m.params)) // out of range: the function section is short
		if i < uint32(len(m.funcTypes)) {
			typ = m.funcTypes[i]
		}
		fn := function{m: m, index: f, locals: uint64(m.paramCount(typ)) + locals, blocks: blocks[:0],
			off: secOff + r.off - len(fb) + fr.off}
		check := countSeq(budget, slowFunc)
		res, err := rewriteBody(fb[fr.off:], &fn, check, call, nil, code[:0], lim)
		if err != nil {
			return nil, fmt.Errorf("code section: %s: %w", m.funcName(f), err)
		}
		var w uint32
		if res.calls {
			// A function that makes calls counts its frame in $depth while
			// it runs: on entry, and back before each return and after a
			// block around its body that every other exit (the end, a
			// branch to the function's label) leaves.
			w = uint32(1 + fn.locals/4 + uint64(len(fb))/4096)
			fn.checked = true
			if res, err = rewriteBody(fb[fr.off:], &fn, check, call, depthExit(c, w), code[:0], lim); err != nil {
				return nil, fmt.Errorf("code section: %s: %w", m.funcName(f), err)
			}
		}
		blocks = fn.blocks
		code = res.code
		st.MaxNesting = max(st.MaxNesting, res.nesting)
		st.MaxBrTable = max(st.MaxBrTable, res.brTable)
		st.Blocks += res.blocks
		st.BrTableTargets += res.targets
		st.CodeBytes += len(fb)
		cost := int64(len(fb)) + BlockCost*int64(res.blocks+res.targets) + res.depthCost
		if cost > lim.FunctionCost {
			return nil, limitf("code section: %s would cost %d to compile (%d bytes, %d blocks, %d br_table targets); at most %d is allowed",
				m.funcName(f), cost, len(fb), res.blocks, res.targets, lim.FunctionCost)
		}
		st.MaxFunctionCost = max(st.MaxFunctionCost, cost)
		if st.Cost += cost; st.Cost > lim.ModuleCost {
			return nil, limitf("code section: the functions up to %d would cost more than %d to compile (%d bytes of code, %d blocks, %d br_table targets so far)",
				f, lim.ModuleCost, st.CodeBytes, st.Blocks, st.BrTableTargets)
		}
		st.Functions++
		st.Loops += res.loops
		st.MemoryGrow += res.grows
		body = append(body[:0], fb[:fr.off]...)
		if res.calls {
			body = append(body, check...)
			st.Entries++
			body = append(body, depthEntry(c, w, lim.StackUnits)...)
			body = append(body, 0x02)
			body = appendBlockType(body, m.resultTypes(typ), c.firstBlockType, st)
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
		m.fail(invalidf("code section: %d bytes after the last function", len(sec)-r.off))
	}
	return out, nil
}

// function is the function whose body rewriteBody reads: what its
// instructions may index.
type function struct {
	m       *module
	index   uint32
	off     int    // of its code in the binary, for errors
	locals  uint64 // parameters and locals
	blocks  []byte // the opcodes of the blocks open at the instruction (if becomes else after its else)
	checked bool   // a first pass has checked the body: a second only rewrites it
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
// not nil, putting it before each return. It checks the body against lim,
// its structure (blocks, else and end) and every index in it against the
// index spaces of fn's module.
func rewriteBody(in []byte, fn *function, check, call, beforeReturn, out []byte, lim Limits) (bodyResult, error) {
	var res bodyResult
	r := &reader{b: in}
	fn.blocks = fn.blocks[:0]
	ended := false
	for r.off < len(in) && r.err == nil {
		if ended && !fn.checked {
			fn.fail(invalidf("code after the end of the function, at offset %d", fn.off+r.off))
		}
		start := r.off
		op := r.byte()
		if op == 0x0E { // br_table: check its size before reading it
			save := r.off
			n := r.count()
			if r.err == nil && int64(n) > int64(lim.BrTableTargets) {
				return res, limitf("at offset %d: a br_table of %d targets; at most %d are allowed", fn.off+start, n, lim.BrTableTargets)
			}
			res.brTable = max(res.brTable, int(n))
			res.targets += int(n)
			r.off = save
		}
		var o operands
		if err := readImmediates(r, op, &o); err != nil {
			return res, fmt.Errorf("at offset %d: %w", fn.off+start, err)
		}
		if o.n > 0 && !fn.checked && fn.m.err == nil {
			if err := fn.checkOperands(op, &o, in[start:r.off]); err != nil {
				fn.fail(fmt.Errorf("%w, at offset %d", err, fn.off+start))
			}
		}
		switch op {
		case 0x02, 0x03, 0x04: // block, loop, if
			fn.blocks = append(fn.blocks, op)
			depth := len(fn.blocks)
			if depth > lim.Nesting {
				return res, limitf("at offset %d: blocks nest more than %d deep", fn.off+start, lim.Nesting)
			}
			res.nesting = max(res.nesting, depth)
			res.blocks++
			res.depthCost += int64(depth / 16)
			if op == 0x03 {
				out = append(out, in[start:r.off]...)
				out = append(out, check...)
				res.loops++
				continue
			}
		case 0x05: // else
			if k := len(fn.blocks) - 1; k < 0 || fn.blocks[k] != 0x04 {
				fn.fail(invalidf("else outside an if, at offset %d", fn.off+start))
			} else {
				fn.blocks[k] = 0x05
			}
		case 0x0B: // end
			if len(fn.blocks) == 0 {
				ended = true
			} else {
				fn.blocks = fn.blocks[:len(fn.blocks)-1]
			}
		case 0x0F: // return
			out = append(out, beforeReturn...)
		case 0x40: // memory.grow
			out = append(out, call...)
			res.grows++
			continue
		case 0x10, 0x11:
			res.calls = true
		}
		out = append(out, in[start:r.off]...)
	}
	if r.err != nil {
		return res, r.err
	}
	if !ended {
		fn.fail(invalidf("the body does not end with end"))
	}
	res.code = out
	return res, nil
}

// fail records why the function is invalid (see module.fail).
func (fn *function) fail(err error) {
	if !fn.checked && fn.m.err == nil {
		fn.m.fail(fmt.Errorf("code section: %s: %w", fn.m.funcName(fn.index), err))
	}
}

// checkOperands checks the indices of one instruction (op, whose bytes are
// instr) against the index spaces of the module as it is, before the
// rewrite adds to them.
func (fn *function) checkOperands(op byte, o *operands, instr []byte) error {
	m := fn.m
	for k := range o.n {
		i := o.index[k]
		var have uint64
		switch o.space[k] {
		case spaceType:
			have = uint64(len(m.params))
		case spaceFunc:
			have = uint64(m.funcs())
			if op == 0xD2 && i < m.funcs() && !m.declared(i) {
				return invalidf("ref.func %d: %s is not declared (in an element segment, an export or a global)", i, m.funcName(i))
			}
		case spaceTable:
			have = uint64(len(m.tables))
		case spaceMemory:
			if m.memories == 0 {
				return invalidf("%s, and the module has no memory", instrName(instr))
			}
			if i != 0 {
				return invalidf("%s of memory %d: only memory 0 is supported, as one zero byte", instrName(instr), int32(i))
			}
			continue
		case spaceGlobal:
			have = uint64(m.globals())
		case spaceGlobalSet:
			have = uint64(m.globals())
			if i < m.globals() && !m.globalMut[i] {
				return invalidf("global.set %d: global %d is immutable", i, i)
			}
		case spaceLocal:
			have = fn.locals
		case spaceLabel:
			// The labels are the open blocks' and the function's.
			if i > uint32(len(fn.blocks)) {
				return invalidf("%s %d: no label %d (%s open around it, the function's included)", instrName(instr), i, i, plural(uint64(len(fn.blocks)+1), "block"))
			}
			continue
		case spaceElem:
			have = uint64(m.elems)
		case spaceData:
			if !m.hasDataCount {
				return invalidf("%s without a data count section", instrName(instr))
			}
			have = uint64(m.dataCount)
		}
		if uint64(i) >= have {
			return invalidf("%s: the module has no %s %d (it has %s)", instrName(instr), o.space[k], i, plural(have, o.space[k].String()))
		}
	}
	return nil
}

// instrName names an instruction with index immediates (instr is its
// bytes), for an error.
func instrName(instr []byte) string {
	op := instr[0]
	if name, ok := opNames[op]; ok {
		if op == 0x0C || op == 0x0D || op == 0x0E {
			return name
		}
		r := &reader{b: instr, off: 1}
		switch op {
		case 0x02, 0x03, 0x04, 0x3F, 0x40, 0x1C, 0xD0:
			return name
		}
		return fmt.Sprintf("%s %d", name, r.u32())
	}
	r := &reader{b: instr, off: 1}
	sub := r.u32()
	switch {
	case op >= 0x28 && op <= 0x3E:
		return "a load or store"
	case op == 0xFC && sub >= 8 && sub <= 17:
		return miscNames[sub-8]
	case op == 0xFD:
		return "a v128 load or store"
	}
	return fmt.Sprintf("instruction %#x", op)
}

var opNames = map[byte]string{
	0x02: "block", 0x03: "loop", 0x04: "if", 0x0C: "br", 0x0D: "br_if", 0x0E: "br_table",
	0x10: "call", 0x11: "call_indirect", 0x20: "local.get", 0x21: "local.set", 0x22: "local.tee",
	0x23: "global.get", 0x24: "global.set", 0x25: "table.get", 0x26: "table.set",
	0x3F: "memory.size", 0x40: "memory.grow", 0xD2: "ref.func",
}

var miscNames = [...]string{"memory.init", "data.drop", "memory.copy", "memory.fill", "table.init",
	"elem.drop", "table.copy", "table.grow", "table.size", "table.fill"}

// plural is "n things".
func plural(n uint64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
