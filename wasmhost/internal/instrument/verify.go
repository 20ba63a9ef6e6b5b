package instrument

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// verify checks that out is orig as Rewrite rewrites it, and that a
// guest instruction can reach nothing the rewrite added: it decodes both
// modules on its own (with none of the rewrite's code but the reader and
// readImmediates) and checks that
//
//   - every section of out is the section of orig, byte for byte, but for
//     what the rewrite appends to the type, function, global, export and
//     code sections, the table maximums it lowers, the start section it
//     removes and the custom sections it drops;
//   - every instruction of every function of out is either an instruction
//     of the same function of orig, copied, or one of the sequences the
//     rewrite inserts, where it inserts them (a memory.grow is replaced by
//     the call of the added function);
//   - every index of every instruction of orig, and of its exports,
//     element segments and constant expressions, is within orig's own
//     index spaces, and every branch within the blocks orig opens;
//   - the added functions call nothing and read and write only the added
//     globals.
//
// So the added globals, functions and types are used only by the inserted
// sequences and the added functions, whatever the module. Tests and
// fuzzers run it on every rewrite.
func verify(orig, out []byte) error {
	o, err := splitSections(orig)
	if err != nil {
		return fmt.Errorf("original: %w", err)
	}
	n, err := splitSections(out)
	if err != nil {
		return fmt.Errorf("rewritten: %w", err)
	}
	v := &verifier{}
	if err := v.counts(o); err != nil {
		return fmt.Errorf("original: %w", err)
	}
	for _, id := range []byte{secImport, secMemory, secElement, secDataCnt, secData} {
		if !bytes.Equal(o.body(id), n.body(id)) {
			return fmt.Errorf("section %d changed", id)
		}
	}
	if n.has(secStart) {
		return errors.New("the rewritten module has a start section")
	}
	if err := v.appended(o, n); err != nil {
		return err
	}
	if err := v.tableLimits(o.body(secTable), n.body(secTable)); err != nil {
		return err
	}
	if err := v.code(o.body(secCode), n.body(secCode)); err != nil {
		return fmt.Errorf("code: %w", err)
	}
	// Custom sections: those kept are kept as they were, in order.
	k := 0
	for _, s := range n.custom {
		for k < len(o.custom) && !bytes.Equal(o.custom[k], s) {
			k++
		}
		if k == len(o.custom) {
			return errors.New("a custom section the original does not have")
		}
		k++
	}
	return nil
}

// sections are a module's sections by id, and its custom sections.
type sections struct {
	byID   map[byte][]byte
	custom [][]byte
}

func (s *sections) body(id byte) []byte { return s.byID[id] }
func (s *sections) has(id byte) bool    { _, ok := s.byID[id]; return ok }

func splitSections(wasm []byte) (*sections, error) {
	if len(wasm) < 8 || string(wasm[:8]) != "\x00asm\x01\x00\x00\x00" {
		return nil, errors.New("not a WebAssembly 1 binary")
	}
	s := &sections{byID: map[byte][]byte{}}
	r := &reader{b: wasm, off: 8}
	for r.off < len(r.b) && r.err == nil {
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err != nil {
			break
		}
		if id == secCustom {
			s.custom = append(s.custom, body)
			continue
		}
		if s.has(id) {
			return nil, fmt.Errorf("section %d repeated", id)
		}
		s.byID[id] = body
	}
	return s, r.err
}

// verifier holds orig's index spaces and what the rewrite added.
type verifier struct {
	types, funcs, globals, tables, elems, datas uint32
	memory                                      bool
	importedFuncs                               uint32
	funcTypes                                   []uint32 // of the defined functions
	params                                      []uint32
	results                                     [][]byte
	globalMut                                   []bool
	start                                       int64 // -1 for none

	// Added: the rewritten module's types from types on, and these.
	interrupt, oom, budget, depth, stackHit uint32
	slow, grow                              uint32
	addedTypes                              [][]byte // results of each added type whose params are none; nil for the others
}

