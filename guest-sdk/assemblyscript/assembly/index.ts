// The AssemblyScript SDK for sluice normalization modules (guest ABI
// version 1, guest-sdk/ABI.md). A module extends Module, registers an
// instance with register(), and re-exports the ABI functions:
//
//   export { sluice_abi_version, sluice_alloc, sluice_init, sluice_transform } from "@sluicehq/sluice-guest";
//
// Single-threaded: one instance serves one partition worker.

import { Kind, kindName, MAX_DEPTH, Node, canonical, parse, quote } from "./chtype";

export { quote };

/** The guest ABI version this SDK implements. */
export const ABI_VERSION: i32 = 1;

// ---- logging ---------------------------------------------------------------

// @ts-ignore: decorator
@external("sluice", "log")
declare function hostLog(level: i32, ptr: usize, len: i32): void;

export const enum Level {
  Debug = 0,
  Info = 1,
  Warn = 2,
  Error = 3,
}

/** Sends a log line to the host, which tags it with the module name and rate-limits it. */
export function log(level: Level, msg: string): void {
  const b = String.UTF8.encode(msg);
  hostLog(<i32>level, changetype<usize>(b), b.byteLength);
}

// ---- config ----------------------------------------------------------------

/** A column a module expects, for Table.expect. */
export class Col {
  constructor(public name: string, public type: string) {}
}

/** col describes a column for Table.expect. */
export function col(name: string, type: string): Col {
  return new Col(name, type);
}

/** A column of a target table, as the host declared it. */
export class Column {
  node: Node | null = null; // null: the SDK cannot write the type (see unsupported)
  unsupported: string = "";
  constructor(public name: string, public type: string) {}

  /** The number of the enum value called name, or -32769 when there is none. */
  enumValue(name: string): i32 {
    let n = this.node;
    while (n != null) {
      for (let i = 0; i < n.enumNames.length; i++) if (n.enumNames[i] == name) return n.enumValues[i];
      n = n.elem;
    }
    return NO_ENUM;
  }
}

/** What Column.enumValue returns for a name the type does not declare. */
export const NO_ENUM: i32 = -32769;

/** A target table: the columns a row must carry, in order. */
export class Table {
  columns: Column[] = [];
  constructor(public name: string, public index: i32) {}

  /**
   * Checks that the table has exactly these columns, in this order, with
   * these types (compared as written, ignoring white space outside quotes),
   * and that the SDK can write each. Returns null, or the message listing
   * every difference: return it from init to refuse the schema.
   */
  expect(cols: Col[]): string | null {
    const problems: string[] = [];
    const n = max(cols.length, this.columns.length);
    for (let i = 0; i < n; i++) {
      const num = (i + 1).toString();
      if (i >= this.columns.length) {
        problems.push("missing column #" + num + " " + cols[i].name + " " + cols[i].type);
      } else if (i >= cols.length) {
        problems.push("unexpected column #" + num + " " + this.columns[i].name + " " + this.columns[i].type);
      } else if (cols[i].name != this.columns[i].name || canonical(cols[i].type) != canonical(this.columns[i].type)) {
        const c = this.columns[i];
        problems.push("column #" + num + " is " + c.name + " " + c.type + ", want " + cols[i].name + " " + cols[i].type);
      } else if (this.columns[i].node == null) {
        problems.push("column #" + num + " " + this.columns[i].name + ": " + this.columns[i].unsupported);
      }
    }
    if (problems.length == 0) return null;
    return "sluice: table " + quote(this.name) + " does not have the columns this module writes: " + problems.join("; ");
  }
}

/** A module parameter. */
export class Param {
  constructor(public key: string, public value: string) {}
}

/** What the host hands the module at init: its parameters and the target tables. */
export class Config {
  params: Param[] = [];
  tables: Table[] = [];
  /** Set by table() when the table is missing: the refusal to return. */
  error: string = "";

  /** The value of the module parameter name, or null. */
  param(name: string): string | null {
    for (let i = 0; i < this.params.length; i++) if (this.params[i].key == name) return this.params[i].value;
    return null;
  }

