//! The Rust SDK for sluice normalization modules: WebAssembly modules that
//! the sluice host runs on every batch of Kafka records to turn them into
//! ClickHouse rows. It implements the guest side of the guest ABI, version 1
//! (guest-sdk/ABI.md): the exports, the binary framing and the RowBinary
//! encoding, so that a module is a type implementing [`Module`].
//!
//! ```no_run
//! use sluice::{col, Config, Error, Module, Output, Record, Table};
//!
//! struct Logs {
//!     logs: Table,
//! }
//!
//! impl Module for Logs {
//!     fn init(cfg: &Config) -> Result<Self, Error> {
//!         let logs = cfg.table("logs")?;
//!         logs.expect(&[col("ts", "DateTime"), col("msg", "String")])?;
//!         Ok(Logs { logs })
//!     }
//!
//!     fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
//!         out.row(&self.logs).datetime((rec.timestamp / 1000) as u32).bytes(rec.value).end()
//!     }
//! }
//!
//! sluice::export!(Logs);
//! ```
//!
//! Build it for `wasm32-wasi` as a `cdylib`. Every write is checked against
//! the type of the column (or array element) it goes to; the first mismatch
//! fails the record with a message naming the table, the column and the
//! types, and later writes for the record do nothing. A record that writes
//! no row is filtered out; a `transform` that returns an error dead-letters
//! its record, and only it. A panic aborts the instance (wasm has no
//! unwinding): the host replaces it and isolates the record.
//!
//! Single-threaded by construction: one instance serves one partition worker.

mod chtype;

use chtype::{Kind, Node, NONE};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};

/// Numbers each decoded Config, so that a row of a Table from another
/// instance's Config is refused with one integer compare.
static CONFIG_IDS: AtomicU32 = AtomicU32::new(1);

/// The guest ABI version this SDK implements (guest-sdk/ABI.md).
pub const ABI_VERSION: i32 = 1;

/// A record's or an init's error: a message for the operator.
///
/// Any `std::error::Error` converts into it, so `?` works on the usual
/// results; [`Error::msg`] makes one from text.
pub struct Error {
    msg: String,
}

impl Error {
    /// An error with this message.
    pub fn msg(m: impl fmt::Display) -> Error {
        Error { msg: m.to_string() }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Error {
        Error { msg: e.to_string() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({:?})", self.msg)
    }
}

/// A normalization module.
pub trait Module: Sized {
    /// Called once per instance, before any record, with the module
    /// parameters and the schema of the target tables. Look the tables up
    /// and check them here ([`Config::table`], [`Table::expect`]); an error
    /// refuses the config and its message is reported to the operator.
    fn init(cfg: &Config) -> Result<Self, Error>;

    /// Turns one record into zero or more rows written to `out`. An error
    /// dead-letters this record (and only it) and drops the rows it wrote.
    fn transform(&mut self, rec: &Record<'_>, out: &mut Output) -> Result<(), Error>;
}

/// One column a module expects, for [`Table::expect`].
pub struct Col<'a> {
    pub name: &'a str,
    pub ty: &'a str,
}

/// A column for [`Table::expect`]: its name and ClickHouse type as written.
pub fn col<'a>(name: &'a str, ty: &'a str) -> Col<'a> {
    Col { name, ty }
}

/// A column of a target table, as the host declared it.
#[derive(Clone)]
pub struct Column {
    name: String,
    ty: String,
    node: u32,                   // root in the schema arena; NONE: unsupported
    unsupported: Option<String>, // why the SDK cannot write the type
    enums: Vec<(String, i16)>,
}

impl Column {
    /// The column's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The column's ClickHouse type, as the host spelled it.
    pub fn ty(&self) -> &str {
        &self.ty
    }

    /// Whether the SDK can write values of the column's type; the error says why not.
    pub fn supported(&self) -> Result<(), Error> {
        match &self.unsupported {
            Some(e) => Err(Error::msg(e)),
            None => Ok(()),
        }
    }

    /// The number of the enum value called `name`, for an Enum8/Enum16
    /// column (or an Array/Nullable of one).
    pub fn enum_value(&self, name: &str) -> Option<i16> {
        self.enums.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// A target table: the columns a row must carry, in order. Cheap to clone;
/// keep it in the module for [`Output::row`].
#[derive(Clone)]
pub struct Table {
    name: String,
    index: u16,
    columns: Vec<Column>,
    config: u32, // the id of the Config it came from
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its position in the init payload: the table index of its rows.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// The columns a row must carry, in order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Checks that the table has exactly these columns, in this order, with
    /// these types, and that the SDK can write every one. Types compare as
    /// written, ignoring white space outside quotes. The error lists every
    /// difference; return it from [`Module::init`] to refuse the schema.
    pub fn expect(&self, cols: &[Col<'_>]) -> Result<(), Error> {
        let mut problems = Vec::new();
        let n = cols.len().max(self.columns.len());
        for i in 0..n {
            if i >= self.columns.len() {
                problems.push(format!("missing column #{} {} {}", i + 1, cols[i].name, cols[i].ty));
            } else if i >= cols.len() {
                let c = &self.columns[i];
                problems.push(format!("unexpected column #{} {} {}", i + 1, c.name, c.ty));
            } else if cols[i].name != self.columns[i].name || chtype::canonical(cols[i].ty) != chtype::canonical(&self.columns[i].ty) {
                let c = &self.columns[i];
                problems.push(format!("column #{} is {} {}, want {} {}", i + 1, c.name, c.ty, cols[i].name, cols[i].ty));
            } else if let Some(e) = &self.columns[i].unsupported {
                problems.push(format!("column #{} {}: {}", i + 1, self.columns[i].name, e));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::msg(format!(
            "sluice: table {} does not have the columns this module writes: {}",
            quote(&self.name),
            problems.join("; ")
        )))
    }
}

/// What the host hands the module at init: its parameters and the schema of
/// every target table.
pub struct Config {
    params: Vec<(String, String)>,
    tables: Vec<Table>,
    id: u32,
}

impl Config {
    /// The value of the module parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// All module parameters, in the order the host sent them.
    pub fn params(&self) -> &[(String, String)] {
        &self.params
    }

    /// The target tables, in table-index order.
    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    /// The target table called `name`, or an error naming the tables the
    /// pipeline has. Return the error from [`Module::init`] to refuse.
    pub fn table(&self, name: &str) -> Result<Table, Error> {
        if let Some(t) = self.tables.iter().find(|t| t.name == name) {
            return Ok(t.clone());
        }
        let names: Vec<String> = self.tables.iter().map(|t| quote(&t.name)).collect();
        let have = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        Err(Error::msg(format!("sluice: the pipeline has no target table {} (tables: {})", quote(name), have)))
    }
}

/// One Kafka record. Its byte strings borrow the batch payload: valid for
/// the `transform` call only; copy what you keep.
pub struct Record<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    headers: &'a [u8], // framed, nheaders included
}

impl<'a> Record<'a> {
    /// The value of the first header called `key`.
    pub fn header(&self, key: &str) -> Option<&'a [u8]> {
        self.headers().find(|(k, _)| *k == key.as_bytes()).map(|(_, v)| v)
    }

    /// The headers, in order, as (key, value).
    pub fn headers(&self) -> Headers<'a> {
        let mut r = Reader { p: self.headers, off: 0, err: None };
        let n = r.u32("nheaders");
        Headers { r, left: n }
    }
}

/// An iterator over a record's headers.
pub struct Headers<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for Headers<'a> {
    type Item = (&'a [u8], &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let k = self.r.bytes("header key");
        let v = self.r.bytes("header value");
        Some((k, v))
    }
}

/// Severity of a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug = 0,
    Info = 1,
    Warn = 2,
    Error = 3,
}

#[cfg(target_arch = "wasm32")]
mod host {
    #[link(wasm_import_module = "sluice")]
    extern "C" {
        fn log(level: i32, ptr: *const u8, len: usize);
    }

