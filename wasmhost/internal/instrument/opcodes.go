package instrument

import "fmt"

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
