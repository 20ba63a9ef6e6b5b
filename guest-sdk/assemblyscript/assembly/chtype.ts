// The ClickHouse column types the guest ABI carries, parsed into a small
// tree that the row writer walks with integer compares.

export const enum Kind {
  Invalid = 0,
  UInt8, UInt16, UInt32, UInt64,
  Int8, Int16, Int32, Int64,
  Float32, Float64,
  String, FixedString,
  Date, DateTime, Bool, UUID,
  Enum8, Enum16, IPv4, IPv6,
  Nullable, Array,
  DateTime64,
}

const KIND_NAMES: string[] = [
  "unsupported type", "UInt8", "UInt16", "UInt32", "UInt64", "Int8", "Int16", "Int32", "Int64",
  "Float32", "Float64", "String", "FixedString", "Date", "DateTime", "Bool", "UUID",
  "Enum8", "Enum16", "IPv4", "IPv6", "Nullable", "Array", "DateTime64",
];

/** The name of a kind in error messages, as every SDK spells it. */
export function kindName(k: Kind): string {
  return KIND_NAMES[<i32>k];
}

/** The deepest nesting of Array and Nullable a type may have. */
export const MAX_DEPTH = 8;

/** A parsed column type. */
export class Node {
  kind: Kind = Kind.Invalid;
  size: i32 = 0; // FixedString(N): N; DateTime64(P): P
  elem: Node | null = null; // Nullable(T), Array(T): T
  enumNames: string[] = [];
  enumValues: i16[] = [];
  text: string = "";

  hasEnum(v: i16): bool {
    for (let i = 0; i < this.enumValues.length; i++) if (this.enumValues[i] == v) return true;
    return false;
  }
}

/** s quoted as Go's %q quotes it, so that every SDK words its errors alike. */
export function quote(s: string): string {
  let out = "\"";
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22) out += "\\\"";
    else if (c == 0x5c) out += "\\\\";
    else if (c == 0x0a) out += "\\n";
    else if (c == 0x09) out += "\\t";
    else if (c == 0x0d) out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += "\\x" + (c < 16 ? "0" : "") + c.toString(16);
    else out += String.fromCharCode(c);
  }
  return out + "\"";
}

function isSpace(c: i32): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

/** s without the white space outside quoted names. */
export function canonical(s: string): string {
  let out = "";
  let quoted = false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (quoted && c == 0x5c && i + 1 < s.length) {
      out += s.charAt(i) + s.charAt(i + 1);
      i++;
      continue;
    }
    if (c == 0x27) quoted = !quoted;
    else if (!quoted && isSpace(c)) continue;
    out += s.charAt(i);
  }
  return out;
}

/** The result of parse: a node, or why the type is not supported. */
export class Parsed {
  node: Node | null = null;
  error: string = "";
}

export function parse(s: string): Parsed {
  const p = new Parser(s);
  const res = new Parsed();
  const n = p.typ(0);
  if (p.err == "") {
    p.ws();
    if (p.pos != s.length) p.fail("unexpected " + quote(s.substring(p.pos)));
  }
  if (p.err != "") res.error = p.err;
  else res.node = n;
  return res;
}