  /**
   * The target table called name, or null, with this.error set to a
   * message naming the tables the pipeline has: return it from init.
   */
  table(name: string): Table | null {
    for (let i = 0; i < this.tables.length; i++) if (this.tables[i].name == name) return this.tables[i];
    const names: string[] = [];
    for (let i = 0; i < this.tables.length; i++) names.push(quote(this.tables[i].name));
    this.error = "sluice: the pipeline has no target table " + quote(name) + " (tables: " + (names.length ? names.join(", ") : "none") + ")";
    return null;
  }
}

// ---- records ---------------------------------------------------------------

/**
 * One Kafka record. The SDK reuses it for every record; keyPtr/valuePtr
 * point into the batch payload and are valid only during transform. The
 * key and value getters make Uint8Array copies (they allocate).
 */
export class Record {
  topic: string = "";
  partition: i32 = 0;
  offset: i64 = 0;
  /** Milliseconds since the Unix epoch. */
  timestamp: i64 = 0;
  keyPtr: usize = 0;
  keyLen: i32 = 0;
  valuePtr: usize = 0;
  valueLen: i32 = 0;
  headersPtr: usize = 0; // framed: u32 count, then key/value strs
  headersEnd: usize = 0;

  get key(): Uint8Array {
    return copyBytes(this.keyPtr, this.keyLen);
  }

  get value(): Uint8Array {
    return copyBytes(this.valuePtr, this.valueLen);
  }

  /** The value as a string (UTF-8 decoded). */
  valueString(): string {
    return String.UTF8.decodeUnsafe(this.valuePtr, <usize>this.valueLen);
  }

  /** The number of headers. */
  get headerCount(): i32 {
    return <i32>load<u32>(this.headersPtr);
  }

  /** The value of the first header called key, or null. */
  header(key: string): Uint8Array | null {
    const k = String.UTF8.encode(key);
    const kp = changetype<usize>(k);
    const kn = <usize>k.byteLength;
    let p = this.headersPtr;
    const n = load<u32>(p);
    p += 4;
    for (let i: u32 = 0; i < n; i++) {
      const hk = <usize>load<u32>(p);
      const hkp = p + 4;
      p = hkp + hk;
      const hv = <usize>load<u32>(p);
      const hvp = p + 4;
      p = hvp + hv;
      if (hk == kn && memory.compare(hkp, kp, kn) == 0) return copyBytes(hvp, <i32>hv);
    }
    return null;
  }
}

function copyBytes(p: usize, n: i32): Uint8Array {
  const a = new Uint8Array(n);
  memory.copy(a.dataStart, p, <usize>n);
  return a;
}

// ---- the module ------------------------------------------------------------

/** A normalization module. Extend it and register() an instance. */
export abstract class Module {
  /**
   * Called once per instance, before any record, with the parameters and
   * the target tables. Return null to accept, or why the module refuses.
   */
  abstract init(cfg: Config): string | null;

  /**
   * Turns one record into zero or more rows written to out. Return null,
   * or a message that dead-letters this record (and only it).
   */
  abstract transform(rec: Record, out: Output): string | null;
}

let registered: Module | null = null;

/** Registers the module. Call it once, at the top level of the entry file. */
export function register(m: Module): void {
  registered = m;
}

// ---- output ----------------------------------------------------------------

/** Raw, growable output bytes on the heap: no GC traffic per write. */
class Buf {
  ptr: usize = heap.alloc(64 << 10);
  cap: usize = 64 << 10;
  len: usize = 0;

  @inline reserve(n: usize): usize {
    if (this.cap - this.len < n) this.grow(n);
    return this.ptr + this.len;
  }

  grow(n: usize): void {
    let c = this.cap * 2;
    while (c - this.len < n) c *= 2;
    this.ptr = heap.realloc(this.ptr, c);
    this.cap = c;
  }

  @inline u8(v: u8): void {
    store<u8>(this.reserve(1), v);
    this.len += 1;
  }