    pub(crate) fn write_log(level: i32, msg: &str) {
        // SAFETY: the host reads len bytes at ptr, which msg owns.
        unsafe { log(level, msg.as_ptr(), msg.len()) }
    }
}

/// Sends a log line to the host, which tags it with the module's name and
/// rate-limits it. Natively (in tests) it goes to standard error.
pub fn log(level: Level, msg: &str) {
    #[cfg(target_arch = "wasm32")]
    host::write_log(level as i32, msg);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("sluice {:?}: {}", level, msg);
}

/// `s` quoted as Go's %q does for the SDK's messages, so that every SDK
/// words its errors alike.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---- framing -----------------------------------------------------------------

struct Reader<'a> {
    p: &'a [u8],
    off: usize,
    err: Option<String>,
}

impl<'a> Reader<'a> {
    fn short(&mut self, what: &str) {
        if self.err.is_none() {
            self.err = Some(format!("truncated reading {} at offset {}", what, self.off));
        }
        self.off = self.p.len();
    }

    fn u32(&mut self, what: &str) -> u32 {
        if self.p.len() >= 4 && self.off <= self.p.len() - 4 {
            let b = &self.p[self.off..self.off + 4];
            self.off += 4;
            return u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        self.short(what);
        0
    }

    fn u64(&mut self, what: &str) -> u64 {
        if self.p.len() >= 8 && self.off <= self.p.len() - 8 {
            let mut a = [0u8; 8];
            a.copy_from_slice(&self.p[self.off..self.off + 8]);
            self.off += 8;
            return u64::from_le_bytes(a);
        }
        self.short(what);
        0
    }

    fn bytes(&mut self, what: &str) -> &'a [u8] {
        let n = self.u32(what) as usize;
        if n <= self.p.len() - self.off {
            let b = &self.p[self.off..self.off + n];
            self.off += n;
            return b;
        }
        self.short(what);
        &[]
    }

    fn string(&mut self, what: &str) -> String {
        String::from_utf8_lossy(self.bytes(what)).into_owned()
    }

    /// A u32 count, checked against the bytes left given that an element
    /// takes at least `min` bytes.
    fn count(&mut self, min: usize, what: &str) -> usize {
        let n = self.u32(what) as usize;
        if self.err.is_none() && n.saturating_mul(min) > self.p.len() - self.off {
            self.err = Some(format!("{} {} does not fit in the payload at offset {}", what, n, self.off - 4));
            self.off = self.p.len();
            return 0;
        }
        n
    }
}

struct Schema {
    nodes: Vec<Node>,
}

