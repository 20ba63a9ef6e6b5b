//! The Confluent-framed Avro SensorBatch decoder, rule for rule the one of
//! examples/sensor-batch/sensor/avro.go, so that a malformed datum fails
//! at the same byte with the same message. Strings are byte ranges of the
//! message; nothing is allocated per event once the tag list has grown.

pub const SCHEMA_ID: u32 = 1;

/// The batch-level fields; ranges index the message.
#[derive(Default)]
pub struct Header {
    pub batch_id: i64,
    pub sensor: (usize, usize),
    pub region: (usize, usize), // empty when null
    pub batch_ts_ms: i64,
    pub send_ts_us: i64,
}

#[derive(Default)]
pub struct Event {
    pub seq: i32,
    pub name: (usize, usize),
    pub unit: (usize, usize),
    pub value: i64,
    pub quality: Option<f64>,
    pub tags: Vec<(usize, usize)>, // reused from event to event
}

/// Why a varint did not decode.
#[derive(Clone, Copy)]
enum Bad {
    Truncated,
    Overflow,
}

/// The zigzag varint at p[i..] and the offset after it.
#[inline(always)]
fn varint(p: &[u8], mut i: usize) -> Result<(i64, usize), Bad> {
    let mut u: u64 = 0;
    let mut s = 0u32;
    while s < 64 {
        if i >= p.len() {
            return Err(Bad::Truncated);
        }
        let c = p[i];
        i += 1;
        u |= ((c & 0x7f) as u64) << s;
        if c < 0x80 {
            if s == 63 && c > 1 {
                return Err(Bad::Overflow);
            }
            return Ok((((u >> 1) as i64) ^ -((u & 1) as i64), i));
        }
        s += 7;
    }
    Err(Bad::Overflow)
}

fn varint_msg(off: usize, b: Bad, what: &str) -> String {
    match b {
        Bad::Truncated => at(off, &format!("truncated reading {}", what)),
        Bad::Overflow => at(off, &format!("{}: varint overflows 64 bits", what)),
    }
}

fn at(off: usize, msg: &str) -> String {
    format!("avro: {} at byte {}", msg, off)
}

/// A string at p[off..]: its range and the offset after it.
#[inline(always)]
fn string(p: &[u8], off: usize, what: &str) -> Result<((usize, usize), usize), String> {
    match varint(p, off) {
        Err(b) => Err(varint_msg(off, b, what)),
        Ok((n, _)) if n < 0 => Err(at(off, &format!("{}: negative length {}", what, n))),
        Ok((n, k)) if n as u64 > (p.len() - k) as u64 => Err(at(off, &format!("{}: length {} overruns the message", what, n))),
        Ok((n, k)) => Ok(((k, k + n as usize), k + n as usize)),
    }
}

pub struct Decoder<'a> {
    p: &'a [u8],
    off: usize,
    left: i64,
    done: bool,
    err: Option<String>,
}

