//! The Rust SDK's conformance module: it runs the script each record
//! carries (guest-sdk/conformance/README.md) with the SDK's row writer.

use sluice::{col, Config, Error, Module, Output, Record, Table};

struct Conformance {
    tables: Vec<Table>,
}

impl Module for Conformance {
    fn init(cfg: &Config) -> Result<Self, Error> {
        if let Some(msg) = cfg.param("refuse") {
            return Err(Error::msg(msg));
        }
        if let Some(name) = cfg.param("expect") {
            let t = cfg.table(name)?;
            let spec = cfg.param("columns").unwrap_or("");
            let cols: Vec<_> = spec
                .split('|')
                .map(|c| match c.find(' ') {
                    Some(i) => col(&c[..i], &c[i + 1..]),
                    None => col(c, ""),
                })
                .collect();
            t.expect(&cols)?;
        }
        Ok(Conformance { tables: cfg.tables().to_vec() })
    }

    fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
        let mut s = Script { p: rec.value };
        // The row writer of the open row; a script starts with R.
        let mut w = None;
        while let Some(op) = s.op() {
            if op == b'R' {
                let t = &self.tables[s.u16() as usize];
                w = Some(out.row(t));
                continue;
            }
            if op == b'X' {
                return Err(Error::msg(String::from_utf8_lossy(s.bytes())));
            }
            let w = w.as_mut().expect("a script starts with R");
            match op {
                b'E' => {
                    let _ = w.end();
                }
                b'N' => {
                    w.null();
                }
                b'n' => {
                    w.not_null();
                }
                b'A' => {
                    w.begin_array(s.u32() as usize);
                }
                b'a' => {
                    w.uint8(s.fixed::<1>()[0]);
                }
                b'b' => {
                    w.uint16(s.u16());
                }
                b'c' => {
                    w.uint32(s.u32());
                }
                b'd' => {
                    w.uint64(s.u64());
                }
                b'e' => {
                    w.int8(s.fixed::<1>()[0] as i8);
                }
                b'f' => {
                    w.int16(s.u16() as i16);
                }
                b'g' => {
                    w.int32(s.u32() as i32);
                }
                b'h' => {
                    w.int64(s.u64() as i64);
                }
                b'i' => {
                    w.float32(f32::from_bits(s.u32()));
                }
                b'j' => {
                    w.float64(f64::from_bits(s.u64()));
                }
                b's' => {
                    w.bytes(s.bytes());
                }
                b'x' => {
                    w.fixed_string(s.bytes());
                }
                b'D' => {
                    w.date(s.u16());
                }
                b'T' => {
                    w.datetime(s.u32());
                }
                b't' => {
                    w.datetime64(s.u64() as i64);
                }
                b'B' => {
                    w.bool(s.fixed::<1>()[0] != 0);
                }
                b'U' => {
                    w.uuid(s.fixed::<16>());
                }
                b'm' => {
                    w.enum8(s.fixed::<1>()[0] as i8);
                }
                b'M' => {
                    w.enum16(s.u16() as i16);
                }
                b'v' => {
                    w.ipv4(s.fixed::<4>());
                }
                b'V' => {
                    w.ipv6(s.fixed::<16>());
                }
                b'K' => {
                    w.bytes(rec.key);
                }
                b'O' => {
                    w.int64(rec.offset);
                }
                b'P' => {
                    w.int32(rec.partition);
                }
                b'S' => {
                    w.int64(rec.timestamp);
                }
                b'Q' => {
                    w.string(rec.topic);
                }
                b'H' => {
                    let name = String::from_utf8_lossy(s.bytes()).into_owned();
                    match rec.header(&name) {
                        Some(v) => {
                            w.not_null().bytes(v);
                        }
                        None => {
                            w.null();
                        }
                    }
                }
                b'L' => {
                    let n = s.u32();
                    let v: Vec<&[u8]> = (0..n).map(|_| s.bytes()).collect();
                    w.array_string(&v);
                }
                b'I' => {
                    let n = s.u32();
                    let v: Vec<i64> = (0..n).map(|_| s.u64() as i64).collect();
                    w.array_int64(&v);
                }
                b'W' => {
                    let n = s.u32();
                    let v: Vec<u64> = (0..n).map(|_| s.u64()).collect();
                    w.array_uint64(&v);
                }
                _ => return Err(Error::msg(format!("conformance: unknown op {}", op as char))),
            }
        }
        Ok(())
    }
}

struct Script<'a> {
    p: &'a [u8],
}

impl<'a> Script<'a> {
    fn op(&mut self) -> Option<u8> {
        let (&op, rest) = self.p.split_first()?;
        self.p = rest;
        Some(op)
    }

    fn fixed<const N: usize>(&mut self) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.p[..N]);
        self.p = &self.p[N..];
        a
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.fixed())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.fixed())
    }

    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.fixed())
    }

    fn bytes(&mut self) -> &'a [u8] {
        let n = self.u32() as usize;
        let b = &self.p[..n];
        self.p = &self.p[n..];
        b
    }
}

sluice::export!(Conformance);
