//! sensor-batch in Rust: the port of examples/sensor-batch (Go) with the
//! Rust SDK: the same rows of sensor_events (the ClickHouse 18.16 layout)
//! and the same per-record errors. The decoder is in avro.rs.

mod avro;

use sluice::{col, Config, Error, Module, Output, Record, Table};

struct SensorBatch {
    table: Table,
    hdr: avro::Header,
    ev: avro::Event,
    upper: Vec<u8>, // name_upper, reused
}

fn is_modern(t: &Table) -> bool {
    t.columns().iter().find(|c| c.name() == "batch_ts").map_or(false, |c| c.ty().starts_with("DateTime64"))
}

impl Module for SensorBatch {
    /// The target table is sensor_events unless the parameter "table"
    /// names another; any schema but the 18.16 one of schema.sql is
    /// refused, the modern (DateTime64) layout too, as the Go module does.
    fn init(cfg: &Config) -> Result<Self, Error> {
        let name = cfg.param("table").unwrap_or("sensor_events");
        let table = cfg.table(name)?;
        if is_modern(&table) {
            return Err(Error::msg(format!(
                "sensor-batch: table \"{}\" has the modern layout (DateTime64); this build of the module writes only the ClickHouse 18.16 layout",
                name
            )));
        }
        let columns = [
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
            col("batch_ts", "DateTime"),
            col("batch_ts_ms", "UInt16"),
            col("send_ts_us", "Int64"),
        ];
        if let Err(e) = table.expect(&columns) {
            return Err(Error::msg(format!(
                "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql: {}",
                e
            )));
        }
        Ok(SensorBatch { table, hdr: avro::Header::default(), ev: avro::Event::default(), upper: Vec::new() })
    }

    /// A row per kept event; a record that is not a well-formed
    /// SensorBatch, or whose values do not fit the table, is dead-lettered
    /// with the reason.
    fn transform(&mut self, rec: &Record, out: &mut Output) -> Result<(), Error> {
        let h = &mut self.hdr;
        let mut d = avro::Decoder::new(rec.value, h).map_err(Error::msg)?;
        if h.batch_id < 0 {
            return Err(Error::msg(format!("batch_id {} is negative", h.batch_id)));
        }
        if h.batch_ts_ms < 0 || h.batch_ts_ms / 1000 > u32::MAX as i64 {
            return Err(Error::msg(format!(
                "batch_ts_ms {} is outside the range of DateTime (1970 to 2106)",
                h.batch_ts_ms
            )));
        }
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
            w.datetime(sec).uint16(ms).int64(h.send_ts_us).end()?;
        }
        match d.take_err() {
            Some(m) => Err(Error::msg(m)),
            None => Ok(()),
        }
    }
}

sluice::export!(SensorBatch);