fn decode_init(p: &[u8]) -> Result<(Config, Schema), String> {
    let mut r = Reader { p, off: 0, err: None };
    let id = CONFIG_IDS.fetch_add(1, Ordering::Relaxed);
    let mut cfg = Config { params: Vec::new(), tables: Vec::new(), id };
    let mut schema = Schema { nodes: Vec::new() };
    let np = r.count(8, "nparams");
    for _ in 0..np {
        let k = r.string("param key");
        let v = r.string("param value");
        cfg.params.push((k, v));
    }
    let nt = r.count(8, "ntables");
    for i in 0..nt {
        if r.err.is_some() {
            break;
        }
        let name = r.string("table name");
        let nc = r.count(8, "ncolumns");
        let mut columns = Vec::with_capacity(nc);
        for _ in 0..nc {
            let cname = r.string("column name");
            let ty = r.string("column type");
            let (node, unsupported) = match chtype::parse(&mut schema.nodes, &ty) {
                Ok(n) => (n, None),
                Err(e) => (NONE, Some(e)),
            };
            let mut enums = Vec::new();
            let mut n = node;
            while n != NONE {
                let nd = &schema.nodes[n as usize];
                enums.extend(nd.enums.iter().cloned());
                n = nd.elem;
            }
            columns.push(Column { name: cname, ty, node, unsupported, enums });
        }
        cfg.tables.push(Table { name, index: i as u16, columns, config: id });
    }
    if r.err.is_none() && r.off != p.len() {
        r.err = Some(format!("{} trailing bytes at offset {}", p.len() - r.off, r.off));
    }
    if let Some(e) = r.err {
        return Err(format!("sluice: malformed init payload: {}", e));
    }
    if cfg.tables.len() > 1 << 16 {
        return Err(format!("sluice: {} target tables: a table index is a u16", cfg.tables.len()));
    }
    Ok((cfg, schema))
}

// ---- output ------------------------------------------------------------------

struct Frame {
    elem: u32,
    left: usize,
}

/// The rows a record produces. The SDK hands the same Output to every
/// `transform` call.
///
/// Writing a value of the wrong type, too few or too many values, or an
/// undeclared enum value records an error: later writes for the record are
/// ignored and the record is dead-lettered with that message, whatever
/// `transform` returns.
pub struct Output {
    buf: Vec<u8>,
    schema: Schema,
    tables: Vec<Table>,
    config: u32, // id of the instance's Config; 0 before init
    nrows: u32,
    err: Option<String>,
    // the open row
    open: bool,
    table: usize,
    col: usize,
    cur: u32, // node the next value must be; NONE when the row is full
    stack: Vec<Frame>,
    start: usize, // offset of the row's u32 length
}

/// The writer of one row, from [`Output::row`]. Its methods return the
/// writer so that calls chain; [`Row::end`] finishes the row.
pub struct Row<'a> {
    o: &'a mut Output,
}

impl Output {
    fn new() -> Output {
        Output {
            buf: Vec::new(),
            schema: Schema { nodes: Vec::new() },
            tables: Vec::new(),
            config: 0,
            nrows: 0,
            err: None,
            open: false,
            table: 0,
            col: 0,
            cur: NONE,
            stack: Vec::with_capacity(chtype::MAX_DEPTH),
            start: 0,
        }
    }

