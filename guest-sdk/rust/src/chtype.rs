//! The ClickHouse column types the guest ABI carries, parsed into a flat
//! arena of nodes that the row writer walks with integer compares.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    Invalid,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Int8,
    Int16,
    Int32,
    Int64,
    Float32,
    Float64,
    String,
    FixedString,
    Date,
    DateTime,
    DateTime64,
    Bool,
    Uuid,
    Enum8,
    Enum16,
    IPv4,
    IPv6,
    Nullable,
    Array,
}

impl Kind {
    /// The name used in error messages, as the Go SDK spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Invalid => "unsupported type",
            Kind::UInt8 => "UInt8",
            Kind::UInt16 => "UInt16",
            Kind::UInt32 => "UInt32",
            Kind::UInt64 => "UInt64",
            Kind::Int8 => "Int8",
            Kind::Int16 => "Int16",
            Kind::Int32 => "Int32",
            Kind::Int64 => "Int64",
            Kind::Float32 => "Float32",
            Kind::Float64 => "Float64",
            Kind::String => "String",
            Kind::FixedString => "FixedString",
            Kind::Date => "Date",
            Kind::DateTime => "DateTime",
            Kind::DateTime64 => "DateTime64",
            Kind::Bool => "Bool",
            Kind::Uuid => "UUID",
            Kind::Enum8 => "Enum8",
            Kind::Enum16 => "Enum16",
            Kind::IPv4 => "IPv4",
            Kind::IPv6 => "IPv6",
            Kind::Nullable => "Nullable",
            Kind::Array => "Array",
        }
    }
}

/// The deepest nesting of Array and Nullable a type may have.
pub(crate) const MAX_DEPTH: usize = 8;

/// No node: the row is full (or has failed).
pub(crate) const NONE: u32 = u32::MAX;

/// One parsed type. `elem` indexes the arena for Nullable and Array.
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) size: usize,
    pub(crate) elem: u32,
    pub(crate) enums: Vec<(String, i16)>,
    pub(crate) text: String,
}

/// Parses `s` into `arena` and returns the index of its root node, or the
/// error text (worded as the Go SDK's).
pub(crate) fn parse(arena: &mut Vec<Node>, s: &str) -> Result<u32, String> {
    let mut p = Parser { s: s.as_bytes(), src: s, pos: 0, err: None };
    let mark = arena.len();
    let root = p.typ(arena, 0);
    if p.err.is_none() {
        p.ws();
        if p.pos != p.s.len() {
            let rest = &s[p.pos..];
            p.fail(format!("unexpected {}", crate::quote(rest)));
        }
    }
    match p.err {
        Some(e) => {
            arena.truncate(mark);
            Err(e)
        }
        None => Ok(root),
    }
}

/// `s` without the white space outside quoted names.
pub(crate) fn canonical(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut quoted = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if quoted && c == b'\\' && i + 1 < b.len() {
            out.push(c);
            i += 1;
            out.push(b[i]);
        } else if c == b'\'' {
            quoted = !quoted;
            out.push(c);
        } else if !quoted && (c == b' ' || c == b'\t' || c == b'\r' || c == b'\n') {
        } else {
            out.push(c);
        }
        i += 1;
    }
    String::from_utf8(out).unwrap_or_default()
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
    err: Option<String>,
}

impl<'a> Parser<'a> {
    fn fail(&mut self, msg: String) {
        if self.err.is_none() {
            self.err = Some(format!("type {}: {}", crate::quote(self.src), msg));
        }
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&mut self, c: u8) -> bool {
        self.ws();
        self.pos < self.s.len() && self.s[self.pos] == c
    }

    fn expect(&mut self, c: u8) {
        if !self.peek(c) {
            let pos = self.pos;
            self.fail(format!("expected {} at offset {}", crate::quote(&(c as char).to_string()), pos));
            return;
        }
        self.pos += 1;
    }

