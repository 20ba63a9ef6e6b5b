//! sensor-batch in Rust: the port of examples/sensor-batch (Go) with the
//! Rust SDK: the same rows of sensor_events, in the layout the table's
//! schema has (ClickHouse 18.16's or the modern one with DateTime64), and
//! the same per-record errors. The decoder is in avro.rs.

mod avro;

use sluice::{col, Col, Config, Error, Module, Output, Record, Table};

/// Which variant of sensor_events the host's schema is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// ClickHouse 18.16: batch_ts DateTime, batch_ts_ms UInt16, send_ts_us Int64.
    V18,
    /// The workload's reference: batch_ts DateTime64(3), send_ts DateTime64(6).
    Modern,
}

struct SensorBatch {
    table: Table,
    layout: Layout,
    hdr: avro::Header,
    ev: avro::Event,
    upper: Vec<u8>, // name_upper, reused
}

/// The columns both layouts start with.
fn common_columns() -> Vec<Col<'static>> {
    vec![
        col("batch_id", "UInt64"),
        col("event_seq", "UInt16"),
        col("sensor", "LowCardinality(String)"),
        col("region", "LowCardinality(String)"),
        col("name_upper", "LowCardinality(String)"),
        col("unit", "LowCardinality(String)"),
        col("value", "Int64"),
        col("value_scaled", "Int64"),
        col("quality", "Nullable(Float64)"),
        col("tags", "Array(LowCardinality(String))"),
    ]
}

fn is_modern(t: &Table) -> bool {
    t.columns().iter().find(|c| c.name() == "batch_ts").map_or(false, |c| c.ty().starts_with("DateTime64"))
}

/// The range of DateTime64 that ClickHouse documents, 1900-01-01 00:00:00
/// to 2299-12-31 23:59:59.999999 UTC, in milliseconds and microseconds.
const MIN_TS64_MS: i64 = -2208988800000;
const MAX_TS64_MS: i64 = 10413791999999;
const MIN_TS64_US: i64 = MIN_TS64_MS * 1000;
const MAX_TS64_US: i64 = MAX_TS64_MS * 1000 + 999;

/// What the table can hold of a header: a batch_id that is not negative,
/// and the timestamps within the range of the layout's types.
fn check_header(layout: Layout, h: &avro::Header) -> Result<(), Error> {
    if h.batch_id < 0 {
        return Err(Error::msg(format!("batch_id {} is negative", h.batch_id)));
    }
    let range = |field: &str, v: i64, ty: &str| Err(Error::msg(format!("{} {} is outside the range of {}", field, v, ty)));
    match layout {
        Layout::V18 => {
            if h.batch_ts_ms < 0 || h.batch_ts_ms / 1000 > u32::MAX as i64 {
                return range("batch_ts_ms", h.batch_ts_ms, "DateTime (1970 to 2106)");
            }
        }
        Layout::Modern => {
            if !(MIN_TS64_MS..=MAX_TS64_MS).contains(&h.batch_ts_ms) {
                return range("batch_ts_ms", h.batch_ts_ms, "DateTime64 (1900 to 2299)");
            }
            if !(MIN_TS64_US..=MAX_TS64_US).contains(&h.send_ts_us) {
                return range("send_ts_us", h.send_ts_us, "DateTime64 (1900 to 2299)");
            }
        }
    }
    Ok(())
}

impl Module for SensorBatch {
    /// The target table is sensor_events unless the parameter "table"
    /// names another; a DateTime64 batch_ts makes it the modern layout,
    /// and any schema but the layout's in schema.sql is refused, as the Go
    /// module does.
    fn init(cfg: &Config) -> Result<Self, Error> {
        let name = cfg.param("table").unwrap_or("sensor_events");
        let table = cfg.table(name)?;
        let mut columns = common_columns();
        let (layout, needs) = if is_modern(&table) {
            columns.extend([col("batch_ts", "DateTime64(3)"), col("send_ts", "DateTime64(6)")]);
            (Layout::Modern, "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql (modern layout, DateTime64)")
        } else {
            columns.extend([col("batch_ts", "DateTime"), col("batch_ts_ms", "UInt16"), col("send_ts_us", "Int64")]);
            (Layout::V18, "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql")
        };
        if let Err(e) = table.expect(&columns) {
            return Err(Error::msg(format!("{}: {}", needs, e)));
        }
        Ok(SensorBatch { table, layout, hdr: avro::Header::default(), ev: avro::Event::default(), upper: Vec::new() })
    }

    /// A row per kept event; a record that is not a well-formed
    /// SensorBatch, or whose values do not fit the table, is dead-lettered
    /// with the reason.
    fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
        let h = &mut self.hdr;
        let mut d = avro::Decoder::new(rec.value, h).map_err(Error::msg)?;
        check_header(self.layout, h)?;
        let (sec, ms) = ((h.batch_ts_ms / 1000) as u32, (h.batch_ts_ms % 1000) as u16);
        let e = &mut self.ev;
        while d.next(e) {
            if e.seq as u32 > u16::MAX as u32 {
                return Err(Error::msg(format!("event seq {} is outside 0..65535 (event_seq UInt16)", e.seq)));
            }
            if d.bytes_of(e.unit) == b"drop" {
                continue;
            }
            if let Some(q) = e.quality {
                if q < 0.2 {
                    continue;
                }
            }
            self.upper.clear();
            self.upper.extend(d.bytes_of(e.name).iter().map(|c| c.to_ascii_uppercase()));
            let scaled = e.value.wrapping_mul(1000) / (e.seq as i64 + 1);
            let mut w = out.row(&self.table);
            w.uint64(h.batch_id as u64)
                .uint16(e.seq as u16)
                .bytes(d.bytes_of(h.sensor))
                .bytes(d.bytes_of(h.region))
                .bytes(&self.upper)
                .bytes(d.bytes_of(e.unit))
                .int64(e.value)
                .int64(scaled);
            match e.quality {
                None => w.null(),
                Some(q) => w.not_null().float64(q),
            };
            w.begin_array(e.tags.len());
            for &t in &e.tags {
                w.bytes(d.bytes_of(t));
            }
            match self.layout {
                // DateTime64(3) and DateTime64(6) ticks are the Avro values.
                Layout::Modern => w.datetime64(h.batch_ts_ms).datetime64(h.send_ts_us).end()?,
                Layout::V18 => w.datetime(sec).uint16(ms).int64(h.send_ts_us).end()?,
            }
        }
        match d.take_err() {
            Some(m) => Err(Error::msg(m)),
            None => Ok(()),
        }
    }
}

sluice::export!(SensorBatch);