    /// Starts a row of table `t`: write one value per column, in column
    /// order, then call [`Row::end`].
    pub fn row(&mut self, t: &Table) -> Row<'_> {
        if self.err.is_none() {
            if self.open {
                let msg = format!("sluice: table {}: Row called before End of the previous row", quote(&self.tables[self.table].name));
                self.fail(msg);
            } else if t.config != self.config {
                self.fail(format!("sluice: table {} is not from this instance's Config", quote(&t.name)));
            } else {
                self.open = true;
                self.table = t.index as usize;
                self.col = 0;
                self.stack.clear();
                self.cur = self.column_node(0);
                self.buf.extend_from_slice(&t.index.to_le_bytes());
                self.start = self.buf.len();
                self.buf.extend_from_slice(&[0, 0, 0, 0]);
            }
        }
        Row { o: self }
    }

    /// The record's error so far, if any.
    pub fn err(&self) -> Option<&str> {
        self.err.as_deref()
    }

    /// The node of column c of the open table; INVALID_NODE for a type the
    /// SDK cannot write, NONE past the last column.
    fn column_node(&self, c: usize) -> u32 {
        let cols = &self.tables[self.table].columns;
        if c >= cols.len() {
            NONE
        } else if cols[c].node == NONE {
            INVALID_NODE
        } else {
            cols[c].node
        }
    }

    fn fail(&mut self, msg: String) {
        if self.err.is_none() {
            self.err = Some(msg);
        }
        self.cur = NONE;
    }

    #[inline]
    fn want(&mut self, k: Kind) -> bool {
        if self.cur != NONE && self.cur != INVALID_NODE && self.schema.nodes[self.cur as usize].kind == k {
            return true;
        }
        self.want_slow(k)
    }

    fn want_slow(&mut self, k: Kind) -> bool {
        if self.err.is_some() {
            return false;
        }
        if self.cur != NONE && self.cur != INVALID_NODE {
            let n = &self.schema.nodes[self.cur as usize];
            if n.kind == Kind::Nullable && self.schema.nodes[n.elem as usize].kind == k {
                self.cur = n.elem;
                self.buf.push(0);
                return true;
            }
        }
        self.mismatch(k.name());
        false
    }

    fn mismatch(&mut self, got: &str) {
        if self.err.is_some() {
            return;
        }
        let msg = if !self.open {
            format!("sluice: {} value written with no row started (call Output.Row first)", got)
        } else {
            let t = &self.tables[self.table];
            if self.cur == NONE {
                format!("sluice: table {}: {} value written past the last column (the table has {})", quote(&t.name), got, t.columns.len())
            } else {
                let c = &t.columns[self.col];
                if self.cur == INVALID_NODE {
                    format!(
                        "sluice: table {}, column {}: the SDK cannot write type {}: {}",
                        quote(&t.name),
                        quote(&c.name),
                        c.ty,
                        c.unsupported.as_deref().unwrap_or("")
                    )
                } else {
                    let mut expected = self.schema.nodes[self.cur as usize].text.clone();
                    if !self.stack.is_empty() {
                        expected.push_str(" array element");
                    }
                    format!("sluice: table {}, column {} ({}): expected {}, got {}", quote(&t.name), quote(&c.name), c.ty, expected, got)
                }
            }
        };
        self.fail(msg);
    }

    /// Moves past a complete value.
    fn advance(&mut self) {
        while let Some(f) = self.stack.last_mut() {
            f.left -= 1;
            if f.left > 0 {
                self.cur = f.elem;
                return;
            }
            self.stack.pop();
        }
        self.col += 1;
        self.cur = self.column_node(self.col);
    }

    fn value_error(&mut self, what: String) {
        let t = &self.tables[self.table];
        let c = &t.columns[self.col];
        let msg = format!("sluice: table {}, column {} ({}): {}", quote(&t.name), quote(&c.name), c.ty, what);
        self.fail(msg);
    }

    fn end(&mut self) -> Result<(), Error> {
        if self.err.is_none() && self.open && self.cur == NONE && self.buf.len() - self.start - 4 <= u32::MAX as usize {
            let n = (self.buf.len() - self.start - 4) as u32;
            self.buf[self.start..self.start + 4].copy_from_slice(&n.to_le_bytes());
            self.open = false;
            self.nrows += 1;
            return Ok(());
        }
        if self.err.is_none() {
            if !self.open {
                self.fail("sluice: End called with no row started".to_string());
            } else if self.cur != NONE {
                let t = &self.tables[self.table];
                let what = if self.stack.is_empty() { "column" } else { "array element of column" };
                let c = &t.columns[self.col];
                let msg = format!(
                    "sluice: table {}: row ended after {} of {} columns: {} {} ({}) not written",
                    quote(&t.name),
                    self.col,
                    t.columns.len(),
                    what,
                    quote(&c.name),
                    c.ty
                );
                self.fail(msg);
            } else {
                let msg = format!("sluice: table {}: row of {} bytes is too long", quote(&self.tables[self.table].name), self.buf.len() - self.start - 4);
                self.fail(msg);
            }
        }
        Err(Error::msg(self.err.clone().unwrap_or_default()))
    }

    fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn put_str(&mut self, b: &[u8]) {
        self.uvarint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    fn want_array_of(&mut self, k: Kind, n: usize) -> bool {
        if self.err.is_some() {
            return false;
        }
        let mut t = self.cur;
        let mut nullable = false;
        if t != NONE && t != INVALID_NODE && self.schema.nodes[t as usize].kind == Kind::Nullable {
            t = self.schema.nodes[t as usize].elem;
            nullable = true;
        }
        let ok = t != NONE && t != INVALID_NODE && {
            let n = &self.schema.nodes[t as usize];
            n.kind == Kind::Array && self.schema.nodes[n.elem as usize].kind == k
        };
        if !ok {
            let got = format!("Array({})", k.name());
            self.mismatch(&got);
            return false;
        }
        if nullable {
            self.buf.push(0);
        }
        self.uvarint(n as u64);
        true
    }

    fn enum_ok(&mut self, v: i16) -> bool {
        if self.schema.nodes[self.cur as usize].enums.iter().any(|(_, x)| *x == v) {
            return true;
        }
        self.value_error(format!("{} is not a declared value", v));
        false
    }
}

/// Marks a column whose type the SDK cannot write.
const INVALID_NODE: u32 = u32::MAX - 1;

macro_rules! fixed_writers {
    ($($(#[$doc:meta])* $name:ident($t:ty) => $kind:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, v: $t) -> &mut Self {
                if self.o.want(Kind::$kind) {
                    self.o.buf.extend_from_slice(&v.to_le_bytes());
                    self.o.advance();
                }
                self
            }
        )*
    };
}

impl<'a> Row<'a> {
    fixed_writers! {
        /// Writes a UInt8.
        uint8(u8) => UInt8;
        /// Writes a UInt16.
        uint16(u16) => UInt16;
        /// Writes a UInt32.
        uint32(u32) => UInt32;
        /// Writes a UInt64.
        uint64(u64) => UInt64;
        /// Writes an Int8.
        int8(i8) => Int8;
        /// Writes an Int16.
        int16(i16) => Int16;
        /// Writes an Int32.
        int32(i32) => Int32;
        /// Writes an Int64.
        int64(i64) => Int64;
        /// Writes a Float32.
        float32(f32) => Float32;
        /// Writes a Float64.
        float64(f64) => Float64;
        /// Writes a Date: days since 1970-01-01.
        date(u16) => Date;
        /// Writes a DateTime: seconds since the Unix epoch.
        datetime(u32) => DateTime;
        /// Writes a DateTime64(P) from its ticks: units of 10^-P seconds
        /// since the Unix epoch (milliseconds for DateTime64(3)).
        datetime64(i64) => DateTime64;
    }

