-- The target table of the sensor-batch modules, the ClickHouse 18.16 variant
-- of the workload's sensor_events (benchmarks/README.md): 18.16 has no
-- DateTime64 and no non_replicated_deduplication_window, so batch_ts is a
-- DateTime plus batch_ts_ms (the millisecond part), send_ts_us an Int64 and
-- ingest_ts a DateTime MATERIALIZED now() (one-second resolution). The column
-- order and ORDER BY are otherwise the reference's. LowCardinality needs
-- allow_experimental_low_cardinality_type = 1 on 18.16.
CREATE TABLE sensor_events (
  batch_id UInt64, event_seq UInt16,
  sensor LowCardinality(String), region LowCardinality(String),
  name_upper LowCardinality(String), unit LowCardinality(String),
  value Int64, value_scaled Int64, quality Nullable(Float64),
  tags Array(LowCardinality(String)),
  batch_ts DateTime, batch_ts_ms UInt16, send_ts_us Int64,
  ingest_ts DateTime MATERIALIZED now()
) ENGINE = MergeTree ORDER BY (sensor, batch_ts, batch_id, event_seq);

-- The reference table, for a modern server (the rig's primary figure runs on
-- ClickHouse 26.9). The modules tell it from a DateTime64 batch_ts at init
-- and write batch_ts and send_ts as DateTime64 ticks.
--
-- CREATE TABLE sensor_events (
--   batch_id UInt64, event_seq UInt16,
--   sensor LowCardinality(String), region LowCardinality(String),
--   name_upper LowCardinality(String), unit LowCardinality(String),
--   value Int64, value_scaled Int64, quality Nullable(Float64),
--   tags Array(LowCardinality(String)),
--   batch_ts DateTime64(3), send_ts DateTime64(6),
--   ingest_ts DateTime64(6) MATERIALIZED now64(6)
-- ) ENGINE = MergeTree ORDER BY (sensor, batch_ts, batch_id, event_seq)
-- SETTINGS non_replicated_deduplication_window = 1000;
