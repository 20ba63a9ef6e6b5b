-- The quotes example's tables on every shard (README.md). The types are
-- spelt as system.columns spells them: the module checks them as written.
-- Both tables keep the tokens of their last 1,000 inserts, so that a retried
-- insert (sluice sends insert_deduplication_token on ClickHouse 22.2 and
-- later) is dropped instead of counted twice.

-- Every quote as it came, and where it came from in Kafka.
CREATE TABLE quotes_local (
  symbol LowCardinality(String),
  ts DateTime64(3, 'UTC'),
  bid Decimal(18, 4),
  ask Decimal(18, 4),
  say String,
  kafka_partition Int32,
  kafka_offset Int64
) ENGINE = MergeTree ORDER BY (symbol, ts)
SETTINGS non_replicated_deduplication_window = 1000;

-- The end of each symbol's day: the module writes one row per quote (1, its
-- mid, its spread) and the merges fold them into one row per symbol and UTC
-- day. Query it with sum() and GROUP BY, which is right before and after
-- the merges: average mid = sum(mid_sum) / sum(quotes).
CREATE TABLE quotes_eod_local (
  symbol LowCardinality(String),
  day Date,
  quotes UInt64,
  mid_sum Decimal(38, 5),
  spread_sum Decimal(38, 4)
) ENGINE = SummingMergeTree ORDER BY (symbol, day)
SETTINGS non_replicated_deduplication_window = 1000;