    /// Writes a String (or LowCardinality(String)) value.
    pub fn string(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    /// Writes a String value from bytes (ClickHouse strings are bytes).
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        if self.o.want(Kind::String) {
            self.o.put_str(b);
            self.o.advance();
        }
        self
    }

    /// Writes a FixedString(N): `b` padded with zero bytes to N; longer is an error.
    pub fn fixed_string(&mut self, b: &[u8]) -> &mut Self {
        if !self.o.want(Kind::FixedString) {
            return self;
        }
        let n = self.o.schema.nodes[self.o.cur as usize].size;
        if b.len() > n {
            self.o.value_error(format!("{} bytes do not fit", b.len()));
            return self;
        }
        self.o.buf.extend_from_slice(b);
        self.o.buf.resize(self.o.buf.len() + n - b.len(), 0);
        self.o.advance();
        self
    }

    /// Writes a Bool.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        if self.o.want(Kind::Bool) {
            self.o.buf.push(v as u8);
            self.o.advance();
        }
        self
    }

    /// Writes a UUID given in its usual byte order (as its text reads).
    /// ClickHouse stores it as two little-endian u64 halves, the first first.
    pub fn uuid(&mut self, u: [u8; 16]) -> &mut Self {
        if self.o.want(Kind::Uuid) {
            for half in [&u[..8], &u[8..]] {
                self.o.buf.extend(half.iter().rev());
            }
            self.o.advance();
        }
        self
    }

    /// Writes an Enum8 by number; the number must be declared in the type
    /// ([`Column::enum_value`] looks a name up at init).
    pub fn enum8(&mut self, v: i8) -> &mut Self {
        if self.o.want(Kind::Enum8) && self.o.enum_ok(v as i16) {
            self.o.buf.push(v as u8);
            self.o.advance();
        }
        self
    }

    /// Writes an Enum16 by number; the number must be declared in the type.
    pub fn enum16(&mut self, v: i16) -> &mut Self {
        if self.o.want(Kind::Enum16) && self.o.enum_ok(v) {
            self.o.buf.extend_from_slice(&v.to_le_bytes());
            self.o.advance();
        }
        self
    }

    /// Writes an IPv4 address given in network order (`Ipv4Addr::octets`).
    pub fn ipv4(&mut self, a: [u8; 4]) -> &mut Self {
        if self.o.want(Kind::IPv4) {
            self.o.buf.extend_from_slice(&u32::from_be_bytes(a).to_le_bytes());
            self.o.advance();
        }
        self
    }

    /// Writes an IPv6 address given in network order (`Ipv6Addr::octets`).
    pub fn ipv6(&mut self, a: [u8; 16]) -> &mut Self {
        if self.o.want(Kind::IPv6) {
            self.o.buf.extend_from_slice(&a);
            self.o.advance();
        }
        self
    }

    fn cur_kind(&self) -> Option<Kind> {
        let c = self.o.cur;
        if self.o.err.is_none() && c != NONE && c != INVALID_NODE {
            Some(self.o.schema.nodes[c as usize].kind)
        } else {
            None
        }
    }

    /// Writes NULL to a Nullable column.
    pub fn null(&mut self) -> &mut Self {
        if self.cur_kind() == Some(Kind::Nullable) {
            self.o.buf.push(1);
            self.o.advance();
        } else {
            self.o.mismatch("NULL");
        }
        self
    }

    /// Marks a Nullable value as not null; the next write is its value.
    /// Optional: writing a T to a Nullable(T) implies it.
    pub fn not_null(&mut self) -> &mut Self {
        if self.cur_kind() == Some(Kind::Nullable) {
            self.o.buf.push(0);
            self.o.cur = self.o.schema.nodes[self.o.cur as usize].elem;
        } else {
            self.o.mismatch("NotNull");
        }
        self
    }

    /// Starts an Array of `n` elements; the next `n` writes are its elements.
    pub fn begin_array(&mut self, n: usize) -> &mut Self {
        if !self.o.want(Kind::Array) {
            return self;
        }
        self.o.uvarint(n as u64);
        if n == 0 {
            self.o.advance();
            return self;
        }
        let elem = self.o.schema.nodes[self.o.cur as usize].elem;
        self.o.stack.push(Frame { elem, left: n });
        self.o.cur = elem;
        self
    }

    /// Writes a whole Array(String) (or Array(LowCardinality(String))).
    pub fn array_string<S: AsRef<[u8]>>(&mut self, v: &[S]) -> &mut Self {
        if self.o.want_array_of(Kind::String, v.len()) {
            for s in v {
                self.o.put_str(s.as_ref());
            }
            self.o.advance();
        }
        self
    }

    /// Writes a whole Array(Int64).
    pub fn array_int64(&mut self, v: &[i64]) -> &mut Self {
        if self.o.want_array_of(Kind::Int64, v.len()) {
            for x in v {
                self.o.buf.extend_from_slice(&x.to_le_bytes());
            }
            self.o.advance();
        }
        self
    }

    /// Writes a whole Array(UInt64).
    pub fn array_uint64(&mut self, v: &[u64]) -> &mut Self {
        if self.o.want_array_of(Kind::UInt64, v.len()) {
            for x in v {
                self.o.buf.extend_from_slice(&x.to_le_bytes());
            }
            self.o.advance();
        }
        self
    }

    /// Finishes the row. Returns the record's error, if any, including a
    /// row with columns left unwritten, so `transform` can end with it.
    pub fn end(&mut self) -> Result<(), Error> {
        self.o.end()
    }
}

