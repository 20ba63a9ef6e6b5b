// One JSON log line to the fields of a row of the logs table: the
// AssemblyScript port of examples/log-normalize/normalize (same rules, same
// error messages, via the Rust port examples/log-normalize-rust).

/** A growable byte string on the heap. */
export class Bytes {
  ptr: usize = heap.alloc(64);
  cap: i32 = 64;
  len: i32 = 0;

  clear(): Bytes {
    this.len = 0;
    return this;
  }

  reserve(n: i32): void {
    if (this.len + n <= this.cap) return;
    let c = this.cap * 2;
    while (c < this.len + n) c *= 2;
    this.ptr = heap.realloc(this.ptr, <usize>c);
    this.cap = c;
  }

  push(c: u8): void {
    this.reserve(1);
    store<u8>(this.ptr + <usize>this.len, c);
    this.len++;
  }

  append(p: usize, n: i32): void {
    this.reserve(n);
    memory.copy(this.ptr + <usize>this.len, p, <usize>n);
    this.len += n;
  }

  appendString(s: string): void {
    for (let i = 0; i < s.length; i++) this.push(<u8>s.charCodeAt(i));
  }

  at(i: i32): u8 {
    return load<u8>(this.ptr + <usize>i);
  }

  equals(o: Bytes): bool {
    return this.len == o.len && memory.compare(this.ptr, o.ptr, <usize>this.len) == 0;
  }

  compare(o: Bytes): i32 {
    const n = min(this.len, o.len);
    const c = n > 0 ? memory.compare(this.ptr, o.ptr, <usize>n) : 0;
    if (c != 0) return c;
    return this.len - o.len;
  }

  copyFrom(o: Bytes): void {
    this.len = 0;
    this.append(o.ptr, o.len);
  }

  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, <usize>this.len);
  }
}

