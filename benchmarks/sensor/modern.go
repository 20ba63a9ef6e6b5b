package sensor

import (
	"fmt"
	"strings"
)

// Layout is which variant of sensor_events a table is.
type Layout int

const (
	// Layout18 is the ClickHouse 18.16 variant (DDL): batch_ts DateTime,
	// batch_ts_ms UInt16, send_ts_us Int64, ingest_ts DateTime.
	Layout18 Layout = iota
	// LayoutModern is the workload's published layout (ModernDDL):
	// batch_ts DateTime64(3), send_ts DateTime64(6), ingest_ts
	// DateTime64(6) MATERIALIZED now64(6), non_replicated_deduplication_window.
	LayoutModern
)

func (l Layout) String() string {
	if l == LayoutModern {
		return "modern"
	}
	return "18.16"
}

// DDL returns the CREATE TABLE of the layout.
func (l Layout) DDL(table string) string {
	if l == LayoutModern {
		return ModernDDL(table)
	}
	return DDL(table)
}

// GateSQL is GateSQL for a table of the layout. The modern layout's
// timestamps are split into the same three sums (batch_ts seconds, its
// millisecond part, send_ts in microseconds), so one Expectation serves
// both.
func (l Layout) GateSQL(table string, duplicates bool) string {
	q := GateSQL(table, duplicates)
	if l == LayoutModern {
		q = strings.Replace(q, legacyTsColumns, modernTsColumns, 1)
	}
	return q
}

const (
	legacyTsColumns = "sum(toUInt64(batch_ts)), sum(toUInt64(batch_ts_ms)), sum(send_ts_us)"
	modernTsColumns = "sum(toUInt64(intDiv(toUnixTimestamp64Milli(batch_ts), 1000))), " +
		"sum(toUInt64(toUnixTimestamp64Milli(batch_ts) % 1000)), sum(toUnixTimestamp64Micro(send_ts))"
)

// LatencyUs is the SQL expression of a row's latency in microseconds, from
// its send time to ingest_ts: whole seconds of ingest_ts on 18.16 (now()),
// microseconds on the modern layout (now64(6)).
func (l Layout) LatencyUs() string {
	if l == LayoutModern {
		return "(toUnixTimestamp64Micro(ingest_ts) - toUnixTimestamp64Micro(send_ts))"
	}
	return "(toInt64(ingest_ts) * 1000000 - send_ts_us)"
}

// SendTsUs is the SQL expression of a row's send time in microseconds.
func (l Layout) SendTsUs() string {
	if l == LayoutModern {
		return "toUnixTimestamp64Micro(send_ts)"
	}
	return "send_ts_us"
}

// LatencyResolutionS is the resolution of LatencyUs, in seconds.
func (l Layout) LatencyResolutionS() float64 {
	if l == LayoutModern {
		return 1e-6
	}
	return 1
}

// ModernKafkaEngine is the Kafka-engine arm on a modern ClickHouse (26.9):
// a Kafka table reading the corpus as Nested columns, in JSONEachRow (the
// server's profile must have input_format_import_nested_json = 1) or in
// AvroConfluent (the Avro array of event records maps to the Nested
// columns), and a materialized view doing the ARRAY JOIN, the two filters
// and the derived columns into a table of the published layout. None of
// 18.16's workarounds is needed: the view writes the target table itself,
// and ingest_ts is its MATERIALIZED now64(6).
type ModernKafkaEngine struct {
	Queue string // the Kafka-engine table
	View  string // the materialized view
	Table string // the target table (ModernDDL), which the gates read
}

// NewModernKafkaEngine names the arm's tables after table.
func NewModernKafkaEngine(table string) ModernKafkaEngine {
	return ModernKafkaEngine{Queue: table + "_queue", View: table + "_mv", Table: table}
}

// KafkaEngineSettings are the Kafka table's settings that vary by arm.
type KafkaEngineSettings struct {
	Broker, Topic, Group string
	// Format is "JSONEachRow" or "AvroConfluent".
	Format string
	// RegistryURL is format_avro_schema_registry_url (AvroConfluent).
	RegistryURL string
	// Consumers is kafka_num_consumers; BlockSize kafka_max_block_size
	// (messages per block pushed to the view).
	Consumers, BlockSize int
	// FlushIntervalMs is kafka_flush_interval_ms; 0 leaves the server's
	// default (stream_flush_interval_ms, 7.5 s).
	FlushIntervalMs int
}

// DDL returns the statements that create the arm, in order; the view
// starts consuming once created.
func (k ModernKafkaEngine) DDL(s KafkaEngineSettings) []string {
	settings := fmt.Sprintf(`kafka_broker_list = '%s', kafka_topic_list = '%s', kafka_group_name = '%s',
  kafka_format = '%s', kafka_num_consumers = %d, kafka_max_block_size = %d`,
		s.Broker, s.Topic, s.Group, s.Format, s.Consumers, s.BlockSize)
	if s.FlushIntervalMs > 0 {
		settings += fmt.Sprintf(", kafka_flush_interval_ms = %d", s.FlushIntervalMs)
	}
	if s.RegistryURL != "" {
		settings += fmt.Sprintf(", format_avro_schema_registry_url = '%s'", s.RegistryURL)
	}
	return []string{
		ModernDDL(k.Table),
		fmt.Sprintf(`CREATE TABLE %s (
  batch_id UInt64, sensor String, region Nullable(String), batch_ts_ms Int64, send_ts_us Int64,
  events Nested(seq UInt16, name String, unit String, value Int64, quality Nullable(Float64), tags Array(String))
) ENGINE = Kafka SETTINGS %s`, k.Queue, settings),
		fmt.Sprintf(`CREATE MATERIALIZED VIEW %s TO %s AS
SELECT
  batch_id,
  e_seq AS event_seq,
  sensor,
  ifNull(region, '') AS region,
  upper(e_name) AS name_upper,
  e_unit AS unit,
  e_value AS value,
  intDiv(e_value * 1000, toInt64(e_seq) + 1) AS value_scaled,
  e_quality AS quality,
  e_tags AS tags,
  fromUnixTimestamp64Milli(batch_ts_ms, 'UTC') AS batch_ts,
  fromUnixTimestamp64Micro(send_ts_us, 'UTC') AS send_ts
FROM %s
ARRAY JOIN events.seq AS e_seq, events.name AS e_name, events.unit AS e_unit,
  events.value AS e_value, events.quality AS e_quality, events.tags AS e_tags
WHERE e_unit != 'drop' AND ifNull(e_quality, 1.0) >= 0.2`, k.View, k.Table, k.Queue),
	}
}

// Stop returns the statements that stop the arm's consumption.
func (k ModernKafkaEngine) Stop() []string {
	return []string{"DROP TABLE IF EXISTS " + k.View, "DROP TABLE IF EXISTS " + k.Queue}
}
