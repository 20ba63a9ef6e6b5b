package sensor

import (
	"fmt"
	"strings"
)

// KafkaEngine is the ClickHouse half of the side-by-side arm: ClickHouse
// 18.16 consumes the JSON corpus itself, with a Kafka-engine table reading
// the events as Nested columns (the server's default profile must have
// input_format_import_nested_json = 1) and a materialized view doing the
// ARRAY JOIN, the two filters and the derived columns.
type KafkaEngine struct {
	Queue string // the Kafka-engine table
	View  string // the materialized view
	Store string // the MergeTree table the view writes
	// Gate is a plain view over Store under the target table's column
	// names: the gates and the results read it like the other arms' tables.
	Gate string
}

// NewKafkaEngine names the arm's tables after gate.
func NewKafkaEngine(gate string) KafkaEngine {
	return KafkaEngine{Queue: gate + "_queue", View: gate + "_mv", Store: gate + "_store", Gate: gate}
}

// DDL returns the statements that create the arm, in order; the view
// starts consuming once created. consumers is kafka_num_consumers;
// blockSize is kafka_max_block_size, in messages (batches of 100 events)
// per block pushed to the view.
//
// What 18.16 needs (see the workload's README): explicit LowCardinality
// casts, every target column selected (ingest_ts as now()), and the quality
// filter written as ifNull(quality, 1.0) >= 0.2, since NOT (q < 0.2) is
// NULL, hence false, for a NULL q.
//
// And one more, found here: 18.16 substitutes an alias for a column of
// the same name everywhere in a SELECT (even in a subquery, and before a
// MATERIALIZED column of the Kafka table, which its stream does not
// compute), so a view cannot both output batch_ts_ms and read the input's
// batch_ts_ms for batch_ts. Cascading views do not help either (a view
// writing TO a table does not trigger that table's views on 18.16). So
// the view writes the millisecond part into Store's column batch_ts_msec,
// which is otherwise the target table (DDL) column for column, and Gate
// renames it back.
func (k KafkaEngine) DDL(broker, topic, group string, consumers, blockSize int) []string {
	store := strings.Replace(DDL(k.Store), "batch_ts_ms UInt16", "batch_ts_msec UInt16", 1)
	return []string{
		store,
		fmt.Sprintf(`CREATE VIEW %s AS SELECT batch_id, event_seq, sensor, region, name_upper, unit, value,
  value_scaled, quality, tags, batch_ts, batch_ts_msec AS batch_ts_ms, send_ts_us, ingest_ts FROM %s`, k.Gate, k.Store),
		fmt.Sprintf(`CREATE TABLE %s (
  batch_id UInt64, sensor String, region Nullable(String), batch_ts_ms Int64, send_ts_us Int64,
  events Nested(seq UInt16, name String, unit String, value Int64, quality Nullable(Float64), tags Array(String))
) ENGINE = Kafka SETTINGS kafka_broker_list = '%s', kafka_topic_list = '%s', kafka_group_name = '%s',
  kafka_format = 'JSONEachRow', kafka_row_delimiter = '\n', kafka_num_consumers = %d, kafka_max_block_size = %d`,
			k.Queue, broker, topic, group, consumers, blockSize),
		fmt.Sprintf(`CREATE MATERIALIZED VIEW %s TO %s AS
SELECT
  batch_id,
  e_seq AS event_seq,
  toLowCardinality(sensor) AS sensor,
  toLowCardinality(ifNull(region, '')) AS region,
  toLowCardinality(upper(e_name)) AS name_upper,
  toLowCardinality(e_unit) AS unit,
  e_value AS value,
  intDiv(e_value * 1000, toInt64(e_seq) + 1) AS value_scaled,
  e_quality AS quality,
  CAST(e_tags AS Array(LowCardinality(String))) AS tags,
  toDateTime(intDiv(batch_ts_ms, 1000)) AS batch_ts,
  toUInt16(batch_ts_ms %% 1000) AS batch_ts_msec,
  send_ts_us,
  now() AS ingest_ts
FROM %s
ARRAY JOIN events.seq AS e_seq, events.name AS e_name, events.unit AS e_unit,
  events.value AS e_value, events.quality AS e_quality, events.tags AS e_tags
WHERE e_unit != 'drop' AND ifNull(e_quality, 1.0) >= 0.2`, k.View, k.Store, k.Queue),
	}
}

// Stop returns the statements that stop the arm's consumption.
func (k KafkaEngine) Stop() []string {
	return []string{"DROP TABLE IF EXISTS " + k.View, "DROP TABLE IF EXISTS " + k.Queue}
}