impl<'a> Decoder<'a> {
    /// Decodes the framing and the header of msg into h.
    pub fn new(msg: &'a [u8], h: &mut Header) -> Result<Decoder<'a>, String> {
        if msg.len() < 5 || msg[0] != 0 {
            if msg.is_empty() {
                return Err("avro: empty message, want Confluent wire format (0x00, schema id, datum)".to_string());
            }
            return Err(format!(
                "avro: not Confluent wire format: first byte 0x{:02x} of {}, want 0x00 and a 4-byte schema id",
                msg[0],
                msg.len()
            ));
        }
        let id = u32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]);
        if id != SCHEMA_ID {
            return Err(format!("avro: schema id {}, want {} (SensorBatch)", id, SCHEMA_ID));
        }
        let mut d = Decoder { p: msg, off: 5, left: 0, done: false, err: None };
        h.batch_id = d.long("batch_id");
        h.sensor = d.bytes("sensor");
        match d.long("region union index") {
            0 => h.region = (0, 0),
            1 => h.region = d.bytes("region"),
            _ => d.fail(at(d.off, "region: union index is neither 0 (null) nor 1 (string)")),
        }
        h.batch_ts_ms = d.long("batch_ts_ms");
        h.send_ts_us = d.long("send_ts_us");
        match d.err.take() {
            Some(e) => Err(e),
            None => Ok(d),
        }
    }

    /// The message the ranges index.
    pub fn bytes_of(&self, r: (usize, usize)) -> &'a [u8] {
        &self.p[r.0..r.1]
    }

    /// The first decoding error, if any.
    pub fn take_err(&mut self) -> Option<String> {
        self.err.take()
    }

    fn fail(&mut self, msg: String) {
        if self.err.is_none() {
            self.err = Some(msg);
        }
        self.off = self.p.len();
        self.left = 0;
    }

    fn fail_false(&mut self, msg: String) -> bool {
        self.fail(msg);
        false
    }

    fn long(&mut self, what: &str) -> i64 {
        match varint(self.p, self.off) {
            Ok((v, next)) => {
                self.off = next;
                v
            }
            Err(b) => {
                if self.err.is_none() {
                    let m = varint_msg(self.off, b, what);
                    self.fail(m);
                }
                0
            }
        }
    }

    fn bytes(&mut self, what: &str) -> (usize, usize) {
        if self.err.is_some() {
            return (0, 0);
        }
        match string(self.p, self.off, what) {
            Ok((r, next)) => {
                self.off = next;
                r
            }
            Err(m) => {
                self.fail(m);
                (0, 0)
            }
        }
    }

    fn block_count(&mut self) -> i64 {
        let start = self.off;
        let mut n = self.long("events block count");
        if n < 0 {
            if n == i64::MIN {
                self.fail(at(start, "events: block count out of range"));
                return 0;
            }
            n = -n;
            if self.long("events block size") < 0 {
                self.fail(at(start, "events: negative block size"));
                return 0;
            }
        }
        if self.err.is_some() {
            return 0;
        }
        n
    }

    /// Decodes the next event into e; false at the end or on an error.
    pub fn next(&mut self, e: &mut Event) -> bool {
        if self.err.is_some() || self.done {
            return false;
        }
        if self.left == 0 {
            self.left = self.block_count();
            if self.left == 0 {
                self.done = true;
                if self.err.is_none() && self.off != self.p.len() {
                    let m = at(self.off, &format!("{} trailing bytes after the datum", self.p.len() - self.off));
                    self.fail(m);
                }
                return false;
            }
        }
        self.left -= 1;
        let p = self.p;
        let i = self.off;
        let (seq, j) = match varint(p, i) {
            Err(b) => return self.fail_false(varint_msg(i, b, "seq")),
            Ok((v, _)) if v < i32::MIN as i64 || v > i32::MAX as i64 => {
                return self.fail_false(at(i, "seq: out of the range of an Avro int"))
            }
            Ok(x) => x,
        };
        e.seq = seq as i32;
        let (name, i) = match string(p, j, "name") {
            Ok(x) => x,
            Err(m) => return self.fail_false(m),
        };
        e.name = name;
        let (unit, i) = match string(p, i, "unit") {
            Ok(x) => x,
            Err(m) => return self.fail_false(m),
        };
        e.unit = unit;
        let (value, j) = match varint(p, i) {
            Ok(x) => x,
            Err(b) => return self.fail_false(varint_msg(i, b, "value")),
        };
        e.value = value;
        let mut i = match varint(p, j) {
            Err(b) => return self.fail_false(varint_msg(j, b, "quality union index")),
            Ok((0, k)) => {
                e.quality = None;
                k
            }
            Ok((1, k)) if p.len() >= 8 && k <= p.len() - 8 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&p[k..k + 8]);
                e.quality = Some(f64::from_le_bytes(b));
                k + 8
            }
            Ok((1, k)) => return self.fail_false(at(k, "truncated reading quality")),
            Ok(_) => return self.fail_false(at(j, "quality: union index is neither 0 (null) nor 1 (double)")),
        };
        e.tags.clear();
        loop {
            let (mut c, mut j) = match varint(p, i) {
                Ok(x) => x,
                Err(b) => return self.fail_false(varint_msg(i, b, "tags block count")),
            };
            if c < 0 {
                if c == i64::MIN {
                    return self.fail_false(at(i, "tags: block count out of range"));
                }
                match varint(p, j) {
                    Err(b) => return self.fail_false(varint_msg(j, b, "tags block size")),
                    Ok((size, _)) if size < 0 => return self.fail_false(at(j, "tags: negative block size")),
                    Ok((_, k)) => {
                        c = -c;
                        j = k;
                    }
                }
            }
            i = j;
            if c == 0 {
                break;
            }
            while c > 0 {
                match string(p, i, "tag") {
                    Ok((r, next)) => {
                        e.tags.push(r);
                        i = next;
                    }
                    Err(m) => return self.fail_false(m),
                }
                c -= 1;
            }
        }
        self.off = i;
        true
    }
}