    fn ident(&mut self) -> &'a str {
        self.ws();
        let start = self.pos;
        while self.pos < self.s.len() && (self.s[self.pos] == b'_' || self.s[self.pos].is_ascii_alphanumeric()) {
            self.pos += 1;
        }
        &self.src[start..self.pos]
    }

    fn int(&mut self) -> i64 {
        self.ws();
        let start = self.pos;
        if self.pos < self.s.len() && (self.s[self.pos] == b'-' || self.s[self.pos] == b'+') {
            self.pos += 1;
        }
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        match self.src[start..self.pos].parse::<i64>() {
            Ok(v) => v,
            Err(_) => {
                self.fail(format!("expected an integer at offset {}", start));
                0
            }
        }
    }

    fn quoted(&mut self) -> String {
        if !self.peek(b'\'') {
            let pos = self.pos;
            self.fail(format!("expected a quoted name at offset {}", pos));
            return String::new();
        }
        self.pos += 1;
        let mut b = Vec::new();
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            self.pos += 1;
            match c {
                b'\'' => return String::from_utf8_lossy(&b).into_owned(),
                b'\\' => {
                    if self.pos < self.s.len() {
                        b.push(self.s[self.pos]);
                        self.pos += 1;
                    }
                }
                _ => b.push(c),
            }
        }
        self.fail("unterminated quoted name".to_string());
        String::new()
    }

    fn typ(&mut self, arena: &mut Vec<Node>, depth: usize) -> u32 {
        self.ws();
        let start = self.pos;
        let name = self.ident();
        if self.err.is_some() {
            return NONE;
        }
        let mut node = Node { kind: Kind::Invalid, size: 0, elem: NONE, enums: Vec::new(), text: String::new() };
        match name {
            "" => {
                self.fail(format!("expected a type name at offset {}", start));
                return NONE;
            }
            "LowCardinality" => {
                self.expect(b'(');
                let inner = self.typ(arena, depth);
                self.expect(b')');
                if self.err.is_some() {
                    return NONE;
                }
                // LowCardinality(T) is written as T, but keeps its own text.
                let i = &arena[inner as usize];
                node.kind = i.kind;
                node.size = i.size;
                node.elem = i.elem;
                node.enums = i.enums.clone();
            }
            "Nullable" | "Array" => {
                if depth >= MAX_DEPTH {
                    self.fail(format!("nested deeper than {}", MAX_DEPTH));
                    return NONE;
                }
                node.kind = if name == "Array" { Kind::Array } else { Kind::Nullable };
                self.expect(b'(');
                node.elem = self.typ(arena, depth + 1);
                self.expect(b')');
            }
            "FixedString" => {
                node.kind = Kind::FixedString;
                self.expect(b'(');
                let n = self.int();
                self.expect(b')');
                if self.err.is_none() && !(1..=1 << 30).contains(&n) {
                    self.fail(format!("FixedString size {} out of range", n));
                }
                node.size = n as usize;
            }
            "DateTime" => {
                node.kind = Kind::DateTime;
                if self.peek(b'(') {
                    self.pos += 1;
                    self.quoted();
                    self.expect(b')');
                }
            }
            "DateTime64" => {
                // DateTime64(P) or DateTime64(P, 'zone'): Int64 ticks of
                // 10^-P seconds, whatever the zone.
                node.kind = Kind::DateTime64;
                self.expect(b'(');
                let p = self.int();
                if self.err.is_none() && !(0..=9).contains(&p) {
                    self.fail(format!("DateTime64 precision {} out of range", p));
                }
                node.size = p as usize;
                if self.peek(b',') {
                    self.pos += 1;
                    self.quoted();
                }
                self.expect(b')');
            }
            "Enum8" | "Enum16" => {
                let (kind, lo, hi) = if name == "Enum8" { (Kind::Enum8, -128, 127) } else { (Kind::Enum16, -32768, 32767) };
                node.kind = kind;
                self.expect(b'(');
                while self.err.is_none() {
                    let n = self.quoted();
                    self.expect(b'=');
                    let v = self.int();
                    if self.err.is_none() && (v < lo || v > hi) {
                        self.fail(format!("{} value {} out of range", name, v));
                    }
                    node.enums.push((n, v as i16));
                    if !self.peek(b',') {
                        break;
                    }
                    self.pos += 1;
                }
                self.expect(b')');
            }
            _ => {
                node.kind = match name {
                    "UInt8" => Kind::UInt8,
                    "UInt16" => Kind::UInt16,
                    "UInt32" => Kind::UInt32,
                    "UInt64" => Kind::UInt64,
                    "Int8" => Kind::Int8,
                    "Int16" => Kind::Int16,
                    "Int32" => Kind::Int32,
                    "Int64" => Kind::Int64,
                    "Float32" => Kind::Float32,
                    "Float64" => Kind::Float64,
                    "String" => Kind::String,
                    "Date" => Kind::Date,
                    "Bool" | "Boolean" => Kind::Bool,
                    "UUID" => Kind::Uuid,
                    "IPv4" => Kind::IPv4,
                    "IPv6" => Kind::IPv6,
                    _ => {
                        self.fail(format!("{} is not supported by the guest ABI", name));
                        return NONE;
                    }
                }
            }
        }
        if self.err.is_some() {
            return NONE;
        }
        node.text = self.src[start..self.pos].trim().to_string();
        arena.push(node);
        (arena.len() - 1) as u32
    }
}