function isWord(c: u8): bool {
  return c == 0x5f || (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c >= 0x80;
}
function isHex(c: u8): bool {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}
function isDigit(c: u8): bool {
  return c >= 0x30 && c <= 0x39;
}
function isSpace(c: u8): bool {
  return c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d;
}

// ---- quoting as Go's strconv does --------------------------------------------

function inRange(r: u32, lo: u32, hi: u32): bool {
  return r >= lo && r <= hi;
}

function isPrint(r: u32): bool {
  if (r < 0x20 || inRange(r, 0x7f, 0xa0) || r == 0xad) return false;
  if (r < 0x300) return true;
  if (r == 0x061c || r == 0x06dd || r == 0x070f || r == 0x1680 || r == 0x180e || r == 0x202f || r == 0x205f || r == 0x3000 || r == 0xfeff) return false;
  return !(inRange(r, 0x0600, 0x0605) || inRange(r, 0x2000, 0x200f) || inRange(r, 0x2028, 0x202e) || inRange(r, 0x2060, 0x206f) ||
    inRange(r, 0xd800, 0xf8ff) || inRange(r, 0xfff9, 0xfffb) || (r & 0xfffe) == 0xfffe || r >= 0xf0000 || inRange(r, 0xe0000, 0xe0fff));
}

function utf8Encode(d: Bytes, r: u32): void {
  if (r < 0x80) {
    d.push(<u8>r);
    return;
  }
  if (r < 0x800) {
    d.push(<u8>(0xc0 | (r >> 6)));
    d.push(<u8>(0x80 | (r & 0x3f)));
    return;
  }
  if ((r >= 0xd800 && r < 0xe000) || r > 0x10ffff) r = 0xfffd;
  if (r < 0x10000) {
    d.push(<u8>(0xe0 | (r >> 12)));
    d.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
    d.push(<u8>(0x80 | (r & 0x3f)));
    return;
  }
  d.push(<u8>(0xf0 | (r >> 18)));
  d.push(<u8>(0x80 | ((r >> 12) & 0x3f)));
  d.push(<u8>(0x80 | ((r >> 6) & 0x3f)));
  d.push(<u8>(0x80 | (r & 0x3f)));
}

let decodedRune: u32 = 0;

/** Decodes the rune at p[0..n) as Go's utf8.DecodeRune does; returns its width (0: invalid), the rune in decodedRune. */
function utf8Decode(p: usize, n: i32): i32 {
  const c = load<u8>(p);
  if (c < 0x80) {
    decodedRune = c;
    return 1;
  }
  let w: i32, v: u32, lo: u8 = 0x80, hi: u8 = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    w = 2;
    v = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    w = 3;
    v = c & 0x0f;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    w = 4;
    v = c & 0x07;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  const c1 = n >= 2 ? load<u8>(p + 1) : 0;
  if (n < w || c1 < lo || c1 > hi) return 0;
  v = (v << 6) | (c1 & 0x3f);
  for (let k = 2; k < w; k++) {
    const b = load<u8>(p + <usize>k);
    if ((b & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3f);
  }
  decodedRune = v;
  return w;
}

const HEX = "0123456789abcdef";

function quoteRune(b: Bytes, r: u32, q: u8): void {
  if (r == q || r == 0x5c) {
    b.push(0x5c);
    b.push(<u8>r);
  } else if (isPrint(r)) {
    utf8Encode(b, r);
  } else {
    b.push(0x5c);
    if (r == 0x07) b.push(0x61);
    else if (r == 0x08) b.push(0x62);
    else if (r == 0x0c) b.push(0x66);
    else if (r == 0x0a) b.push(0x6e);
    else if (r == 0x0d) b.push(0x72);
    else if (r == 0x09) b.push(0x74);
    else if (r == 0x0b) b.push(0x76);
    else if (r < 0x20 || r == 0x7f) {
      b.push(0x78);
      b.push(<u8>HEX.charCodeAt((r >> 4) & 15));
      b.push(<u8>HEX.charCodeAt(r & 15));
    } else if (r < 0x10000) {
      b.push(0x75);
      for (let s = 12; s >= 0; s -= 4) b.push(<u8>HEX.charCodeAt((r >> s) & 15));
    } else {
      b.push(0x55);
      for (let s = 28; s >= 0; s -= 4) b.push(<u8>HEX.charCodeAt((r >> s) & 15));
    }
  }
}

function quote(b: Bytes, p: usize, n: i32): void {
  b.push(0x22);
  let i = 0;
  while (i < n) {
    const w = utf8Decode(p + <usize>i, n - i);
    if (w == 0) {
      const c = load<u8>(p + <usize>i);
      b.push(0x5c);
      b.push(0x78);
      b.push(<u8>HEX.charCodeAt(c >> 4));
      b.push(<u8>HEX.charCodeAt(c & 15));
      i++;
      continue;
    }
    quoteRune(b, decodedRune, 0x22);
    i += w;
  }
  b.push(0x22);
}

// ---- the JSON scanner ---------------------------------------------------------

const MAX_DEPTH = 512;

class Scanner {
  i: i32 = 0;
  err: string | null = null;
  constructor(public p: usize, public n: i32) {}

  at(i: i32): u8 {
    return load<u8>(this.p + <usize>i);
  }

  fail(msg: string): bool {
    const b = new Bytes();
    b.appendString("invalid JSON at byte ");
    if (this.i >= this.n) {
      b.appendString(this.n.toString() + ": unexpected end of input, " + msg);
    } else {
      b.appendString(this.i.toString() + ": " + msg + ", found '");
      quoteRune(b, this.at(this.i), 0x27);
      b.push(0x27);
    }
    this.err = b.toString();
    return false;
  }

  ws(): void {
    while (this.i < this.n && isSpace(this.at(this.i))) this.i++;
  }

  next(c: u8): bool {
    this.ws();
    if (this.i < this.n && this.at(this.i) == c) {
      this.i++;
      return true;
    }
    return false;
  }

  peekIs(c: u8): bool {
    return this.i < this.n && this.at(this.i) == c;
  }

  /** Decodes the string at this.i (which holds '"') into out. */
  str(out: Bytes): bool {
    out.clear();
    const start = this.i + 1;
    for (let j = start; j < this.n; j++) {
      const c = this.at(j);
      if (c == 0x22) {
        out.append(this.p + <usize>start, j - start);
        this.i = j + 1;
        return true;
      }
      if (c == 0x5c) return this.strSlow(out, start, j);
      if (c < 0x20) {
        this.i = j;
        return this.fail("control character in string");
      }
    }
    this.i = this.n;
    return this.fail("unterminated string");
  }

  strSlow(a: Bytes, start: i32, j: i32): bool {
    const n = this.n;
    a.append(this.p + <usize>start, j - start);
    while (j < n) {
      const c = this.at(j);
      if (c == 0x22) {
        this.i = j + 1;
        return true;
      }
      if (c < 0x20) {
        this.i = j;
        return this.fail("control character in string");
      }
      if (c != 0x5c) {
        a.push(c);
        j++;
        continue;
      }
      if (j + 1 >= n) break;
      const esc = this.at(j + 1);
      j += 2;
      if (esc == 0x22 || esc == 0x5c || esc == 0x2f) a.push(esc);
      else if (esc == 0x62) a.push(0x08);
      else if (esc == 0x66) a.push(0x0c);
      else if (esc == 0x6e) a.push(0x0a);
      else if (esc == 0x72) a.push(0x0d);
      else if (esc == 0x74) a.push(0x09);
      else if (esc == 0x75) {
        let r = hex4(this, j);
        if (r < 0) {
          this.i = j - 2;
          return this.fail("bad \\u escape");
        }
        j += 4;
        if (r >= 0xd800 && r < 0xdc00 && j + 6 <= n && this.at(j) == 0x5c && this.at(j + 1) == 0x75) {
          const r2 = hex4(this, j + 2);
          if (r2 >= 0xdc00 && r2 < 0xe000) {
            r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
            j += 6;
          }
        }
        utf8Encode(a, <u32>r);
      } else {
        this.i = j - 2;
        return this.fail("bad escape");
      }
    }
    this.i = n;
    return this.fail("unterminated string");
  }

  skipString(): bool {
    const n = this.n;
    for (let j = this.i + 1; j < n; j++) {
      const c = this.at(j);
      if (c == 0x22) {
        this.i = j + 1;
        return true;
      }
      if (c < 0x20) {
        this.i = j;
        return this.fail("control character in string");
      }
      if (c == 0x5c) {
        if (j + 1 >= n) break;
        const e = this.at(j + 1);
        if (e == 0x22 || e == 0x5c || e == 0x2f || e == 0x62 || e == 0x66 || e == 0x6e || e == 0x72 || e == 0x74) {
          j++;
        } else if (e == 0x75) {
          if (hex4(this, j + 2) < 0) {
            this.i = j;
            return this.fail("bad \\u escape");
          }
          j += 5;
        } else {
          this.i = j;
          return this.fail("bad escape");
        }
      }
    }
    this.i = n;
    return this.fail("unterminated string");
  }

  literal(lit: string, msg: string): bool {
    const l = lit.length;
    if (this.n - this.i >= l) {
      let ok = true;
      for (let k = 0; k < l; k++) if (this.at(this.i + k) != <u8>lit.charCodeAt(k)) ok = false;
      if (ok) {
        this.i += l;
        return true;
      }
    }
    return this.fail(msg);
  }

  digits(): i32 {
    const k = this.i;
    while (this.i < this.n && isDigit(this.at(this.i))) this.i++;
    return this.i - k;
  }

  skipNumber(): bool {
    if (this.at(this.i) == 0x2d) this.i++;
    if (this.peekIs(0x30)) this.i++;
    else if (this.digits() == 0) return this.fail("expected a digit");
    if (this.peekIs(0x2e)) {
      this.i++;
      if (this.digits() == 0) return this.fail("expected a digit");
    }
    if (this.peekIs(0x65) || this.peekIs(0x45)) {
      this.i++;
      if (this.peekIs(0x2b) || this.peekIs(0x2d)) this.i++;
      if (this.digits() == 0) return this.fail("expected a digit");
    }
    return true;
  }

  skipComposite(open: u8, depth: i32): bool {
    const closer: u8 = open == 0x5b ? 0x5d : 0x7d;
    this.i++;
    if (this.next(closer)) return true;
    for (;;) {
      if (open == 0x7b) {
        this.ws();
        if (!this.peekIs(0x22)) return this.fail("expected a string key");
        if (!this.skipString()) return false;
        if (!this.next(0x3a)) return this.fail("expected ':'");
      }
      if (!this.skip(depth + 1)) return false;
      if (this.next(0x2c)) continue;
      if (this.next(closer)) return true;
      return this.fail(open == 0x5b ? "expected ',' or ']'" : "expected ',' or '}'");
    }
  }

  skipStart: i32 = 0;

  /** Validates the value at this.i; its raw text is [skipStart, i). */
  skip(depth: i32): bool {
    this.ws();
    const start = this.i;
    if (this.i >= this.n) return this.fail("expected a value");
    const c = this.at(this.i);
    let ok: bool;
    if (c == 0x22) ok = this.skipString();
    else if (c == 0x7b || c == 0x5b) {
      if (depth >= MAX_DEPTH) return this.fail("nested too deep");
      ok = this.skipComposite(c, depth);
    } else if (c == 0x2d || isDigit(c)) ok = this.skipNumber();
    else if (c == 0x74) ok = this.literal("true", "expected true");
    else if (c == 0x66) ok = this.literal("false", "expected false");
    else if (c == 0x6e) ok = this.literal("null", "expected null");
    else return this.fail("expected a value");
    this.skipStart = start;
    return ok;
  }
}

function hex4(s: Scanner, j: i32): i32 {
  if (j + 4 > s.n) return -1;
  let v = 0;
  for (let k = j; k < j + 4; k++) {
    const c = s.at(k);
    let d: i32;
    if (c >= 0x30 && c <= 0x39) d = c - 0x30;
    else if (c >= 0x61 && c <= 0x66) d = c - 0x61 + 10;
    else if (c >= 0x41 && c <= 0x46) d = c - 0x41 + 10;
    else return -1;
    v = (v << 4) | d;
  }
  return v;
}

/** raw (a valid JSON value) without the white space outside its strings. */
function compact(dst: Bytes, raw: Bytes): void {
  dst.clear();
  let inside = false;
  for (let i = 0; i < raw.len; i++) {
    const c = raw.at(i);
    if (inside && c == 0x5c) {
      dst.push(c);
      i++;
      dst.push(raw.at(i));
      continue;
    }
    if (c == 0x22) inside = !inside;
    else if (!inside && isSpace(c)) continue;
    dst.push(c);
  }
}

// ---- levels -----------------------------------------------------------------------

function normalizeLevel(s: Bytes): string {
  let a = 0;
  let z = s.len;
  while (a < z && isSpace(s.at(a))) a++;
  while (z > a && isSpace(s.at(z - 1))) z--;
  if (z - a > 16) return "unknown";
  if (z == a) return "info";
  let b = "";
  for (let i = a; i < z; i++) {
    let c = s.at(i);
    if (c >= 0x41 && c <= 0x5a) c += 0x20;
    b += String.fromCharCode(c);
  }
  if (b == "trace" || b == "trc" || b == "t" || b == "verbose") return "trace";
  if (b == "debug" || b == "dbg" || b == "d") return "debug";
  if (b == "info" || b == "inf" || b == "i" || b == "information" || b == "informational" || b == "notice") return "info";
  if (b == "warn" || b == "warning" || b == "wrn" || b == "w") return "warn";
  if (b == "error" || b == "err" || b == "e") return "error";
  if (b == "emerg" || b == "emergency" || b == "fatal" || b == "ftl" || b == "f" || b == "crit" || b == "critical" || b == "panic" || b == "alert") return "fatal";
  return "unknown";
}

function numericLevel(raw: Bytes): string {
  if (raw.len == 2 && raw.at(1) == 0x30) {
    const c = raw.at(0);
    if (c == 0x31) return "trace";
    if (c == 0x32) return "debug";
    if (c == 0x33) return "info";
    if (c == 0x34) return "warn";
    if (c == 0x35) return "error";
    if (c == 0x36) return "fatal";
  }
  return "unknown";
}

// ---- timestamps ---------------------------------------------------------------------

const NO_TIME: i64 = i64.MIN_VALUE;

function num(s: Bytes, i: i32, w: i32): i64 {
  if (i + w > s.len) return -1;
  let x: i64 = 0;
  for (let k = i; k < i + w; k++) {
    const c = s.at(k);
    if (!isDigit(c)) return -1;
    x = x * 10 + <i64>(c - 0x30);
  }
  return x;
}

function daysIn(year: i64, month: i64): i64 {
  if (month == 2) return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28;
  if (month == 4 || month == 6 || month == 9 || month == 11) return 30;
  return 31;
}

function daysSinceEpoch(year: i64, month: i64, day: i64): i64 {
  if (month <= 2) year--;
  const era = (year >= 0 ? year : year - 399) / 400;
  const yoe = year - era * 400;
  const doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

function parseRFC3339(s: Bytes): i64 {
  const n = s.len;
  if (n < 20 || s.at(4) != 0x2d || s.at(7) != 0x2d || s.at(13) != 0x3a || s.at(16) != 0x3a) return NO_TIME;
  const t = s.at(10);
  if (t != 0x54 && t != 0x74 && t != 0x20) return NO_TIME;
  const year = num(s, 0, 4), month = num(s, 5, 2), day = num(s, 8, 2);
  const hour = num(s, 11, 2), mi = num(s, 14, 2), sec = num(s, 17, 2);
  if (year < 0 || month < 0 || day < 0 || hour < 0 || mi < 0 || sec < 0) return NO_TIME;
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month) || hour > 23 || mi > 59 || sec > 60) return NO_TIME;
  let i = 19;
  if (s.at(i) == 0x2e || s.at(i) == 0x2c) {
    i++;
    const start = i;
    while (i < n && isDigit(s.at(i))) i++;
    if (i == start) return NO_TIME;
  }
  let offset: i64 = 0;
  if (i == n) return NO_TIME;
  const z = s.at(i);
  if (z == 0x5a || z == 0x7a) {
    i++;
  } else if (z == 0x2b || z == 0x2d) {
    let j = i + 3;
    const oh = num(s, i + 1, 2);
    if (j < n && s.at(j) == 0x3a) j++;
    const om = num(s, j, 2);
    if (oh < 0 || om < 0 || oh > 23 || om > 59) return NO_TIME;
    offset = oh * 3600 + om * 60;
    if (z == 0x2d) offset = -offset;
    i = j + 2;
  } else {
    return NO_TIME;
  }
  if (i != n) return NO_TIME;
  return daysSinceEpoch(year, month, day) * 86400 + hour * 3600 + mi * 60 + sec - offset;
}

function epochUnits(v: i64, fracNeg: bool): i64 {
  const a: u64 = v < 0 ? <u64>(-v) : <u64>v;
  let div: i64;
  if (a < 100000000000) div = 1;
  else if (a < 100000000000000) div = 1000;
  else if (a < 100000000000000000) div = 1000000;
  else div = 1000000000;
  let q = v / div;
  if ((v < 0 && v % div != 0) || fracNeg) q--;
  return q;
}

function parseExponent(s: Bytes, e: i32): i64 {
  let k = e + 1;
  if (k < s.len && (s.at(k) == 0x2b || s.at(k) == 0x2d)) k++;
  if (k == s.len) return NO_TIME;
  for (; k < s.len; k++) if (!isDigit(s.at(k))) return NO_TIME;
  const f = parseFloat(s.toString());
  if (!(f <= 9.2e18 && f >= -9.2e18)) return NO_TIME;
  const t = <i64>f;
  return epochUnits(t, f < 0 && <f64>t != f);
}

function parseEpoch(s: Bytes): i64 {
  const n = s.len;
  let i = 0;
  const neg = n > 0 && s.at(0) == 0x2d;
  if (neg) i++;
  const start = i;
  let ip: u64 = 0;
  while (i < n && isDigit(s.at(i))) {
    if (ip > <u64>i64.MAX_VALUE / 10) return NO_TIME;
    ip = ip * 10 + <u64>(s.at(i) - 0x30);
    i++;
  }
  if (i == start) return NO_TIME;
  let frac = false;
  if (i < n && s.at(i) == 0x2e) {
    i++;
    const fs = i;
    while (i < n && isDigit(s.at(i))) {
      if (s.at(i) != 0x30) frac = true;
      i++;
    }
    if (i == fs) return NO_TIME;
  }
  if (i < n && (s.at(i) == 0x65 || s.at(i) == 0x45)) return parseExponent(s, i);
  if (i != n || ip > <u64>i64.MAX_VALUE) return NO_TIME;
  let v = <i64>ip;
  if (neg) v = -v;
  return epochUnits(v, neg && frac);
}

function parseTime(s: Bytes): i64 {
  if (s.len > 0 && (isDigit(s.at(0)) || s.at(0) == 0x2d)) {
    const t = parseEpoch(s);
    if (t != NO_TIME) return t;
  }
  return parseRFC3339(s);
}

// ---- templates ------------------------------------------------------------------------

function endsToken(s: Bytes, j: i32): bool {
  return j >= s.len || !isWord(s.at(j));
}

function matchQuoted(s: Bytes, i: i32): i32 {
  const q = s.at(i);
  for (let j = i + 1; j < s.len; j++) {
    if (s.at(j) == 0x5c) j++;
    else if (s.at(j) == q) return endsToken(s, j + 1) ? j + 1 : 0;
  }
  return 0;
}

function matchUUID(s: Bytes, i: i32): i32 {
  if (s.len - i < 36) return 0;
  for (let k = 0; k < 36; k++) {
    const c = s.at(i + k);
    if (k == 8 || k == 13 || k == 18 || k == 23) {
      if (c != 0x2d) return 0;
    } else if (!isHex(c)) return 0;
  }
  return endsToken(s, i + 36) ? i + 36 : 0;
}

function matchIPv4(s: Bytes, i: i32, n: i32): i32 {
  let j = i;
  for (let part = 0; part < 4; part++) {
    if (part > 0) {
      if (j >= n || s.at(j) != 0x2e) return 0;
      j++;
    }
    j = octetN(s, j, n);
    if (j == 0) return 0;
  }
  if (!(j >= n || !isWord(s.at(j))) || (j + 1 < n && s.at(j) == 0x2e && isDigit(s.at(j + 1)))) return 0;
  if (j + 1 < n && s.at(j) == 0x3a && isDigit(s.at(j + 1))) {
    let k = j + 1;
    while (k < n && k - j <= 5 && isDigit(s.at(k))) k++;
    if (k - j <= 6 && (k >= n || !isWord(s.at(k)))) j = k;
  }
  return j;
}

function octetN(s: Bytes, j: i32, n: i32): i32 {
  let v = 0;
  let k = j;
  while (k < n && k - j < 3 && isDigit(s.at(k))) {
    v = v * 10 + (s.at(k) - 0x30);
    k++;
  }
  return k == j || v > 255 ? 0 : k;
}

/** The text form of an IPv6 address s[i..end) (RFC 4291 2.2) with a decimal digit. */
function validIPv6(s: Bytes, i: i32, end: i32): bool {
  const n = end;
  let groups = 0;
  let compressed = false;
  let digit = false;
  let k = i;
  if (n - i >= 2 && s.at(i) == 0x3a && s.at(i + 1) == 0x3a) {
    compressed = true;
    k = i + 2;
    if (k == n) return false;
  } else if (s.at(i) == 0x3a) return false;
  while (k < n) {
    const start = k;
    while (k < n && isHex(s.at(k))) {
      digit = digit || isDigit(s.at(k));
      k++;
    }
    if (k < n && s.at(k) == 0x2e) {
      if (matchIPv4(s, start, n) != n || groups > 6) return false;
      groups += 2;
      break;
    }
    if (k - start < 1 || k - start > 4) return false;
    groups++;
    if (k == n) break;
    k++;
    if (k < n && s.at(k) == 0x3a) {
      if (compressed) return false;
      compressed = true;
      k++;
      if (k == n) break;
    } else if (k == n) return false;
  }
  if (!digit) return false;
  return compressed ? groups < 8 : groups == 8;
}

function matchIPv6(s: Bytes, i: i32): i32 {
  const n = s.len;
  let j = i;
  while (j < n && (isHex(s.at(j)) || s.at(j) == 0x3a || s.at(j) == 0x2e)) j++;
  if (!endsToken(s, j)) return 0;
  while (j > i && (s.at(j - 1) == 0x2e || (s.at(j - 1) == 0x3a && (j < i + 2 || s.at(j - 2) != 0x3a)))) j--;
  if (j - i < 2 || !validIPv6(s, i, j)) return 0;
  return j;
}

function matchHex(s: Bytes, i: i32, j: i32, ndigits: i32): i32 {
  const n = s.len;
  if (j == i + 1 && s.at(i) == 0x30 && j + 1 < n && (s.at(j) == 0x78 || s.at(j) == 0x58) && isHex(s.at(j + 1))) {
    j += 2;
    while (j < n && isHex(s.at(j))) j++;
    return endsToken(s, j) ? j : 0;
  }
  const len = j - i;
  const letters = len - ndigits;
  if (!endsToken(s, j) || letters == 0 || len < 8 || (len < 16 && ndigits == 0)) return 0;
  return j;
}

function matchNumber(s: Bytes, i: i32): i32 {
  const n = s.len;
  let j = i;
  if (s.at(j) == 0x2d || s.at(j) == 0x2b) j++;
  const start = j;
  while (j < n && isDigit(s.at(j))) j++;
  if (j == start) return 0;
  if (j + 1 < n && s.at(j) == 0x2e && isDigit(s.at(j + 1))) {
    j += 2;
    while (j < n && isDigit(s.at(j))) j++;
  }
  if (j + 1 < n && (s.at(j) == 0x65 || s.at(j) == 0x45)) {
    let k = j + 1;
    if (k + 1 < n && (s.at(k) == 0x2b || s.at(k) == 0x2d)) k++;
    if (k < n && isDigit(s.at(k))) {
      while (k < n && isDigit(s.at(k))) k++;
      if (endsToken(s, k)) j = k;
    }
  }
  return j;
}

/** Appends the template of msg to dst. */
export function appendTemplate(dst: Bytes, msg: Bytes): void {
  const n = msg.len;
  let i = 0;
  while (i < n) {
    const c = msg.at(i);
    if (i > 0 && isWord(msg.at(i - 1))) {
      dst.push(c);
      i++;
      continue;
    }
    if (c == 0x22 || c == 0x27) {
      const j = matchQuoted(msg, i);
      if (j > 0) {
        dst.appendString("<str>");
        i = j;
        continue;
      }
    }
    if (isHex(c) || c == 0x3a) {
      let j = i;
      let nd = 0;
      while (j < n && isHex(msg.at(j))) {
        if (isDigit(msg.at(j))) nd++;
        j++;
      }
      const len = j - i;
      const nx: u8 = j < n ? msg.at(j) : 0;
      let k = 0;
      if (len == 8 && nx == 0x2d) {
        k = matchUUID(msg, i);
        if (k > 0) dst.appendString("<uuid>");
      } else if (len > 0 && len <= 3 && nx == 0x2e && nd == len) {
        k = matchIPv4(msg, i, n);
        if (k > 0) dst.appendString("<ip>");
      }
      if (k == 0 && len <= 4 && nx == 0x3a) {
        k = matchIPv6(msg, i);
        if (k > 0) dst.appendString("<ip>");
      }
      if (k == 0) {
        k = matchHex(msg, i, j, nd);
        if (k > 0) dst.appendString("<hex>");
      }
      if (k > 0) {
        i = k;
        continue;
      }
    }
    const j = matchNumber(msg, i);
    if (j > 0) {
      dst.appendString("<num>");
      i = j;
      continue;
    }
    if (isWord(c)) {
      let j = i + 1;
      while (j < n && (isWord(msg.at(j)) || (msg.at(j) == 0x2e && j + 1 < n && isWord(msg.at(j + 1))))) j++;
      dst.append(msg.ptr + <usize>i, j - i);
      i = j;
      continue;
    }
    dst.push(c);
    i++;
  }
}

/** The 64-bit FNV-1a hash of b. */
export function fingerprint(b: Bytes): u64 {
  let h: u64 = 14695981039346656037;
  for (let i = 0; i < b.len; i++) {
    h ^= <u64>b.at(i);
    h *= 1099511628211;
  }
  return h;
}

// ---- the line ---------------------------------------------------------------------------

class Field {
  val: Bytes = new Bytes();
  isStr: bool = false; // a decoded string; otherwise raw JSON
  set: bool = false; // present and not null

  reset(): void {
    this.val.clear();
    this.isStr = false;
    this.set = false;
  }
}

export class Attr {
  key: Bytes = new Bytes();
  value: Bytes = new Bytes();
}

/** A normalized log line. One Entry is reused for many lines. */
export class Entry {
  time: i64 = 0; // seconds since the Unix epoch, rounded down
  service: Bytes = new Bytes();
  level: string = "";
  msg: Bytes = new Bytes();
  template: Bytes = new Bytes();
  fingerprint: u64 = 0;
  attrs: Attr[] = []; // sorted by key; of duplicate keys, the last wins
  nattrs: i32 = 0;

  // reused from line to line
  ts: Field = new Field();
  lvl: Field = new Field();
  svc: Field = new Field();
  msgF: Field = new Field();
  key: Bytes = new Bytes();
  f: Field = new Field();
  tmp: Bytes = new Bytes();

  attr(i: i32): Attr {
    while (this.attrs.length <= i) this.attrs.push(new Attr());
    return this.attrs[i];
  }
}

/** text: a string as decoded, anything else compacted. */
function text(dst: Bytes, f: Field): void {
  if (f.isStr || f.val.len == 0 || (f.val.at(0) != 0x7b && f.val.at(0) != 0x5b)) dst.copyFrom(f.val);
  else compact(dst, f.val);
}

function copyField(dst: Field, src: Field): void {
  dst.val.copyFrom(src.val);
  dst.isStr = src.isStr;
  dst.set = src.set;
}

function isNull(b: Bytes): bool {
  return b.len == 4 && b.at(0) == 0x6e && b.at(1) == 0x75 && b.at(2) == 0x6c && b.at(3) == 0x6c;
}

function keyIs(k: Bytes, s: string): bool {
  if (k.len != s.length) return false;
  for (let i = 0; i < k.len; i++) if (k.at(i) != <u8>s.charCodeAt(i)) return false;
  return true;
}

/** Parses the JSON object at p[0..n) into e; returns null, or why it cannot. */
export function normalize(p: usize, n: i32, kafkaTsMillis: i64, e: Entry): string | null {
  const s = new Scanner(p, n);
  e.nattrs = 0;
  e.ts.reset();
  e.lvl.reset();
  e.svc.reset();
  e.msgF.reset();
  s.ws();
  if (!s.peekIs(0x7b)) return "value is not a JSON object";
  s.i++;
  if (!s.next(0x7d)) {
    // A while with a flag: built with asc 0.28.20, the for (;;) { … break; }
    // form of this loop trapped (unreachable) right after the break.
    let more = true;
    while (more) {
      s.ws();
      if (!s.peekIs(0x22)) {
        s.fail("expected a string key");
        return s.err;
      }
      if (!s.str(e.key)) return s.err;
      if (!s.next(0x3a)) {
        s.fail("expected ':'");
        return s.err;
      }
      const f = e.f;
      f.reset();
      s.ws();
      if (s.peekIs(0x22)) {
        f.isStr = true;
        if (!s.str(f.val)) return s.err;
      } else {
        if (!s.skip(0)) return s.err;
        f.val.append(p + <usize>s.skipStart, s.i - s.skipStart);
      }
      f.set = f.isStr || !isNull(f.val);
      const k = e.key;
      if (keyIs(k, "ts")) copyField(e.ts, f);
      else if (keyIs(k, "level")) copyField(e.lvl, f);
      else if (keyIs(k, "service")) copyField(e.svc, f);
      else if (keyIs(k, "msg")) copyField(e.msgF, f);
      else {
        const a = e.attr(e.nattrs++);
        a.key.copyFrom(k);
        if (!f.isStr && f.val.len > 0 && (f.val.at(0) == 0x7b || f.val.at(0) == 0x5b)) compact(a.value, f.val);
        else a.value.copyFrom(f.val);
      }
      if (s.next(0x2c)) continue;
      if (!s.next(0x7d)) {
        s.fail("expected ',' or '}'");
        return s.err;
      }
      more = false;
    }
  }
  s.ws();
  if (s.i != n) {
    s.fail("unexpected data after the object");
    return s.err;
  }
  if (!e.msgF.set) return 'log line has no "msg" field (or it is null)';
  text(e.msg, e.msgF);

  const ts = e.ts;
  if (!ts.set) {
    e.time = kafkaTsMillis / 1000;
    if (kafkaTsMillis % 1000 != 0 && kafkaTsMillis < 0) e.time--;
  } else {
    const t = ts.isStr ? parseTime(ts.val) : parseEpoch(ts.val);
    if (t == NO_TIME) {
      const b = e.tmp.clear();
      b.appendString("ts ");
      if (ts.isStr) quote(b, ts.val.ptr, ts.val.len);
      else b.append(ts.val.ptr, ts.val.len);
      b.appendString(" is neither RFC 3339 nor a number of (milli)seconds since the epoch");
      return b.toString();
    }
    e.time = t;
  }

  const lv = e.lvl;
  if (!lv.set) e.level = "info";
  else if (lv.isStr) e.level = normalizeLevel(lv.val);
  else if (lv.val.len > 0 && (lv.val.at(0) == 0x2d || isDigit(lv.val.at(0)))) e.level = numericLevel(lv.val);
  else e.level = "unknown";

  if (e.svc.set && e.svc.val.len > 0) text(e.service, e.svc);
  else {
    e.service.clear();
    e.service.appendString("unknown");
  }

  e.template.clear();
  appendTemplate(e.template, e.msg);
  e.fingerprint = fingerprint(e.template);

  if (e.nattrs > 1) {
    // A stable insertion sort by key, then keep the last of equal keys.
    const a = e.attrs;
    for (let i = 1; i < e.nattrs; i++) {
      const x = a[i];
      let j = i;
      while (j > 0 && a[j - 1].key.compare(x.key) > 0) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = x;
    }
    let k = 0;
    for (let i = 0; i < e.nattrs; i++) {
      if (i + 1 < e.nattrs && a[i].key.equals(a[i + 1].key)) continue;
      const t = a[k];
      a[k] = a[i];
      a[i] = t;
      k++;
    }
    e.nattrs = k;
  }
  return null;
}