function isIdent(c: i32): bool {
  return c == 0x5f || (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
}

class Parser {
  pos: i32 = 0;
  err: string = "";
  constructor(public s: string) {}

  fail(msg: string): void {
    if (this.err == "") this.err = "type " + quote(this.s) + ": " + msg;
  }

  ws(): void {
    while (this.pos < this.s.length && isSpace(this.s.charCodeAt(this.pos))) this.pos++;
  }

  peek(c: i32): bool {
    this.ws();
    return this.pos < this.s.length && this.s.charCodeAt(this.pos) == c;
  }

  expect(c: i32): void {
    if (!this.peek(c)) {
      this.fail("expected " + quote(String.fromCharCode(c)) + " at offset " + this.pos.toString());
      return;
    }
    this.pos++;
  }

  ident(): string {
    this.ws();
    const start = this.pos;
    while (this.pos < this.s.length && isIdent(this.s.charCodeAt(this.pos))) this.pos++;
    return this.s.substring(start, this.pos);
  }

  int(): i64 {
    this.ws();
    const start = this.pos;
    if (this.pos < this.s.length && (this.s.charCodeAt(this.pos) == 0x2d || this.s.charCodeAt(this.pos) == 0x2b)) this.pos++;
    const digits = this.pos;
    while (this.pos < this.s.length && this.s.charCodeAt(this.pos) >= 0x30 && this.s.charCodeAt(this.pos) <= 0x39) this.pos++;
    if (this.pos == digits || this.pos - digits > 18) {
      this.fail("expected an integer at offset " + start.toString());
      return 0;
    }
    return I64.parseInt(this.s.substring(start, this.pos), 10);
  }

  quoted(): string {
    if (!this.peek(0x27)) {
      this.fail("expected a quoted name at offset " + this.pos.toString());
      return "";
    }
    this.pos++;
    let b = "";
    while (this.pos < this.s.length) {
      const c = this.s.charCodeAt(this.pos);
      this.pos++;
      if (c == 0x27) return b;
      if (c == 0x5c) {
        if (this.pos < this.s.length) {
          b += this.s.charAt(this.pos);
          this.pos++;
        }
      } else {
        b += String.fromCharCode(c);
      }
    }
    this.fail("unterminated quoted name");
    return "";
  }

  typ(depth: i32): Node | null {
    this.ws();
    const start = this.pos;
    const name = this.ident();
    if (this.err != "") return null;
    const t = new Node();
    if (name == "") {
      this.fail("expected a type name at offset " + start.toString());
      return null;
    } else if (name == "LowCardinality") {
      this.expect(0x28);
      const inner = this.typ(depth);
      this.expect(0x29);
      if (this.err != "" || inner == null) return null;
      t.kind = inner.kind;
      t.size = inner.size;
      t.elem = inner.elem;
      t.enumNames = inner.enumNames;
      t.enumValues = inner.enumValues;
    } else if (name == "Nullable" || name == "Array") {
      if (depth >= MAX_DEPTH) {
        this.fail("nested deeper than " + MAX_DEPTH.toString());
        return null;
      }
      t.kind = name == "Array" ? Kind.Array : Kind.Nullable;
      this.expect(0x28);
      t.elem = this.typ(depth + 1);
      this.expect(0x29);
    } else if (name == "FixedString") {
      t.kind = Kind.FixedString;
      this.expect(0x28);
      const n = this.int();
      this.expect(0x29);
      if (this.err == "" && (n < 1 || n > (1 << 30))) this.fail("FixedString size " + n.toString() + " out of range");
      t.size = <i32>n;
    } else if (name == "DateTime") {
      t.kind = Kind.DateTime;
      if (this.peek(0x28)) {
        this.pos++;
        this.quoted();
        this.expect(0x29);
      }
    } else if (name == "DateTime64") {
      // DateTime64(P) or DateTime64(P, 'zone'): Int64 ticks of 10^-P
      // seconds, whatever the zone.
      t.kind = Kind.DateTime64;
      this.expect(0x28);
      const p = this.int();
      if (this.err == "" && (p < 0 || p > 9)) this.fail("DateTime64 precision " + p.toString() + " out of range");
      t.size = <i32>p;
      if (this.peek(0x2c)) {
        this.pos++;
        this.quoted();
      }
      this.expect(0x29);
    } else if (name == "Enum8" || name == "Enum16") {
      t.kind = name == "Enum8" ? Kind.Enum8 : Kind.Enum16;
      const lo: i64 = name == "Enum8" ? -128 : -32768;
      const hi: i64 = name == "Enum8" ? 127 : 32767;
      this.expect(0x28);
      while (this.err == "") {
        const n = this.quoted();
        this.expect(0x3d);
        const v = this.int();
        if (this.err == "" && (v < lo || v > hi)) this.fail(name + " value " + v.toString() + " out of range");
        t.enumNames.push(n);
        t.enumValues.push(<i16>v);
        if (!this.peek(0x2c)) break;
        this.pos++;
      }
      this.expect(0x29);
    } else {
      const k = simpleKind(name);
      if (k == Kind.Invalid) {
        this.fail(name + " is not supported by the guest ABI");
        return null;
      }
      t.kind = k;
    }
    if (this.err != "") return null;
    t.text = this.s.substring(start, this.pos).trim();
    return t;
  }
}

function simpleKind(name: string): Kind {
  if (name == "UInt8") return Kind.UInt8;
  if (name == "UInt16") return Kind.UInt16;
  if (name == "UInt32") return Kind.UInt32;
  if (name == "UInt64") return Kind.UInt64;
  if (name == "Int8") return Kind.Int8;
  if (name == "Int16") return Kind.Int16;
  if (name == "Int32") return Kind.Int32;
  if (name == "Int64") return Kind.Int64;
  if (name == "Float32") return Kind.Float32;
  if (name == "Float64") return Kind.Float64;
  if (name == "String") return Kind.String;
  if (name == "Date") return Kind.Date;
  if (name == "Bool" || name == "Boolean") return Kind.Bool;
  if (name == "UUID") return Kind.UUID;
  if (name == "IPv4") return Kind.IPv4;
  if (name == "IPv6") return Kind.IPv6;
  return Kind.Invalid;
}
