// sensor-batch in AssemblyScript: the port of examples/sensor-batch (Go)
// with the AssemblyScript SDK: the same rows of sensor_events, in the layout
// the table's schema has (ClickHouse 18.16's or the modern one with
// DateTime64), and the same per-record errors. avro.ts decodes.

import { Config, Module, Output, Record, Table, col } from "../../guest-sdk/assemblyscript/assembly/index";
import { register } from "../../guest-sdk/assemblyscript/assembly/index";
export { sluice_abi_version, sluice_alloc, sluice_init, sluice_transform } from "../../guest-sdk/assemblyscript/assembly/index";
import { Decoder, Event, Header } from "./avro";

// The range of DateTime64 that ClickHouse documents, 1900-01-01 00:00:00 to
// 2299-12-31 23:59:59.999999 UTC, in milliseconds and microseconds.
const MIN_TS64_MS: i64 = -2208988800000;
const MAX_TS64_MS: i64 = 10413791999999;
const MIN_TS64_US: i64 = MIN_TS64_MS * 1000;
const MAX_TS64_US: i64 = MAX_TS64_MS * 1000 + 999;

function rangeError(field: string, v: i64, type: string): string {
  return field + " " + v.toString() + " is outside the range of " + type;
}

class SensorBatch extends Module {
  table: Table | null = null;
  modern: bool = false; // batch_ts DateTime64(3), send_ts DateTime64(6)
  dec: Decoder = new Decoder();
  hdr: Header = new Header();
  ev: Event = new Event();
  upper: usize = 0; // name_upper, reused
  upperCap: i32 = 0;

  /**
   * The target table is sensor_events unless the parameter "table" names
   * another; a DateTime64 batch_ts makes it the modern layout, and any
   * schema but the layout's in schema.sql is refused, as the Go module does.
   */
  init(cfg: Config): string | null {
    const p = cfg.param("table");
    const name = p == null ? "sensor_events" : p;
    const t = cfg.table(name);
    if (t == null) return cfg.error;
    let modern = false;
    for (let i = 0; i < t.columns.length; i++) {
      const c = t.columns[i];
      if (c.name == "batch_ts") {
        modern = c.type.startsWith("DateTime64");
        break;
      }
    }
    const cols = [
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
    ];
    let needs = "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql";
    if (modern) {
      cols.push(col("batch_ts", "DateTime64(3)"));
      cols.push(col("send_ts", "DateTime64(6)"));
      needs += " (modern layout, DateTime64)";
    } else {
      cols.push(col("batch_ts", "DateTime"));
      cols.push(col("batch_ts_ms", "UInt16"));
      cols.push(col("send_ts_us", "Int64"));
    }
    const err = t.expect(cols);
    if (err != null) return needs + ": " + err;
    this.table = t;
    this.modern = modern;
    return null;
  }

  /** A row per kept event; a malformed record is dead-lettered with the reason. */
  transform(rec: Record, out: Output): string | null {
    const d = this.dec, h = this.hdr, e = this.ev;
    const p = rec.valuePtr;
    let err = d.reset(p, rec.valueLen, h);
    if (err != null) return err;
    if (h.batchId < 0) return "batch_id " + h.batchId.toString() + " is negative";
    const modern = this.modern;
    if (modern) {
      if (h.batchTsMs < MIN_TS64_MS || h.batchTsMs > MAX_TS64_MS) return rangeError("batch_ts_ms", h.batchTsMs, "DateTime64 (1900 to 2299)");
      if (h.sendTsUs < MIN_TS64_US || h.sendTsUs > MAX_TS64_US) return rangeError("send_ts_us", h.sendTsUs, "DateTime64 (1900 to 2299)");
    } else if (h.batchTsMs < 0 || h.batchTsMs / 1000 > <i64>u32.MAX_VALUE) {
      return rangeError("batch_ts_ms", h.batchTsMs, "DateTime (1970 to 2106)");
    }
    const sec = <u32>(h.batchTsMs / 1000), ms = <u16>(h.batchTsMs % 1000);
    const t = this.table!;
    while (d.next(e)) {
      if (<u32>e.seq > 65535) return "event seq " + e.seq.toString() + " is outside 0..65535 (event_seq UInt16)";
      if (e.unitLen == 4 && load<u32>(p + <usize>e.unitOff) == 0x706f7264) continue; // "drop"
      if (!e.qualityNull && e.quality < 0.2) continue;
      if (e.nameLen > this.upperCap) {
        this.upper = this.upper == 0 ? heap.alloc(<usize>e.nameLen) : heap.realloc(this.upper, <usize>e.nameLen);
        this.upperCap = e.nameLen;
      }
      for (let i = 0; i < e.nameLen; i++) {
        let c = load<u8>(p + <usize>(e.nameOff + i));
        if (c >= 0x61 && c <= 0x7a) c -= 0x20;
        store<u8>(this.upper + <usize>i, c);
      }
      const scaled = (e.value * 1000) / (<i64>e.seq + 1);
      const w = out
        .row(t)
        .uint64(<u64>h.batchId)
        .uint16(<u16>e.seq)
        .bytesAt(p + <usize>h.sensorOff, h.sensorLen)
        .bytesAt(p + <usize>h.regionOff, h.regionLen)
        .bytesAt(this.upper, e.nameLen)
        .bytesAt(p + <usize>e.unitOff, e.unitLen)
        .int64(e.value)
        .int64(scaled);
      if (e.qualityNull) w.null();
      else w.notNull().float64(e.quality);
      w.beginArray(e.ntags);
      for (let i = 0; i < e.ntags; i++) w.bytesAt(p + <usize>unchecked(e.tags[2 * i]), unchecked(e.tags[2 * i + 1]));
      // DateTime64(3) and DateTime64(6) ticks are the Avro values.
      if (modern) err = w.dateTime64(h.batchTsMs).dateTime64(h.sendTsUs).end();
      else err = w.dateTime(sec).uint16(ms).int64(h.sendTsUs).end();
      if (err != null) return err;
    }
    return d.err;
  }
}

register(new SensorBatch());