  uvarint(v: u64): void {
    let p = this.reserve(10);
    const p0 = p;
    while (v >= 0x80) {
      store<u8>(p++, <u8>v | 0x80);
      v >>= 7;
    }
    store<u8>(p++, <u8>v);
    this.len += p - p0;
  }

  raw(src: usize, n: usize): void {
    memory.copy(this.reserve(n), src, n);
    this.len += n;
  }

  str(s: string): void {
    const n = String.UTF8.byteLength(s);
    this.uvarint(<u64>n);
    const p = this.reserve(<usize>n);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p);
    this.len += <usize>n;
  }

  /** A u32 length and the UTF-8 of s (a framed str). */
  framed(s: string): void {
    const n = String.UTF8.byteLength(s);
    store<u32>(this.reserve(4 + <usize>n), <u32>n);
    String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, this.ptr + this.len + 4);
    this.len += 4 + <usize>n;
  }
}

/**
 * The rows a record produces; the SDK hands the same Output to every
 * transform call. Writing a value of the wrong type, too few or too many
 * values, or an undeclared enum value records an error: later writes for
 * the record are ignored and the record is dead-lettered with that message,
 * whatever transform returns.
 */
export class Output {
  buf: Buf = new Buf();
  tables: Table[] = [];
  nrows: u32 = 0;
  err: string | null = null;
  row_!: Row;

  constructor() {
    this.row_ = new Row(this);
  }

  /** Starts a row of table t: write one value per column, in order, then end(). */
  row(t: Table): Row {
    const r = this.row_;
    if (this.err != null) return r;
    if (r.open) {
      this.fail("sluice: table " + quote(r.table.name) + ": Row called before End of the previous row");
      return r;
    }
    if (t.index >= this.tables.length || this.tables[t.index] !== t) {
      this.fail("sluice: table " + quote(t.name) + " is not from this instance's Config");
      return r;
    }
    r.start(t);
    return r;
  }

  /** The record's error so far, or null. */
  error(): string | null {
    return this.err;
  }

  fail(msg: string): void {
    if (this.err == null) this.err = msg;
    this.row_.cur = null;
  }
}

/** A column whose type the SDK cannot write. */
const INVALID = new Node();

/** The writer of one row; its methods return it, so that calls chain. */
export class Row {
  open: bool = false;
  table: Table = new Table("", -1);
  col: i32 = 0;
  cur: Node | null = null; // what the next value must be; null when full or failed
  depth: i32 = 0;
  stackElem: StaticArray<Node | null> = new StaticArray<Node | null>(MAX_DEPTH);
  stackLeft: StaticArray<i32> = new StaticArray<i32>(MAX_DEPTH);
  lenAt: usize = 0; // offset of the row's u32 length

  constructor(private o: Output) {}

  start(t: Table): void {
    this.open = true;
    this.table = t;
    this.col = 0;
    this.depth = 0;
    this.cur = this.columnNode(0);
    const b = this.o.buf;
    store<u16>(b.reserve(6), <u16>t.index);
    this.lenAt = b.len + 2;
    b.len += 6;
  }

  private columnNode(c: i32): Node | null {
    if (c >= this.table.columns.length) return null;
    const n = this.table.columns[c].node;
    return n == null ? INVALID : n;
  }

  @inline private want(k: Kind): bool {
    const t = this.cur;
    if (t != null && t.kind == k) return true;
    return this.wantSlow(k);
  }

  private wantSlow(k: Kind): bool {
    if (this.o.err != null) return false;
    const t = this.cur;
    if (t != null && t.kind == Kind.Nullable && t.elem!.kind == k) {
      this.o.buf.u8(0);
      this.cur = t.elem;
      return true;
    }
    this.mismatch(kindName(k));
    return false;
  }

