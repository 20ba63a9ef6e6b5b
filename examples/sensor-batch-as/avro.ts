// The Confluent-framed Avro SensorBatch decoder, rule for rule the one of
// examples/sensor-batch/sensor/avro.go, so that a malformed datum fails at
// the same byte with the same message. Strings are (offset, length) pairs
// into the message, read in place in linear memory.

// varint's results, in globals: AssemblyScript has no tuples.
let vValue: i64 = 0;
let vNext: i32 = 0;
const TRUNCATED: i32 = -1;
const OVERFLOW: i32 = -2;

// varint decodes the zigzag varint at p+i (message of len bytes) into
// vValue and vNext and returns 0, or TRUNCATED or OVERFLOW.
// @ts-ignore: decorator
@inline
function varint(p: usize, len: i32, i: i32): i32 {
  let u: u64 = 0;
  for (let s: u64 = 0; s < 64; s += 7) {
    if (i >= len) return TRUNCATED;
    const c = load<u8>(p + <usize>i);
    i++;
    u |= (<u64>(c & 0x7f)) << s;
    if (c < 0x80) {
      if (s == 63 && c > 1) return OVERFLOW;
      vValue = <i64>(u >> 1) ^ -(<i64>(u & 1));
      vNext = i;
      return 0;
    }
  }
  return OVERFLOW;
}

function at(off: i32, msg: string): string {
  return "avro: " + msg + " at byte " + off.toString();
}

function varintMsg(off: i32, rc: i32, what: string): string {
  return rc == TRUNCATED ? at(off, "truncated reading " + what) : at(off, what + ": varint overflows 64 bits");
}

// str reads a string at p+off into sOff/sLen and vNext, or returns the error.
let sOff: i32 = 0;
let sLen: i32 = 0;
function str(p: usize, len: i32, off: i32, what: string): string | null {
  const rc = varint(p, len, off);
  if (rc < 0) return varintMsg(off, rc, what);
  const n = vValue;
  if (n < 0) return at(off, what + ": negative length " + n.toString());
  if (<u64>n > <u64>(len - vNext)) return at(off, what + ": length " + n.toString() + " overruns the message");
  sOff = vNext;
  sLen = <i32>n;
  vNext = vNext + <i32>n;
  return null;
}

export class Header {
  batchId: i64 = 0;
  sensorOff: i32 = 0;
  sensorLen: i32 = 0;
  regionOff: i32 = 0;
  regionLen: i32 = 0; // 0 when null
  batchTsMs: i64 = 0;
  sendTsUs: i64 = 0;
}

export class Event {
  seq: i32 = 0;
  nameOff: i32 = 0;
  nameLen: i32 = 0;
  unitOff: i32 = 0;
  unitLen: i32 = 0;
  value: i64 = 0;
  qualityNull: bool = true;
  quality: f64 = 0;
  ntags: i32 = 0;
  tags: i32[] = []; // offset, length pairs; reused from event to event
}

function hex2(b: u8): string {
  const d = "0123456789abcdef";
  return d.charAt(b >> 4) + d.charAt(b & 15);
}

export class Decoder {
  p: usize = 0;
  len: i32 = 0;
  off: i32 = 0;
  left: i64 = 0;
  done: bool = false;
  err: string | null = null;

  /** Decodes the framing and the header of the message at p into h. */
  reset(p: usize, len: i32, h: Header): string | null {
    this.p = p;
    this.len = len;
    this.off = 0;
    this.left = 0;
    this.done = false;
    this.err = null;
    if (len < 5 || load<u8>(p) != 0) {
      if (len == 0) return "avro: empty message, want Confluent wire format (0x00, schema id, datum)";
      return "avro: not Confluent wire format: first byte 0x" + hex2(load<u8>(p)) + " of " + len.toString() + ", want 0x00 and a 4-byte schema id";
    }
    const id = (<u32>load<u8>(p + 1) << 24) | (<u32>load<u8>(p + 2) << 16) | (<u32>load<u8>(p + 3) << 8) | <u32>load<u8>(p + 4);
    if (id != 1) return "avro: schema id " + id.toString() + ", want 1 (SensorBatch)";
    this.off = 5;
    h.batchId = this.long("batch_id");
    this.bytes("sensor");
    h.sensorOff = sOff;
    h.sensorLen = sLen;
    const u = this.long("region union index");
    if (u == 0) {
      h.regionOff = 0;
      h.regionLen = 0;
    } else if (u == 1) {
      this.bytes("region");
      h.regionOff = sOff;
      h.regionLen = sLen;
    } else {
      this.fail(at(this.off, "region: union index is neither 0 (null) nor 1 (string)"));
    }
    h.batchTsMs = this.long("batch_ts_ms");
    h.sendTsUs = this.long("send_ts_us");
    return this.err;
  }