// ---- the instance ------------------------------------------------------------

/// The state behind the wasm exports: the module, its schema and the buffers
/// reused from batch to batch. [`export!`] drives one; tests drive their own,
/// natively, with the payloads the host sends.
pub struct Instance<M: Module> {
    module: Option<M>,
    out: Output,
    input: Vec<u8>,
    refusal: String,
}

impl<M: Module> Default for Instance<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Module> Instance<M> {
    /// An instance with no module yet: [`Instance::init`] makes it.
    pub fn new() -> Self {
        Instance { module: None, out: Output::new(), input: Vec::new(), refusal: String::new() }
    }

    /// Decodes an init payload and runs [`Module::init`]. `Err` carries the
    /// refusal the host reports.
    pub fn init(&mut self, payload: &[u8]) -> Result<(), String> {
        self.module = None;
        let (cfg, schema) = decode_init(payload)?;
        match M::init(&cfg) {
            Ok(m) => {
                self.module = Some(m);
                self.out.schema = schema;
                self.out.config = cfg.id;
                self.out.tables = cfg.tables;
                Ok(())
            }
            Err(e) if e.msg.is_empty() => Err("sluice: the module refused its config (empty error message)".to_string()),
            Err(e) => Err(e.msg),
        }
    }

    /// Decodes a batch payload, runs [`Module::transform`] on each record
    /// and returns the output payload, valid until the next call.
    pub fn transform(&mut self, payload: &[u8]) -> &[u8] {
        run_batch(&mut self.module, &mut self.out, payload);
        &self.out.buf
    }

    /// sluice_alloc: the input buffer, grown to at least `size` bytes.
    #[doc(hidden)]
    pub fn wasm_alloc(&mut self, size: i32) -> i32 {
        if size < 0 {
            return 0;
        }
        let size = size as usize;
        if size > self.input.len() {
            let n = size.max(2 * self.input.len()).max(64 << 10);
            self.input = vec![0; n];
        }
        self.input.as_ptr() as usize as i32
    }

    /// The payload of a call: it must lie in the buffer sluice_alloc handed out.
    fn payload_len(&self, ptr: i32, len: i32) -> Option<usize> {
        if len <= 0 {
            return Some(0);
        }
        if ptr as usize != self.input.as_ptr() as usize || len as usize > self.input.len() {
            return None;
        }
        Some(len as usize)
    }

    #[doc(hidden)]
    pub fn wasm_init(&mut self, ptr: i32, len: i32) -> i64 {
        let res = match self.payload_len(ptr, len) {
            Some(n) => {
                let payload = std::mem::take(&mut self.input);
                let r = self.init(&payload[..n]);
                self.input = payload;
                r
            }
            None => Err("sluice: sluice_init payload is not in the buffer sluice_alloc returned".to_string()),
        };
        self.refusal = match res {
            Ok(()) => String::new(),
            Err(m) => m,
        };
        pack(self.refusal.as_ptr() as usize, self.refusal.len())
    }

    #[doc(hidden)]
    pub fn wasm_transform(&mut self, ptr: i32, len: i32) -> i64 {
        let n = match self.payload_len(ptr, len) {
            Some(n) => n,
            None => {
                log(Level::Error, "sluice: sluice_transform payload is not in the buffer sluice_alloc returned");
                0
            }
        };
        run_batch(&mut self.module, &mut self.out, &self.input[..n]);
        pack(self.out.buf.as_ptr() as usize, self.out.buf.len())
    }
}

fn pack(ptr: usize, len: usize) -> i64 {
    if len == 0 {
        return 0;
    }
    ((ptr as u64) << 32 | len as u64) as i64
}

fn run_batch<M: Module>(module: &mut Option<M>, o: &mut Output, payload: &[u8]) {
    o.buf.clear();
    let mut r = Reader { p: payload, off: 0, err: None };
    let topic_b = r.bytes("topic");
    let topic = std::str::from_utf8(topic_b).unwrap_or("");
    let partition = r.u32("partition") as i32;
    let n = r.count(28, "nrecords");
    if let Some(e) = &r.err {
        log(Level::Error, &format!("sluice: malformed batch payload: {}", e));
        o.buf.extend_from_slice(&0u32.to_le_bytes());
        return;
    }
    o.buf.extend_from_slice(&(n as u32).to_le_bytes());
    let mut bad: Option<String> = None;
    for i in 0..n {
        let started = o.buf.len();
        if bad.is_none() {
            let offset = r.u64("offset") as i64;
            let timestamp = r.u64("timestamp") as i64;
            let key = r.bytes("key");
            let value = r.bytes("value");
            let hstart = r.off;
            let nh = r.count(8, "nheaders");
            for _ in 0..nh {
                r.bytes("header key");
                r.bytes("header value");
            }
            match &r.err {
                Some(e) => bad = Some(format!("sluice: malformed batch payload: record {}: {}", i, e)),
                None => {
                    let rec = Record { topic, partition, offset, timestamp, key, value, headers: &payload[hstart..r.off] };
                    run_record(module, o, &rec, started);
                    continue;
                }
            }
        }
        if let Some(msg) = &bad {
            write_error(o, msg);
        }
    }
    if bad.is_none() && r.off != payload.len() {
        log(Level::Warn, &format!("sluice: batch payload has {} trailing bytes", payload.len() - r.off));
    }
}