  private mismatch(got: string): void {
    const o = this.o;
    if (o.err != null) return;
    if (!this.open) {
      o.fail("sluice: " + got + " value written with no row started (call Output.Row first)");
      return;
    }
    const t = this.table;
    const cur = this.cur;
    if (cur == null) {
      o.fail("sluice: table " + quote(t.name) + ": " + got + " value written past the last column (the table has " + t.columns.length.toString() + ")");
      return;
    }
    const c = t.columns[this.col];
    if (cur === INVALID) {
      o.fail("sluice: table " + quote(t.name) + ", column " + quote(c.name) + ": the SDK cannot write type " + c.type + ": " + c.unsupported);
      return;
    }
    const expected = this.depth > 0 ? cur.text + " array element" : cur.text;
    o.fail("sluice: table " + quote(t.name) + ", column " + quote(c.name) + " (" + c.type + "): expected " + expected + ", got " + got);
  }

  private valueError(what: string): void {
    const c = this.table.columns[this.col];
    this.o.fail("sluice: table " + quote(this.table.name) + ", column " + quote(c.name) + " (" + c.type + "): " + what);
  }

  /** Moves past a complete value. */
  private advance(): void {
    while (this.depth > 0) {
      const i = this.depth - 1;
      const left = unchecked(this.stackLeft[i]) - 1;
      unchecked((this.stackLeft[i] = left));
      if (left > 0) {
        this.cur = unchecked(this.stackElem[i]);
        return;
      }
      this.depth--;
    }
    this.col++;
    this.cur = this.columnNode(this.col);
  }

  /** Finishes the row; returns the record's error, or null, so transform can return it. */
  end(): string | null {
    const o = this.o;
    if (o.err == null && this.open && this.cur == null) {
      store<u32>(o.buf.ptr + this.lenAt, <u32>(o.buf.len - this.lenAt - 4));
      this.open = false;
      o.nrows++;
      return null;
    }
    if (o.err == null) {
      if (!this.open) {
        o.fail("sluice: End called with no row started");
      } else {
        const t = this.table;
        const c = t.columns[this.col];
        const what = this.depth > 0 ? "array element of column" : "column";
        o.fail("sluice: table " + quote(t.name) + ": row ended after " + this.col.toString() + " of " + t.columns.length.toString() +
          " columns: " + what + " " + quote(c.name) + " (" + c.type + ") not written");
      }
    }
    return o.err;
  }

  /** The record's error so far, or null. */
  error(): string | null {
    return this.o.err;
  }

  null(): Row {
    const t = this.cur;
    if (this.o.err == null && t != null && t.kind == Kind.Nullable) {
      this.o.buf.u8(1);
      this.advance();
    } else {
      this.mismatch("NULL");
    }
    return this;
  }

  /** Marks a Nullable value as not null (optional: writing a T implies it). */
  notNull(): Row {
    const t = this.cur;
    if (this.o.err == null && t != null && t.kind == Kind.Nullable) {
      this.o.buf.u8(0);
      this.cur = t.elem;
    } else {
      this.mismatch("NotNull");
    }
    return this;
  }

  /** Starts an Array of n elements; the next n writes are its elements. */
  beginArray(n: i32): Row {
    if (!this.want(Kind.Array)) return this;
    if (n < 0) {
      this.valueError("negative array length " + n.toString());
      return this;
    }
    this.o.buf.uvarint(<u64>n);
    if (n == 0) {
      this.advance();
      return this;
    }
    const elem = this.cur!.elem;
    unchecked((this.stackElem[this.depth] = elem));
    unchecked((this.stackLeft[this.depth] = n));
    this.depth++;
    this.cur = elem;
    return this;
  }

  private wantArrayOf(k: Kind, n: i32): bool {
    if (this.o.err != null) return false;
    let t = this.cur;
    const nullable = t != null && t.kind == Kind.Nullable;
    if (nullable) t = t!.elem;
    if (t == null || t.kind != Kind.Array || t.elem!.kind != k) {
      this.mismatch("Array(" + kindName(k) + ")");
      return false;
    }
    if (nullable) this.o.buf.u8(0);
    this.o.buf.uvarint(<u64>n);
    return true;
  }

  /** A whole Array(String). */
  arrayString(v: string[]): Row {
    if (this.wantArrayOf(Kind.String, v.length)) {
      for (let i = 0; i < v.length; i++) this.o.buf.str(v[i]);
      this.advance();
    }
    return this;
  }

