//! log-normalize in Rust: the Rust port of examples/log-normalize (Go),
//! with the same rows and error messages. This file checks the schema and
//! writes the rows; the parsing and templating are in normalize.rs.

mod normalize;

use sluice::{col, Config, Error, Module, Output, Record, Table};

struct LogNormalize {
    logs: Table,
    entry: normalize::Entry, // reused for every record
}

impl Module for LogNormalize {
    /// The target table is "logs" unless the parameter "table" names
    /// another; a schema that differs from schema.sql is refused.
    fn init(cfg: &Config) -> Result<Self, Error> {
        let name = cfg.param("table").unwrap_or("logs");
        let logs = cfg.table(name)?;
        let columns = [
            col("ts", "DateTime"),
            col("service", "LowCardinality(String)"),
            col("level", "LowCardinality(String)"),
            col("template", "String"),
            col("fingerprint", "UInt64"),
            col("msg", "String"),
            col("attrs.key", "Array(String)"),
            col("attrs.value", "Array(String)"),
        ];
        if let Err(e) = logs.expect(&columns) {
            return Err(Error::msg(format!("log-normalize needs the table of examples/log-normalize/schema.sql: {}", e)));
        }
        Ok(LogNormalize { logs, entry: normalize::Entry::default() })
    }

    /// One row per log line; a line that is not a JSON object with a msg,
    /// or whose ts is not valid, is dead-lettered with the reason.
    fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
        let e = &mut self.entry;
        if let Err(msg) = normalize::normalize(rec.value, rec.timestamp, e) {
            return Err(Error::msg(msg));
        }
        if e.time < 0 || e.time > u32::MAX as i64 {
            return Err(Error::msg(format!("ts {} is outside the range of DateTime (1970 to 2106)", e.time)));
        }
        let mut w = out.row(&self.logs);
        w.datetime(e.time as u32)
            .bytes(&e.service)
            .string(e.level)
            .bytes(&e.template)
            .uint64(e.fingerprint)
            .bytes(&e.msg)
            .begin_array(e.attrs.len());
        for (k, _) in &e.attrs {
            w.bytes(k);
        }
        w.begin_array(e.attrs.len());
        for (_, v) in &e.attrs {
            w.bytes(v);
        }
        w.end()
    }
}

sluice::export!(LogNormalize);
