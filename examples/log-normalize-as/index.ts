// log-normalize in AssemblyScript: the port of examples/log-normalize (Go)
// with the AssemblyScript SDK, with the same rows and error messages. This
// file checks the schema and writes the rows; normalize.ts parses.

import { Config, Module, Output, Record, Table, col } from "../../guest-sdk/assemblyscript/assembly/index";
import { register } from "../../guest-sdk/assemblyscript/assembly/index";
export { sluice_abi_version, sluice_alloc, sluice_init, sluice_transform } from "../../guest-sdk/assemblyscript/assembly/index";
import { Entry, normalize } from "./normalize";

class LogNormalize extends Module {
  logs: Table | null = null;
  entry: Entry = new Entry(); // reused for every record

  /** The target table is "logs" unless the parameter "table" names another. */
  init(cfg: Config): string | null {
    const p = cfg.param("table");
    const t = cfg.table(p == null ? "logs" : p);
    if (t == null) return cfg.error;
    const err = t.expect([
      col("ts", "DateTime"),
      col("service", "LowCardinality(String)"),
      col("level", "LowCardinality(String)"),
      col("template", "String"),
      col("fingerprint", "UInt64"),
      col("msg", "String"),
      col("attrs.key", "Array(String)"),
      col("attrs.value", "Array(String)"),
    ]);
    if (err != null) return "log-normalize needs the table of examples/log-normalize/schema.sql: " + err;
    this.logs = t;
    return null;
  }

  /** One row per log line; a line that does not normalize is dead-lettered with the reason. */
  transform(rec: Record, out: Output): string | null {
    const e = this.entry;
    const err = normalize(rec.valuePtr, rec.valueLen, rec.timestamp, e);
    if (err != null) return err;
    if (e.time < 0 || e.time > <i64>u32.MAX_VALUE) return "ts " + e.time.toString() + " is outside the range of DateTime (1970 to 2106)";
    const w = out
      .row(this.logs!)
      .dateTime(<u32>e.time)
      .bytesAt(e.service.ptr, e.service.len)
      .string(e.level)
      .bytesAt(e.template.ptr, e.template.len)
      .uint64(e.fingerprint)
      .bytesAt(e.msg.ptr, e.msg.len)
      .beginArray(e.nattrs);
    for (let i = 0; i < e.nattrs; i++) w.bytesAt(e.attrs[i].key.ptr, e.attrs[i].key.len);
    w.beginArray(e.nattrs);
    for (let i = 0; i < e.nattrs; i++) w.bytesAt(e.attrs[i].value.ptr, e.attrs[i].value.len);
    return w.end();
  }
}

register(new LogNormalize());
