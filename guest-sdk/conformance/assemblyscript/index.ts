// The AssemblyScript SDK's conformance module: it runs the script each
// record carries (guest-sdk/conformance/README.md) with the SDK's writers.

import { Config, Module, Output, Record, Row, Table, col, Col, register } from "../../assemblyscript/assembly/index";
export { sluice_abi_version, sluice_alloc, sluice_init, sluice_transform } from "../../assemblyscript/assembly/index";

class Script {
  constructor(public p: usize, public end: usize) {}
  u8(): u8 { const v = load<u8>(this.p); this.p += 1; return v; }
  u16(): u16 { const v = load<u16>(this.p); this.p += 2; return v; }
  u32(): u32 { const v = load<u32>(this.p); this.p += 4; return v; }
  u64(): u64 { const v = load<u64>(this.p); this.p += 8; return v; }
  n: i32 = 0;
  str(): usize { this.n = <i32>this.u32(); const s = this.p; this.p += <usize>this.n; return s; }
  bytes(): Uint8Array { const s = this.str(); const a = new Uint8Array(this.n); memory.copy(a.dataStart, s, <usize>this.n); return a; }
  string(): string { const s = this.str(); return String.UTF8.decodeUnsafe(s, <usize>this.n); }
  fixed(n: i32): Uint8Array { const a = new Uint8Array(n); memory.copy(a.dataStart, this.p, <usize>n); this.p += <usize>n; return a; }
}

class Conformance extends Module {
  tables: Table[] = [];

  init(cfg: Config): string | null {
    const refuse = cfg.param("refuse");
    if (refuse != null) return refuse;
    const name = cfg.param("expect");
    if (name != null) {
      const t = cfg.table(name);
      if (t == null) return cfg.error;
      const specP = cfg.param("columns");
      const spec = specP == null ? "" : specP;
      const cols: Col[] = [];
      const parts = spec.split("|");
      for (let i = 0; i < parts.length; i++) {
        const c = parts[i];
        const sp = c.indexOf(" ");
        cols.push(sp < 0 ? col(c, "") : col(c.substring(0, sp), c.substring(sp + 1)));
      }
      const err = t.expect(cols);
      if (err != null) return err;
    }
    this.tables = cfg.tables;
    return null;
  }

  transform(rec: Record, out: Output): string | null {
    const s = new Script(rec.valuePtr, rec.valuePtr + <usize>rec.valueLen);
    let w: Row | null = null;
    while (s.p < s.end) {
      const op = s.u8();
      if (op == 0x52) { // R
        w = out.row(this.tables[s.u16()]);
        continue;
      }
      if (op == 0x58) return s.string(); // X
      const r = w!;
      switch (op) {
        case 0x45: r.end(); break; // E
        case 0x4e: r.null(); break; // N
        case 0x6e: r.notNull(); break; // n
        case 0x41: r.beginArray(<i32>s.u32()); break; // A
        case 0x61: r.uint8(s.u8()); break; // a
        case 0x62: r.uint16(s.u16()); break;
        case 0x63: r.uint32(s.u32()); break;
        case 0x64: r.uint64(s.u64()); break;
        case 0x65: r.int8(<i8>s.u8()); break; // e
        case 0x66: r.int16(<i16>s.u16()); break;
        case 0x67: r.int32(<i32>s.u32()); break;
        case 0x68: r.int64(<i64>s.u64()); break;
        case 0x69: r.float32(reinterpret<f32>(s.u32())); break; // i
        case 0x6a: r.float64(reinterpret<f64>(s.u64())); break; // j
        case 0x73: { const p = s.str(); r.bytesAt(p, s.n); break; } // s
        case 0x78: r.fixedString(s.bytes()); break; // x
        case 0x44: r.date(s.u16()); break; // D
        case 0x54: r.dateTime(s.u32()); break; // T
        case 0x74: r.dateTime64(<i64>s.u64()); break; // t
        case 0x42: r.bool(s.u8() != 0); break; // B
        case 0x55: r.uuid(s.fixed(16)); break; // U
        case 0x6d: r.enum8(<i8>s.u8()); break; // m
        case 0x4d: r.enum16(<i16>s.u16()); break; // M
        case 0x76: { const a = s.fixed(4); r.ipv4(a[0], a[1], a[2], a[3]); break; } // v
        case 0x56: r.ipv6(s.fixed(16)); break; // V
        case 0x4b: r.bytesAt(rec.keyPtr, rec.keyLen); break; // K
        case 0x4f: r.int64(rec.offset); break; // O
        case 0x50: r.int32(rec.partition); break; // P
        case 0x53: r.int64(rec.timestamp); break; // S
        case 0x51: r.string(rec.topic); break; // Q
        case 0x48: { // H
          const v = rec.header(s.string());
          if (v != null) r.notNull().bytes(v);
          else r.null();
          break;
        }
        case 0x4c: { // L
          const n = s.u32();
          const v: string[] = [];
          for (let i: u32 = 0; i < n; i++) v.push(s.string());
          r.arrayString(v);
          break;
        }
        case 0x49: { // I
          const n = s.u32();
          const v: i64[] = [];
          for (let i: u32 = 0; i < n; i++) v.push(<i64>s.u64());
          r.arrayInt64(v);
          break;
        }
        case 0x57: { // W
          const n = s.u32();
          const v: u64[] = [];
          for (let i: u32 = 0; i < n; i++) v.push(s.u64());
          r.arrayUInt64(v);
          break;
        }
        default:
          return "conformance: unknown op " + String.fromCharCode(op);
      }
    }
    return null;
  }
}

register(new Conformance());