fn run_record<M: Module>(module: &mut Option<M>, o: &mut Output, rec: &Record<'_>, started: usize) {
    let m = match module {
        Some(m) => m,
        None => {
            write_error(o, "sluice: sluice_transform called before a successful sluice_init");
            return;
        }
    };
    o.buf.extend_from_slice(&[0, 0, 0, 0, 0]);
    o.nrows = 0;
    o.err = None;
    o.open = false;
    o.cur = NONE;
    let res = m.transform(rec, o);
    let err = match res {
        Err(e) => Some(if e.msg.is_empty() { "sluice: Transform returned an error with an empty message".to_string() } else { e.msg }),
        Ok(()) => match o.err.take() {
            Some(e) => Some(e),
            None if o.open => Some(format!(
                "sluice: table {}: Transform returned without calling End on its row",
                quote(&o.tables[o.table].name)
            )),
            None => None,
        },
    };
    match err {
        Some(msg) => {
            o.buf.truncate(started);
            write_error(o, &msg);
        }
        None => {
            let n = o.nrows.to_le_bytes();
            o.buf[started + 1..started + 5].copy_from_slice(&n);
        }
    }
}

fn write_error(o: &mut Output, msg: &str) {
    o.buf.push(1);
    o.buf.extend_from_slice(&(msg.len() as u32).to_le_bytes());
    o.buf.extend_from_slice(msg.as_bytes());
}

/// Exports the guest ABI (sluice_abi_version, sluice_alloc, sluice_init,
/// sluice_transform) for the module type `$m`. Use it once, at the crate
/// root of a `cdylib`.
///
/// Built for another target than wasm32 (a shared library for the build
/// machine), it exports instead the C SDK's native entry points,
/// `sluice_run_init` and `sluice_run_transform` (guest-sdk/c/sluice.h),
/// so that the native build of a module runs on the host's payloads in
/// process, as sluice's tests load a C module's native build.
#[macro_export]
macro_rules! export {
    ($m:ty) => {
        #[cfg(target_arch = "wasm32")]
        thread_local! {
            static SLUICE_INSTANCE: ::std::cell::RefCell<$crate::Instance<$m>> =
                ::std::cell::RefCell::new($crate::Instance::new());
        }

        #[cfg(target_arch = "wasm32")]
        #[no_mangle]
        pub extern "C" fn sluice_abi_version() -> i32 {
            $crate::ABI_VERSION
        }

        #[cfg(target_arch = "wasm32")]
        #[no_mangle]
        pub extern "C" fn sluice_alloc(size: i32) -> i32 {
            SLUICE_INSTANCE.with(|i| i.borrow_mut().wasm_alloc(size))
        }

        #[cfg(target_arch = "wasm32")]
        #[no_mangle]
        pub extern "C" fn sluice_init(ptr: i32, len: i32) -> i64 {
            SLUICE_INSTANCE.with(|i| i.borrow_mut().wasm_init(ptr, len))
        }

        #[cfg(target_arch = "wasm32")]
        #[no_mangle]
        pub extern "C" fn sluice_transform(ptr: i32, len: i32) -> i64 {
            SLUICE_INSTANCE.with(|i| i.borrow_mut().wasm_transform(ptr, len))
        }

        #[cfg(not(target_arch = "wasm32"))]
        static SLUICE_NATIVE: $crate::NativeSlot<$m> = $crate::NativeSlot::new();

        /// # Safety
        /// `payload` points at `n` readable bytes, `msg_len` is writable,
        /// and no other call into the module runs at the same time.
        #[cfg(not(target_arch = "wasm32"))]
        #[no_mangle]
        pub unsafe extern "C" fn sluice_run_init(payload: *const u8, n: usize, msg_len: *mut usize) -> *const u8 {
            SLUICE_NATIVE.run_init(payload, n, msg_len)
        }

        /// # Safety
        /// As for sluice_run_init, with `out_len` for `msg_len`.
        #[cfg(not(target_arch = "wasm32"))]
        #[no_mangle]
        pub unsafe extern "C" fn sluice_run_transform(payload: *const u8, n: usize, out_len: *mut usize) -> *const u8 {
            SLUICE_NATIVE.run_transform(payload, n, out_len)
        }
    };
}

/// The instance behind a native build's entry points ([`export!`]): one per
/// process rather than per thread, because a native caller (Go through cgo)
/// may call from any thread. Callers serialize their calls, as they must
/// with the C SDK's native build, whose state is global too.
#[doc(hidden)]
pub struct NativeSlot<M: Module>(std::cell::UnsafeCell<Option<Instance<M>>>);

// SAFETY: the entry points' contract is that calls never overlap.
unsafe impl<M: Module> Sync for NativeSlot<M> {}

impl<M: Module> NativeSlot<M> {
    pub const fn new() -> Self {
        NativeSlot(std::cell::UnsafeCell::new(None))
    }

    #[allow(clippy::mut_from_ref)]
    unsafe fn instance(&self) -> &mut Instance<M> {
        (*self.0.get()).get_or_insert_with(Instance::new)
    }