  /** A whole Array(Int64). */
  arrayInt64(v: i64[]): Row {
    if (this.wantArrayOf(Kind.Int64, v.length)) {
      for (let i = 0; i < v.length; i++) {
        store<i64>(this.o.buf.reserve(8), v[i]);
        this.o.buf.len += 8;
      }
      this.advance();
    }
    return this;
  }

  /** A whole Array(UInt64). */
  arrayUInt64(v: u64[]): Row {
    if (this.wantArrayOf(Kind.UInt64, v.length)) {
      for (let i = 0; i < v.length; i++) {
        store<u64>(this.o.buf.reserve(8), v[i]);
        this.o.buf.len += 8;
      }
      this.advance();
    }
    return this;
  }

  /** A String (or LowCardinality(String)) from an AssemblyScript string, written as UTF-8. */
  string(s: string): Row {
    if (this.want(Kind.String)) {
      this.o.buf.str(s);
      this.advance();
    }
    return this;
  }

  /** A String from bytes. */
  bytes(b: Uint8Array): Row {
    return this.bytesAt(b.dataStart, b.length);
  }

  /** A String from n bytes at p (e.g. rec.valuePtr, rec.valueLen): no copy in between. */
  bytesAt(p: usize, n: i32): Row {
    if (this.want(Kind.String)) {
      this.o.buf.uvarint(<u64>n);
      this.o.buf.raw(p, <usize>n);
      this.advance();
    }
    return this;
  }

  /** A FixedString(N): b padded with zero bytes to N; longer is an error. */
  fixedString(b: Uint8Array): Row {
    if (!this.want(Kind.FixedString)) return this;
    const n = this.cur!.size;
    if (b.length > n) {
      this.valueError(b.length.toString() + " bytes do not fit");
      return this;
    }
    const p = this.o.buf.reserve(<usize>n);
    memory.copy(p, b.dataStart, <usize>b.length);
    memory.fill(p + <usize>b.length, 0, <usize>(n - b.length));
    this.o.buf.len += <usize>n;
    this.advance();
    return this;
  }

  @inline private fixed<T>(k: Kind, v: T): Row {
    if (this.want(k)) {
      store<T>(this.o.buf.reserve(sizeof<T>()), v);
      this.o.buf.len += sizeof<T>();
      this.advance();
    }
    return this;
  }

  uint8(v: u8): Row { return this.fixed<u8>(Kind.UInt8, v); }
  uint16(v: u16): Row { return this.fixed<u16>(Kind.UInt16, v); }
  uint32(v: u32): Row { return this.fixed<u32>(Kind.UInt32, v); }
  uint64(v: u64): Row { return this.fixed<u64>(Kind.UInt64, v); }
  int8(v: i8): Row { return this.fixed<i8>(Kind.Int8, v); }
  int16(v: i16): Row { return this.fixed<i16>(Kind.Int16, v); }
  int32(v: i32): Row { return this.fixed<i32>(Kind.Int32, v); }
  int64(v: i64): Row { return this.fixed<i64>(Kind.Int64, v); }
  float32(v: f32): Row { return this.fixed<f32>(Kind.Float32, v); }
  float64(v: f64): Row { return this.fixed<f64>(Kind.Float64, v); }
  /** A Date: days since 1970-01-01. */
  date(days: u16): Row { return this.fixed<u16>(Kind.Date, days); }
  /** A DateTime: seconds since the Unix epoch. */
  dateTime(sec: u32): Row { return this.fixed<u32>(Kind.DateTime, sec); }
  /** A DateTime64(P) from its ticks: units of 10^-P seconds since the Unix epoch (milliseconds for P = 3). */
  dateTime64(ticks: i64): Row { return this.fixed<i64>(Kind.DateTime64, ticks); }
  bool(v: bool): Row { return this.fixed<u8>(Kind.Bool, v ? 1 : 0); }