// counts reads orig's index spaces, checking every index outside its code
// against them.
func (v *verifier) counts(o *sections) error {
	v.start = -1
	r := &reader{b: o.body(secType)}
	if r.b != nil {
		for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
			r.byte()
			p := r.count()
			for j := uint32(0); j < p && r.err == nil; j++ {
				r.valType()
			}
			nr := r.count()
			res := r.bytes(int(nr))
			v.params = append(v.params, p)
			v.results = append(v.results, res)
		}
	}
	v.types = uint32(len(v.params))
	r = &reader{b: o.body(secImport)}
	if r.b != nil {
		for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
			r.name()
			r.name()
			switch r.byte() {
			case 0x00:
				v.funcTypes = append(v.funcTypes, r.u32())
				v.importedFuncs++
			case 0x02:
				r.memoryType()
				v.memory = true
			case 0x03:
				v.globalMut = append(v.globalMut, r.globalType())
			default:
				return errors.New("an import of a table or tag")
			}
		}
	}
	r = &reader{b: o.body(secFunction)}
	if r.b != nil {
		for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
			v.funcTypes = append(v.funcTypes, r.u32())
		}
	}
	v.funcs = uint32(len(v.funcTypes))
	for _, t := range v.funcTypes {
		if t >= v.types {
			return fmt.Errorf("a function of type %d", t)
		}
	}
	if b := o.body(secMemory); b != nil && (&reader{b: b}).u32() > 0 {
		v.memory = true
	}
	r = &reader{b: o.body(secTable)}
	if r.b != nil {
		v.tables = r.count()
	}
	imported := uint32(len(v.globalMut))
	r = &reader{b: o.body(secGlobal)}
	if r.b != nil {
		for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
			v.globalMut = append(v.globalMut, r.globalType())
			v.constExpr(r, imported)
		}
	}
	v.globals = uint32(len(v.globalMut))
	r = &reader{b: o.body(secExport)}
	if r.b != nil {
		for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
			name := r.name()
			kind, idx := r.byte(), r.u32()
			have := map[byte]uint32{0: v.funcs, 1: v.tables, 2: boolCount(v.memory), 3: v.globals}[kind]
			if idx >= have && r.err == nil {
				return fmt.Errorf("export %q of %s %d, out of range", name, externName[kind], idx)
			}
		}
	}
	if b := o.body(secStart); b != nil {
		r = &reader{b: b}
		s := r.u32()
		if s >= v.funcs {
			return fmt.Errorf("start function %d out of range", s)
		}
		v.start = int64(s)
	}
	r = &reader{b: o.body(secElement)}
	if r.b != nil {
		n := r.count()
		v.elems = n
		for i := uint32(0); i < n && r.err == nil; i++ {
			flags := r.u32()
			if flags&1 == 0 {
				if flags&2 != 0 {
					r.u32()
				}
				v.constExpr(r, v.globals)
			}
			if flags&3 != 0 {
				r.byte()
			}
			for j, m := uint32(0), r.count(); j < m && r.err == nil; j++ {
				if flags&4 != 0 {
					v.constExpr(r, v.globals)
				} else if f := r.u32(); f >= v.funcs && r.err == nil {
					return fmt.Errorf("element segment %d names function %d, out of range", i, f)
				}
			}
		}
	}
	r = &reader{b: o.body(secData)}
	if r.b != nil {
		n := r.count()
		v.datas = n
		for i := uint32(0); i < n && r.err == nil; i++ {
			switch r.u32() {
			case 0:
				v.constExpr(r, v.globals)
			case 2:
				r.u32()
				v.constExpr(r, v.globals)
			}
			r.bytes(int(r.u32()))
		}
	}
	if b := o.body(secDataCnt); b != nil {
		v.datas = (&reader{b: b}).u32()
	}
	return r.err
}

