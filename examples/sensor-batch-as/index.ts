// sensor-batch in AssemblyScript: the port of examples/sensor-batch (Go)
// with the AssemblyScript SDK: the same rows of sensor_events (the
// ClickHouse 18.16 layout) and the same per-record errors. avro.ts decodes.

import { Config, Module, Output, Record, Table, col } from "../../guest-sdk/assemblyscript/assembly/index";
import { register } from "../../guest-sdk/assemblyscript/assembly/index";
export { sluice_abi_version, sluice_alloc, sluice_init, sluice_transform } from "../../guest-sdk/assemblyscript/assembly/index";
import { Decoder, Event, Header } from "./avro";

class SensorBatch extends Module {
  table: Table | null = null;
  dec: Decoder = new Decoder();
  hdr: Header = new Header();
  ev: Event = new Event();
  upper: usize = 0; // name_upper, reused
  upperCap: i32 = 0;

  /**
   * The target table is sensor_events unless the parameter "table" names
   * another; any schema but the 18.16 one of schema.sql is refused, the
   * modern (DateTime64) layout too, as the Go module does.
   */
  init(cfg: Config): string | null {
    const p = cfg.param("table");
    const name = p == null ? "sensor_events" : p;
    const t = cfg.table(name);
    if (t == null) return cfg.error;
    for (let i = 0; i < t.columns.length; i++) {
      const c = t.columns[i];
      if (c.name == "batch_ts") {
        if (c.type.startsWith("DateTime64")) {
          return "sensor-batch: table \"" + name + "\" has the modern layout (DateTime64); this build of the module writes only the ClickHouse 18.16 layout";
        }
        break;
      }
    }
    const err = t.expect([
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
    ]);
    if (err != null) return "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql: " + err;
    this.table = t;
    return null;
  }

  /** A row per kept event; a malformed record is dead-lettered with the reason. */
  transform(rec: Record, out: Output): string | null {
    const d = this.dec, h = this.hdr, e = this.ev;
    const p = rec.valuePtr;
    let err = d.reset(p, rec.valueLen, h);
    if (err != null) return err;
    if (h.batchId < 0) return "batch_id " + h.batchId.toString() + " is negative";
    if (h.batchTsMs < 0 || h.batchTsMs / 1000 > <i64>u32.MAX_VALUE) {
      return "batch_ts_ms " + h.batchTsMs.toString() + " is outside the range of DateTime (1970 to 2106)";
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
      err = w.dateTime(sec).uint16(ms).int64(h.sendTsUs).end();
      if (err != null) return err;
    }
    return d.err;
  }
}

register(new SensorBatch());