  /** A UUID from its 16 bytes in text order. */
  uuid(u: Uint8Array): Row {
    if (this.want(Kind.UUID)) {
      const p = this.o.buf.reserve(16);
      store<u64>(p, bswap<u64>(load<u64>(u.dataStart)));
      store<u64>(p + 8, bswap<u64>(load<u64>(u.dataStart + 8)));
      this.o.buf.len += 16;
      this.advance();
    }
    return this;
  }

  /** An Enum8 by number; the number must be declared in the type. */
  enum8(v: i8): Row {
    if (this.want(Kind.Enum8) && this.enumOK(<i16>v)) {
      this.o.buf.u8(<u8>v);
      this.advance();
    }
    return this;
  }

  /** An Enum16 by number; the number must be declared in the type. */
  enum16(v: i16): Row {
    if (this.want(Kind.Enum16) && this.enumOK(v)) {
      store<i16>(this.o.buf.reserve(2), v);
      this.o.buf.len += 2;
      this.advance();
    }
    return this;
  }

  private enumOK(v: i16): bool {
    if (this.cur!.hasEnum(v)) return true;
    this.valueError(v.toString() + " is not a declared value");
    return false;
  }

  /** An IPv4 address from its octets a.b.c.d. */
  ipv4(a: u8, b: u8, c: u8, d: u8): Row {
    return this.fixed<u32>(Kind.IPv4, (<u32>a << 24) | (<u32>b << 16) | (<u32>c << 8) | <u32>d);
  }

  /** An IPv6 address from its 16 bytes in network order. */
  ipv6(a: Uint8Array): Row {
    if (this.want(Kind.IPv6)) {
      this.o.buf.raw(a.dataStart, 16);
      this.advance();
    }
    return this;
  }
}

// ---- framing and the exports -------------------------------------------------

let inPtr: usize = 0;
let inCap: usize = 0;
let cfg: Config | null = null;
const out = new Output();
const rec = new Record();
let refusal: ArrayBuffer = new ArrayBuffer(0);

class Reader {
  err: string = "";
  constructor(public p: usize, public end: usize) {}

  short(what: string): void {
    if (this.err == "") this.err = "truncated reading " + what;
    this.p = this.end;
  }

  u32(what: string): u32 {
    if (this.end - this.p >= 4) {
      const v = load<u32>(this.p);
      this.p += 4;
      return v;
    }
    this.short(what);
    return 0;
  }

  u64(what: string): u64 {
    if (this.end - this.p >= 8) {
      const v = load<u64>(this.p);
      this.p += 8;
      return v;
    }
    this.short(what);
    return 0;
  }

  /** Skips a str and returns its start; its length is in this.n. */
  n: usize = 0;
  str(what: string): usize {
    const n = <usize>this.u32(what);
    if (this.end - this.p >= n) {
      const s = this.p;
      this.p += n;
      this.n = n;
      return s;
    }
    this.short(what);
    this.n = 0;
    return 0;
  }

  string(what: string): string {
    const p = this.str(what);
    return String.UTF8.decodeUnsafe(p, this.n);
  }

  count(min: usize, what: string): u32 {
    const n = this.u32(what);
    if (this.err == "" && <u64>n * <u64>min > <u64>(this.end - this.p)) {
      this.err = what + " " + n.toString() + " does not fit in the payload";
      this.p = this.end;
      return 0;
    }
    return n;
  }
}

export function sluice_abi_version(): i32 {
  return ABI_VERSION;
}

export function sluice_alloc(size: i32): usize {
  if (size < 0) return 0;
  if (<usize>size > inCap) {
    if (inPtr != 0) heap.free(inPtr);
    inCap = max<usize>(<usize>size, max<usize>(inCap * 2, 64 << 10));
    inPtr = heap.alloc(inCap);
  }
  return inPtr;
}

function pack(p: usize, n: usize): i64 {
  if (n == 0) return 0;
  return <i64>((<u64>p << 32) | <u64>n);
}

function refuse(msg: string): i64 {
  if (msg.length == 0) msg = "sluice: the module refused its config (empty error message)";
  refusal = String.UTF8.encode(msg);
  return pack(changetype<usize>(refusal), <usize>refusal.byteLength);
}