  fail(msg: string): void {
    if (this.err == null) this.err = msg;
    this.off = this.len;
    this.left = 0;
  }

  failFalse(msg: string): bool {
    this.fail(msg);
    return false;
  }

  long(what: string): i64 {
    const rc = varint(this.p, this.len, this.off);
    if (rc == 0) {
      this.off = vNext;
      return vValue;
    }
    if (this.err == null) this.fail(varintMsg(this.off, rc, what));
    return 0;
  }

  bytes(what: string): void {
    sOff = 0;
    sLen = 0;
    if (this.err != null) return;
    const m = str(this.p, this.len, this.off, what);
    if (m != null) {
      sOff = 0;
      sLen = 0;
      this.fail(m);
      return;
    }
    this.off = vNext;
  }

  blockCount(): i64 {
    const start = this.off;
    let n = this.long("events block count");
    if (n < 0) {
      if (n == i64.MIN_VALUE) {
        this.fail(at(start, "events: block count out of range"));
        return 0;
      }
      n = -n;
      if (this.long("events block size") < 0) {
        this.fail(at(start, "events: negative block size"));
        return 0;
      }
    }
    if (this.err != null) return 0;
    return n;
  }

  /** Decodes the next event into e; false at the end or on an error. */
  next(e: Event): bool {
    if (this.err != null || this.done) return false;
    if (this.left == 0) {
      this.left = this.blockCount();
      if (this.left == 0) {
        this.done = true;
        if (this.err == null && this.off != this.len) {
          this.fail(at(this.off, (this.len - this.off).toString() + " trailing bytes after the datum"));
        }
        return false;
      }
    }
    this.left--;
    const p = this.p, len = this.len;
    let i = this.off;
    let rc = varint(p, len, i);
    if (rc < 0) return this.failFalse(varintMsg(i, rc, "seq"));
    if (vValue < <i64>i32.MIN_VALUE || vValue > <i64>i32.MAX_VALUE) return this.failFalse(at(i, "seq: out of the range of an Avro int"));
    e.seq = <i32>vValue;
    let m = str(p, len, vNext, "name");
    if (m != null) return this.failFalse(m);
    e.nameOff = sOff;
    e.nameLen = sLen;
    m = str(p, len, vNext, "unit");
    if (m != null) return this.failFalse(m);
    e.unitOff = sOff;
    e.unitLen = sLen;
    i = vNext;
    rc = varint(p, len, i);
    if (rc < 0) return this.failFalse(varintMsg(i, rc, "value"));
    e.value = vValue;
    const j = vNext;
    rc = varint(p, len, j);
    if (rc < 0) return this.failFalse(varintMsg(j, rc, "quality union index"));
    const k = vNext;
    if (vValue == 0) {
      e.qualityNull = true;
      e.quality = 0;
      i = k;
    } else if (vValue == 1 && len >= 8 && k <= len - 8) {
      e.qualityNull = false;
      e.quality = load<f64>(p + <usize>k);
      i = k + 8;
    } else if (vValue == 1) {
      return this.failFalse(at(k, "truncated reading quality"));
    } else {
      return this.failFalse(at(j, "quality: union index is neither 0 (null) nor 1 (double)"));
    }
    e.ntags = 0;
    const tags = e.tags;
    while (true) {
      rc = varint(p, len, i);
      if (rc < 0) return this.failFalse(varintMsg(i, rc, "tags block count"));
      let c = vValue;
      let jj = vNext;
      if (c < 0) {
        if (c == i64.MIN_VALUE) return this.failFalse(at(i, "tags: block count out of range"));
        rc = varint(p, len, jj);
        if (rc < 0) return this.failFalse(varintMsg(jj, rc, "tags block size"));
        if (vValue < 0) return this.failFalse(at(jj, "tags: negative block size"));
        c = -c;
        jj = vNext;
      }
      i = jj;
      if (c == 0) break;
      for (; c > 0; c--) {
        m = str(p, len, i, "tag");
        if (m != null) return this.failFalse(m);
        if (2 * e.ntags == tags.length) {
          tags.push(sOff);
          tags.push(sLen);
        } else {
          unchecked((tags[2 * e.ntags] = sOff));
          unchecked((tags[2 * e.ntags + 1] = sLen));
        }
        e.ntags++;
        i = vNext;
      }
    }
    this.off = i;
    return true;
  }
}
