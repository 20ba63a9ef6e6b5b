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