// constExpr reads a constant expression, failing r if it reads a global
// at or past globals or names a function out of range.
func (v *verifier) constExpr(r *reader, globals uint32) {
	for r.err == nil {
		op := r.byte()
		if op == 0x0B {
			return
		}
		var o operands
		if err := readImmediates(r, op, &o); err != nil {
			r.err = err
			return
		}
		for k := range o.n {
			switch o.space[k] {
			case spaceGlobal:
				if o.index[k] >= globals {
					r.err = fmt.Errorf("a constant expression reads global %d", o.index[k])
				}
			case spaceFunc:
				if o.index[k] >= v.funcs {
					r.err = fmt.Errorf("a constant expression names function %d", o.index[k])
				}
			}
		}
	}
}

// appended checks the sections the rewrite appends to: orig's entries
// unchanged, then the added ones.
func (v *verifier) appended(o, n *sections) error {
	// Types: orig's, then () -> (), (i32) -> i32, and () -> results.
	_, nt, err := entries(o.body(secType), n.body(secType), func(r *reader) {
		r.byte()
		r.bytes(int(r.u32()))
		r.bytes(int(r.u32()))
	})
	if err != nil {
		return fmt.Errorf("types: %w", err)
	}
	if len(nt) < 2 {
		return errors.New("types: fewer than 2 added")
	}
	if string(nt[0]) != "\x60\x00\x00" || string(nt[1]) != "\x60\x01\x7F\x01\x7F" {
		return errors.New("types: the first two added are not () -> () and (i32) -> i32")
	}
	v.addedTypes = [][]byte{nil, nil}
	for _, t := range nt[2:] {
		r := &reader{b: t}
		form, params, results := r.byte(), r.u32(), r.u32()
		if r.err != nil || form != 0x60 || params != 0 || results < 2 || int(results) != len(t)-r.off {
			return fmt.Errorf("types: an added type %x is not () -> several results", t)
		}
		v.addedTypes = append(v.addedTypes, t[r.off:])
	}

	// Functions: orig's, then $slow () -> () and, with a memory, $grow.
	_, nf, err := entries(o.body(secFunction), n.body(secFunction), func(r *reader) { r.u32() })
	if err != nil {
		return fmt.Errorf("functions: %w", err)
	}
	want := [][]byte{appendU32(nil, v.types)}
	if v.memory {
		want = append(want, appendU32(nil, v.types+1))
	}
	if !equalEntries(nf, want) {
		return fmt.Errorf("functions: added %x, want %x", nf, want)
	}
	v.slow, v.grow = v.funcs, v.funcs+1

	// Globals: orig's, then five mutable i32s.
	_, ng, err := entries(o.body(secGlobal), n.body(secGlobal), func(r *reader) {
		r.globalType()
		for r.err == nil {
			op := r.byte()
			if op == 0x0B {
				break
			}
			var o operands
			if err := readImmediates(r, op, &o); err != nil && r.err == nil {
				r.err = err
			}
		}
	})
	if err != nil {
		return fmt.Errorf("globals: %w", err)
	}
	budget := appendS32([]byte{0x7F, 0x01, 0x41}, Budget)
	zero := []byte{0x7F, 0x01, 0x41, 0x00}
	if !equalEntries(ng, [][]byte{append(zero, 0x0B), append(zero, 0x0B), append(budget, 0x0B), append(zero, 0x0B), append(zero, 0x0B)}) {
		return fmt.Errorf("globals: added %x", ng)
	}
	g := v.globals
	v.interrupt, v.oom, v.budget, v.depth, v.stackHit = g, g+1, g+2, g+3, g+4

	// Exports: orig's, then the added globals and the start function.
	_, ne, err := entries(o.body(secExport), n.body(secExport), func(r *reader) {
		r.name()
		r.byte()
		r.u32()
	})
	if err != nil {
		return fmt.Errorf("exports: %w", err)
	}
	var wantExports [][]byte
	for _, e := range []struct {
		name string
		g    uint32
	}{{InterruptGlobal, v.interrupt}, {OOMGlobal, v.oom}, {BudgetGlobal, v.budget}, {StackGlobal, v.stackHit}} {
		wantExports = append(wantExports, appendU32(append(appendName(nil, e.name), 0x03), e.g))
	}
	if v.start >= 0 {
		wantExports = append(wantExports, appendU32(append(appendName(nil, StartFunc), 0x00), uint32(v.start)))
	}
	if !equalEntries(ne, wantExports) {
		return fmt.Errorf("exports: added %q", ne)
	}
	return nil
}

