-- The target table of the log-normalize module. ClickHouse exposes the
-- Nested column as two arrays, so the module writes 8 columns in this order:
-- ts, service, level, template, fingerprint, msg, attrs.key, attrs.value.
-- ClickHouse 18.16 creates LowCardinality columns only with the setting
-- allow_experimental_low_cardinality_type = 1 (later versions need nothing).
CREATE TABLE logs (
  ts DateTime, service LowCardinality(String), level LowCardinality(String),
  template String, fingerprint UInt64, msg String,
  attrs Nested(key String, value String)
) ENGINE = MergeTree ORDER BY (service, level, ts)