    /// sluice_run_init: the refusal (its bytes and length), or null and 0.
    ///
    /// # Safety
    /// See [`export!`]'s sluice_run_init.
    pub unsafe fn run_init(&self, payload: *const u8, n: usize, msg_len: *mut usize) -> *const u8 {
        let inst = self.instance();
        let p = if n == 0 { &[][..] } else { std::slice::from_raw_parts(payload, n) };
        inst.refusal = match inst.init(p) {
            Ok(()) => String::new(),
            Err(m) => m,
        };
        *msg_len = inst.refusal.len();
        if inst.refusal.is_empty() {
            std::ptr::null()
        } else {
            inst.refusal.as_ptr()
        }
    }

    /// sluice_run_transform: the output payload, valid until the next call.
    ///
    /// # Safety
    /// See [`export!`]'s sluice_run_transform.
    pub unsafe fn run_transform(&self, payload: *const u8, n: usize, out_len: *mut usize) -> *const u8 {
        let inst = self.instance();
        let p = if n == 0 { &[][..] } else { std::slice::from_raw_parts(payload, n) };
        let out = inst.transform(p);
        *out_len = out.len();
        out.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init_payload(tables: &[(&str, &[(&str, &str)])]) -> Vec<u8> {
        fn s(b: &mut Vec<u8>, v: &str) {
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v.as_bytes());
        }
        let mut b = 0u32.to_le_bytes().to_vec();
        b.extend_from_slice(&(tables.len() as u32).to_le_bytes());
        for (name, cols) in tables {
            s(&mut b, name);
            b.extend_from_slice(&(cols.len() as u32).to_le_bytes());
            for (c, t) in cols.iter() {
                s(&mut b, c);
                s(&mut b, t);
            }
        }
        b
    }

    fn batch(values: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(b't');
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(values.len() as u32).to_le_bytes());
        for (i, v) in values.iter().enumerate() {
            b.extend_from_slice(&(i as u64).to_le_bytes());
            b.extend_from_slice(&0u64.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v);
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        b
    }

    thread_local! {
        static FOREIGN: std::cell::RefCell<Option<Table>> = std::cell::RefCell::new(None);
    }

    /// Writes the value, parsed as a number, into column n, or uses a
    /// table of another instance when the value is "foreign".
    struct Numbers {
        t: Table,
    }

    impl Module for Numbers {
        fn init(cfg: &Config) -> Result<Self, Error> {
            let t = cfg.table("t")?;
            t.expect(&[col("n", "UInt32")])?;
            Ok(Numbers { t })
        }

        fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
            if rec.value == b"foreign" {
                let t = FOREIGN.with(|f| f.borrow().clone()).expect("a foreign table");
                return out.row(&t).uint32(1).end();
            }
            let n: u32 = std::str::from_utf8(rec.value)?.parse()?; // std errors convert with ?
            out.row(&self.t).uint32(n).end()
        }
    }

    #[test]
    fn native_instance() {
        let payload = init_payload(&[("t", &[("n", "UInt32")])]);
        let mut other = Instance::<Numbers>::new();
        assert_eq!(other.init(&payload), Ok(()));
        FOREIGN.with(|f| *f.borrow_mut() = Some(other.module.as_ref().unwrap().t.clone()));

        let mut inst = Instance::<Numbers>::new();
        assert_eq!(inst.init(&payload), Ok(()));
        let out = inst.transform(&batch(&[b"7", b"x", b"foreign"])).to_vec();
        let mut want = 3u32.to_le_bytes().to_vec();
        want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 7, 0, 0, 0]);
        let e1 = "invalid digit found in string";
        want.push(1);
        want.extend_from_slice(&(e1.len() as u32).to_le_bytes());
        want.extend_from_slice(e1.as_bytes());
        let e2 = "sluice: table \"t\" is not from this instance's Config";
        want.push(1);
        want.extend_from_slice(&(e2.len() as u32).to_le_bytes());
        want.extend_from_slice(e2.as_bytes());
        assert_eq!(out, want);
    }

    #[test]
    fn native_entry_points() {
        static SLOT: NativeSlot<Numbers> = NativeSlot::new();
        let mut n = usize::MAX;
        // SAFETY: the payloads outlive the calls, which do not overlap.
        unsafe {
            let wrong = init_payload(&[("t", &[("n", "UInt64")])]);
            let msg = SLOT.run_init(wrong.as_ptr(), wrong.len(), &mut n);
            assert_eq!(
                std::slice::from_raw_parts(msg, n),
                b"sluice: table \"t\" does not have the columns this module writes: column #1 is n UInt64, want n UInt32"
            );
            let payload = init_payload(&[("t", &[("n", "UInt32")])]);
            assert!(SLOT.run_init(payload.as_ptr(), payload.len(), &mut n).is_null());
            assert_eq!(n, 0);
            let b = batch(&[b"7"]);
            let out = SLOT.run_transform(b.as_ptr(), b.len(), &mut n);
            let mut want = 1u32.to_le_bytes().to_vec();
            want.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 7, 0, 0, 0]);
            assert_eq!(std::slice::from_raw_parts(out, n), &want[..]);
        }
    }

    #[test]
    fn refusals() {
        let mut inst = Instance::<Numbers>::new();
        assert_eq!(
            inst.init(&init_payload(&[("t", &[("n", "UInt64")])])),
            Err("sluice: table \"t\" does not have the columns this module writes: column #1 is n UInt64, want n UInt32".to_string())
        );
        assert_eq!(inst.init(&[1, 2]), Err("sluice: malformed init payload: truncated reading nparams at offset 0".to_string()));
    }
}