// entries splits two vectors into entries (read reads one), checks that
// the second starts with the first's entries, and returns the first's and
// the ones the second adds.
func entries(orig, out []byte, read func(*reader)) (o, added [][]byte, err error) {
	split := func(b []byte) ([][]byte, error) {
		if b == nil {
			return nil, nil
		}
		r := &reader{b: b}
		n := r.count()
		var es [][]byte
		for i := uint32(0); i < n && r.err == nil; i++ {
			start := r.off
			read(r)
			es = append(es, b[start:r.off])
		}
		if r.err == nil && r.off != len(b) {
			return nil, fmt.Errorf("%d bytes after the entries", len(b)-r.off)
		}
		return es, r.err
	}
	if o, err = split(orig); err != nil {
		return nil, nil, fmt.Errorf("original: %w", err)
	}
	all, err := split(out)
	if err != nil {
		return nil, nil, fmt.Errorf("rewritten: %w", err)
	}
	if len(all) < len(o) || !equalEntries(all[:len(o)], o) {
		return nil, nil, errors.New("the original's entries changed")
	}
	return o, all[len(o):], nil
}

func equalEntries(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// tableLimits checks that the rewrite changed only the tables' maximums, and
// only down.
func (v *verifier) tableLimits(orig, out []byte) error {
	if orig == nil || out == nil {
		if orig == nil && out == nil {
			return nil
		}
		return errors.New("table section added or removed")
	}
	ro, rn := &reader{b: orig}, &reader{b: out}
	n := ro.count()
	if rn.count() != n {
		return errors.New("tables: count changed")
	}
	for i := uint32(0); i < n && ro.err == nil && rn.err == nil; i++ {
		if ro.byte() != rn.byte() {
			return fmt.Errorf("table %d: type changed", i)
		}
		of := ro.byte()
		omin := ro.u32()
		omax := uint64(1 << 32)
		if of == 0x01 {
			omax = uint64(ro.u32())
		}
		if rn.byte() != 0x01 || rn.u32() != omin || uint64(rn.u32()) > omax {
			return fmt.Errorf("table %d: limits changed other than by lowering the maximum", i)
		}
	}
	return errors.Join(ro.err, rn.err)
}

// code checks every function body.
func (v *verifier) code(orig, out []byte) error {
	ro, rn := &reader{b: orig}, &reader{b: out}
	var n uint32
	if orig != nil {
		n = ro.count()
	}
	if rn.count() != n+1+boolCount(v.memory) {
		return errors.New("functions added other than $slow and $grow")
	}
	for i := uint32(0); i < n && ro.err == nil && rn.err == nil; i++ {
		ob := ro.bytes(int(ro.u32()))
		nb := rn.bytes(int(rn.u32()))
		if ro.err != nil || rn.err != nil {
			break
		}
		f := v.importedFuncs + i
		if err := v.body(f, ob, nb); err != nil {
			return fmt.Errorf("function %d: %w", f, err)
		}
	}
	for i := uint32(0); i < 1+boolCount(v.memory) && rn.err == nil; i++ {
		if err := v.added(rn.bytes(int(rn.u32()))); err != nil {
			return fmt.Errorf("added function %d: %w", v.funcs+i, err)
		}
	}
	if err := errors.Join(ro.err, rn.err); err != nil {
		return err
	}
	if rn.off != len(out) {
		return errors.New("bytes after the functions")
	}
	return nil
}

// added checks an added function: it calls nothing and uses only the
// added globals.
func (v *verifier) added(b []byte) error {
	r := &reader{b: b}
	for i, n := uint32(0), r.count(); i < n && r.err == nil; i++ {
		r.u32()
		r.valType()
	}
	for r.off < len(b) && r.err == nil {
		op := r.byte()
		var o operands
		if err := readImmediates(r, op, &o); err != nil {
			return err
		}
		for k := range o.n {
			switch o.space[k] {
			case spaceFunc, spaceType, spaceTable, spaceElem, spaceData:
				return fmt.Errorf("instruction %#x uses a %s", op, o.space[k])
			case spaceGlobal, spaceGlobalSet:
				if o.index[k] < v.globals {
					return fmt.Errorf("instruction %#x uses the module's global %d", op, o.index[k])
				}
			}
		}
	}
	return r.err
}

// The sequences the rewrite inserts, as patterns: a byte stands for
// itself, but for the placeholders, which stand for a LEB128 number.
const (
	pBudget = iota + 256
	pSlow
	pDepth
	pStackHit
	pAny // the frame weight, or the stack limit
)

var (
	// countdown: global.get $budget; i32.const 1; i32.sub; global.set $budget;
	// global.get $budget; i32.eqz; if; call $slow; end
	countdown = []int{0x23, pBudget, 0x41, 0x01, 0x6B, 0x24, pBudget, 0x23, pBudget, 0x45, 0x04, 0x40, 0x10, pSlow, 0x0B}
	// depth entry: $depth += w; if $depth > limit { $stackHit = 1; unreachable }
	depthIn = []int{0x23, pDepth, 0x41, pAny, 0x6A, 0x24, pDepth, 0x23, pDepth, 0x41, pAny, 0x4B, 0x04, 0x40,
		0x41, 0x01, 0x24, pStackHit, 0x00, 0x0B}
	// depth exit: $depth -= w
	depthOut = []int{0x23, pDepth, 0x41, pAny, 0x6B, 0x24, pDepth}
)

// match reads pattern p from r, and returns the pAny numbers in it; ok is
// false if r does not hold p there.
func (v *verifier) match(r *reader, p []int) (nums []int64, ok bool) {
	for _, c := range p {
		switch c {
		case pBudget, pSlow, pDepth, pStackHit:
			want := v.budget
			switch c {
			case pSlow:
				want = v.slow
			case pDepth:
				want = v.depth
			case pStackHit:
				want = v.stackHit
			}
			if r.u32() != want {
				return nil, false
			}
		case pAny:
			nums = append(nums, r.sleb(32))
		default:
			if int(r.byte()) != c {
				return nil, false
			}
		}
		if r.err != nil {
			return nil, false
		}
	}
	return nums, true
}

// body checks one function: out's body is orig's with the inserted
// sequences, and orig's instructions index only orig's spaces.
func (v *verifier) body(f uint32, orig, out []byte) error {
	ro, rn := &reader{b: orig}, &reader{b: out}
	var locals uint64
	for i, n := uint32(0), ro.count(); i < n && ro.err == nil; i++ {
		locals += uint64(ro.u32())
		ro.valType()
	}
	if ro.err != nil {
		return ro.err
	}
	if !bytes.Equal(orig[:ro.off], rn.bytes(ro.off)) {
		return errors.New("its locals changed")
	}
	locals += uint64(v.params[v.funcTypes[f]])

	// A function that makes calls starts with a countdown, the depth
	// entry and a block with the function's results around its code.
	var w int64
	wrapped := false
	save := rn.off
	if _, ok := v.match(rn, countdown); ok {
		nums, ok := v.match(rn, depthIn)
		if !ok || nums[0] <= 0 {
			return errors.New("a countdown at its entry without the depth entry")
		}
		w, wrapped = nums[0], true
		if rn.byte() != 0x02 {
			return errors.New("no block after the depth entry")
		}
		bt := rn.blockType()
		want := v.results[v.funcTypes[f]]
		switch {
		case bt < 0 && len(want) == 0:
			if rn.b[rn.off-1] != 0x40 {
				return errors.New("the block around its code does not have its results")
			}
		case bt < 0 && len(want) == 1:
			if rn.b[rn.off-1] != want[0] {
				return errors.New("the block around its code does not have its results")
			}
		case bt >= int64(v.types) && bt < int64(v.types)+int64(len(v.addedTypes)) && bt >= int64(v.types)+2:
			if !bytes.Equal(v.addedTypes[bt-int64(v.types)], want) {
				return errors.New("the block around its code does not have its results")
			}
		default:
			return fmt.Errorf("the block around its code has block type %d", bt)
		}
	} else {
		rn.off, rn.err = save, nil
	}

	var blocks []byte
	ended := false
	for ro.off < len(orig) && ro.err == nil {
		if ended {
			return errors.New("code after its end")
		}
		start := ro.off
		op := ro.byte()
		var o operands
		if err := readImmediates(ro, op, &o); err != nil {
			return err
		}
		instr := orig[start:ro.off]
		if err := v.operands(op, &o, locals, len(blocks)); err != nil {
			return fmt.Errorf("at offset %d: %w", start, err)
		}
		switch op {
		case 0x02, 0x03, 0x04:
			blocks = append(blocks, op)
		case 0x0B:
			if len(blocks) == 0 {
				ended = true
			} else {
				blocks = blocks[:len(blocks)-1]
			}
		}
		switch {
		case op == 0x40: // memory.grow becomes a call of $grow
			if !v.memory || rn.byte() != 0x10 || rn.u32() != v.grow {
				return fmt.Errorf("at offset %d: a memory.grow not replaced by the call of $grow", start)
			}
			continue
		case op == 0x0F && wrapped:
			if nums, ok := v.match(rn, depthOut); !ok || nums[0] != w {
				return fmt.Errorf("at offset %d: a return without the depth exit before it", start)
			}
		}
		if !bytes.Equal(rn.bytes(len(instr)), instr) {
			return fmt.Errorf("at offset %d: instruction %#x changed", start, op)
		}
		if op == 0x03 {
			if _, ok := v.match(rn, countdown); !ok {
				return fmt.Errorf("at offset %d: a loop without the countdown", start)
			}
		}
	}
	if ro.err != nil {
		return ro.err
	}
	if !ended {
		return errors.New("its code does not end")
	}
	if wrapped {
		if nums, ok := v.match(rn, depthOut); !ok || nums[0] != w || rn.byte() != 0x0B {
			return errors.New("no depth exit and end after the block around its code")
		}
	}
	if rn.err != nil || rn.off != len(out) {
		return errors.New("code after its end in the rewritten module")
	}
	return nil
}

// operands checks the indices of an instruction of orig, with blocks
// blocks open around it.
func (v *verifier) operands(op byte, o *operands, locals uint64, blocks int) error {
	for k := range o.n {
		i := uint64(o.index[k])
		var have uint64
		switch o.space[k] {
		case spaceType:
			have = uint64(v.types)
		case spaceFunc:
			have = uint64(v.funcs)
		case spaceTable:
			have = uint64(v.tables)
		case spaceMemory:
			have = uint64(boolCount(v.memory))
		case spaceGlobal:
			have = uint64(v.globals)
		case spaceGlobalSet:
			have = uint64(v.globals)
			if i < have && !v.globalMut[i] {
				return fmt.Errorf("global.set of immutable global %d", i)
			}
		case spaceLocal:
			have = locals
		case spaceLabel:
			have = uint64(blocks) + 1
		case spaceElem:
			have = uint64(v.elems)
		case spaceData:
			have = uint64(v.datas)
		}
		if i >= have {
			return fmt.Errorf("%s of %s %d: the original has %d", strings.TrimSpace(instrOf(op)), o.space[k], i, have)
		}
	}
	return nil
}

func instrOf(op byte) string {
	if name, ok := opNames[op]; ok {
		return name
	}
	return fmt.Sprintf("instruction %#x", op)
}