export function sluice_init(ptr: usize, len: i32): i64 {
  cfg = null;
  const m = registered;
  if (m == null) return refuse("sluice: no module registered: call register() at the top level of the entry file");
  const r = new Reader(ptr, ptr + <usize>max(len, 0));
  const c = new Config();
  const np = r.count(8, "nparams");
  for (let i: u32 = 0; i < np && r.err == ""; i++) {
    const k = r.string("param key");
    const v = r.string("param value");
    c.params.push(new Param(k, v));
  }
  const nt = r.count(8, "ntables");
  for (let i: u32 = 0; i < nt && r.err == ""; i++) {
    const t = new Table(r.string("table name"), <i32>i);
    const nc = r.count(8, "ncolumns");
    for (let j: u32 = 0; j < nc && r.err == ""; j++) {
      const name = r.string("column name");
      const col = new Column(name, r.string("column type"));
      const parsed = parse(col.type);
      col.node = parsed.node;
      col.unsupported = parsed.error;
      t.columns.push(col);
    }
    c.tables.push(t);
  }
  if (r.err == "" && r.p != r.end) r.err = (r.end - r.p).toString() + " trailing bytes";
  if (r.err != "") return refuse("sluice: malformed init payload: " + r.err);
  if (c.tables.length > 65536) return refuse("sluice: " + c.tables.length.toString() + " target tables: a table index is a u16");
  const msg = m.init(c);
  if (msg != null) return refuse(msg);
  cfg = c;
  out.tables = c.tables;
  return 0;
}

function writeError(msg: string): void {
  out.buf.u8(1);
  out.buf.framed(msg.length == 0 ? "sluice: Transform returned an error with an empty message" : msg);
}

export function sluice_transform(ptr: usize, len: i32): i64 {
  const b = out.buf;
  b.len = 0;
  const r = new Reader(ptr, ptr + <usize>max(len, 0));
  rec.topic = r.string("topic");
  rec.partition = <i32>r.u32("partition");
  const n = r.count(28, "nrecords");
  if (r.err != "") {
    log(Level.Error, "sluice: malformed batch payload: " + r.err);
    store<u32>(b.reserve(4), 0);
    b.len += 4;
    return pack(b.ptr, b.len);
  }
  store<u32>(b.reserve(4), n);
  b.len += 4;
  const m = registered!;
  let bad: string | null = null;
  for (let i: u32 = 0; i < n; i++) {
    const started = b.len;
    if (bad == null) {
      rec.offset = <i64>r.u64("offset");
      rec.timestamp = <i64>r.u64("timestamp");
      rec.keyPtr = r.str("key");
      rec.keyLen = <i32>r.n;
      rec.valuePtr = r.str("value");
      rec.valueLen = <i32>r.n;
      rec.headersPtr = r.p;
      const nh = r.count(8, "nheaders");
      for (let j: u32 = 0; j < nh && r.err == ""; j++) {
        r.str("header key");
        r.str("header value");
      }
      rec.headersEnd = r.p;
      if (r.err != "") bad = "sluice: malformed batch payload: record " + i.toString() + ": " + r.err;
    }
    if (bad != null) {
      writeError(bad);
      continue;
    }
    if (cfg == null) {
      writeError("sluice: sluice_transform called before a successful sluice_init");
      continue;
    }
    b.u8(0);
    store<u32>(b.reserve(4), 0);
    b.len += 4;
    out.nrows = 0;
    out.err = null;
    out.row_.open = false;
    out.row_.cur = null;
    let err = m.transform(rec, out);
    if (err == null) err = out.err;
    if (err == null && out.row_.open) err = "sluice: table " + quote(out.row_.table.name) + ": Transform returned without calling End on its row";
    if (err != null) {
      b.len = started;
      writeError(err);
    } else {
      store<u32>(b.ptr + started + 1, out.nrows);
    }
  }
  if (bad == null && r.p != r.end) log(Level.Warn, "sluice: batch payload has " + (r.end - r.p).toString() + " trailing bytes");
  return pack(b.ptr, b.len);
}
