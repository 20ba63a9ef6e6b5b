package instrument

// space is an index space an immediate indexes.
type space uint8

const (
	spaceType space = iota + 1
	spaceFunc
	spaceTable
	spaceMemory
	spaceGlobal
	spaceGlobalSet // a global the instruction writes
	spaceLocal
	spaceLabel
	spaceElem
	spaceData
)

func (s space) String() string {
	switch s {
	case spaceType:
		return "type"
	case spaceFunc:
		return "function"
	case spaceTable:
		return "table"
	case spaceMemory:
		return "memory"
	case spaceGlobal, spaceGlobalSet:
		return "global"
	case spaceLocal:
		return "local"
	case spaceLabel:
		return "label"
	case spaceElem:
		return "element segment"
	case spaceData:
		return "data segment"
	}
	return "index"
}

// operands are the index immediates of one instruction: at most two, and
// a br_table's deepest target as one label.
type operands struct {
	n     int
	space [2]space
	index [2]uint32
}

func (o *operands) add(s space, i uint32) {
	o.space[o.n], o.index[o.n] = s, i
	o.n++
}

// The immediates an opcode has, for readImmediates' dispatch.
const (
	immUnsupported = iota
	immNone
	immBlock
	immLabel
	immBrTable
	immFunc
	immCallIndirect
	immLocal
	immGlobalGet
	immGlobalSet
	immTable
	immMemReserved
	immSelect
	immMemArg
	immI32
	immI64
	immF32
	immF64
	immRefNull
	immPrefixFC
	immPrefixFD
)

var immediates = func() (k [256]uint8) {
	for op := 0x45; op <= 0xC4; op++ { // numeric instructions
		k[op] = immNone
	}
	for _, op := range []byte{0x00, 0x01, 0x05, 0x0B, 0x0F, 0x1A, 0x1B, 0xD1} {
		k[op] = immNone
	}
	for op := 0x28; op <= 0x3E; op++ { // loads and stores
		k[op] = immMemArg
	}
	k[0x02], k[0x03], k[0x04] = immBlock, immBlock, immBlock
	k[0x0C], k[0x0D], k[0x0E] = immLabel, immLabel, immBrTable
	k[0x10], k[0xD2], k[0x11] = immFunc, immFunc, immCallIndirect
	k[0x20], k[0x21], k[0x22] = immLocal, immLocal, immLocal
	k[0x23], k[0x24] = immGlobalGet, immGlobalSet
	k[0x25], k[0x26] = immTable, immTable
	k[0x3F], k[0x40] = immMemReserved, immMemReserved
	k[0x1C] = immSelect
	k[0x41], k[0x42], k[0x43], k[0x44] = immI32, immI64, immF32, immF64
	k[0xD0] = immRefNull
	k[0xFC], k[0xFD] = immPrefixFC, immPrefixFD
	return k
}()

// readImmediates reads the immediates of the instruction whose opcode
// (already read) is op, and sets o to the indices among them. Memory
// instructions name memory 0, which must exist.
func readImmediates(r *reader, op byte, o *operands) error {
	o.n = 0
	switch immediates[op] {
	case immNone:
	case immBlock:
		if t := r.blockType(); t >= 0 {
			o.add(spaceType, uint32(min(t, 0xFFFFFFFF))) // past any range all the same
		}
	case immLabel:
		o.add(spaceLabel, r.u32())
	case immBrTable:
		n := r.count()
		deepest := uint32(0)
		for i := uint32(0); i <= n && r.err == nil; i++ {
			deepest = max(deepest, r.u32())
		}
		o.add(spaceLabel, deepest)
	case immFunc: // call, ref.func
		o.add(spaceFunc, r.u32())
	case immCallIndirect: // typeidx tableidx
		o.add(spaceType, r.u32())
		o.add(spaceTable, r.u32())
	case immLocal:
		o.add(spaceLocal, r.u32())
	case immGlobalGet:
		o.add(spaceGlobal, r.u32())
	case immGlobalSet:
		o.add(spaceGlobalSet, r.u32())
	case immTable: // table.get, table.set
		o.add(spaceTable, r.u32())
	case immMemReserved: // memory.size, memory.grow
		o.add(spaceMemory, reserved(r))
	case immSelect: // select t*
		n := r.count()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valType()
		}
	case immMemArg:
		r.memArg()
		o.add(spaceMemory, 0)
	case immI32:
		r.sleb(32)
	case immI64:
		r.sleb(64)
	case immF32:
		r.bytes(4)
	case immF64:
		r.bytes(8)
	case immRefNull:
		r.refType()
	case immPrefixFC:
		switch sub := r.u32(); {
		case sub <= 7: // saturating truncations
		case sub == 8: // memory.init data mem
			o.add(spaceData, r.u32())
			o.add(spaceMemory, reserved(r))
		case sub == 9: // data.drop
			o.add(spaceData, r.u32())
		case sub == 10: // memory.copy mem mem
			o.add(spaceMemory, reserved(r))
			o.add(spaceMemory, reserved(r))
		case sub == 11: // memory.fill mem
			o.add(spaceMemory, reserved(r))
		case sub == 12: // table.init elem table
			o.add(spaceElem, r.u32())
			o.add(spaceTable, r.u32())
		case sub == 13: // elem.drop
			o.add(spaceElem, r.u32())
		case sub == 14: // table.copy table table
			o.add(spaceTable, r.u32())
			o.add(spaceTable, r.u32())
		case sub >= 15 && sub <= 17: // table.grow, table.size, table.fill
			o.add(spaceTable, r.u32())
		default:
			if r.err == nil {
				return unsupportedf("unsupported instruction 0xFC %d", sub)
			}
		}
	case immPrefixFD:
		switch sub := r.u32(); {
		case sub <= 0x0B || sub == 0x5C || sub == 0x5D: // v128 loads and store
			r.memArg()
			o.add(spaceMemory, 0)
		case sub == 0x0C || sub == 0x0D: // v128.const, i8x16.shuffle
			r.bytes(16)
		case sub >= 0x15 && sub <= 0x22: // extract/replace lane
			r.byte()
		case sub >= 0x54 && sub <= 0x5B: // load/store lane
			r.memArg()
			r.byte()
			o.add(spaceMemory, 0)
		case sub <= 0xFF:
			// no immediates
		default:
			if r.err == nil {
				return unsupportedf("unsupported instruction 0xFD %d", sub)
			}
		}
	default:
		return unsupportedf("unsupported instruction %#x (a WebAssembly feature the host does not enable)", op)
	}
	return r.err
}

// reserved reads a memory index that WebAssembly 2.0 reserves: one zero
// byte. It returns the index, or 0xFFFFFFFF (no memory) for an encoding in
// more than one byte, which is invalid even of zero.
func reserved(r *reader) uint32 {
	start := r.off
	v := r.u32()
	if r.off-start != 1 {
		return 0xFFFFFFFF
	}
	return v
}
