/*
 * module.c: the C port of examples/sensor-batch (Go), with guest-sdk/c: the
 * same rows of sensor_events, byte for byte, in the layout the table's
 * schema has (ClickHouse 18.16's or the modern one with DateTime64), and
 * the same per-record error messages. The records are Confluent-framed
 * Avro (avro.c), or with the parameter format=json the JSON form of the
 * corpus that examples/sensor-batch-json reads (json.c).
 */
#include <stdlib.h>
#include "sluice.h"
#include "sensor.h"

static const sluice_column columns18[] = {
	{"batch_id", "UInt64"},
	{"event_seq", "UInt16"},
	{"sensor", "LowCardinality(String)"},
	{"region", "LowCardinality(String)"},
	{"name_upper", "LowCardinality(String)"},
	{"unit", "LowCardinality(String)"},
	{"value", "Int64"},
	{"value_scaled", "Int64"},
	{"quality", "Nullable(Float64)"},
	{"tags", "Array(LowCardinality(String))"},
	{"batch_ts", "DateTime"},
	{"batch_ts_ms", "UInt16"},
	{"send_ts_us", "Int64"},
};

/* The reference layout of a modern ClickHouse: batch_ts DateTime64(3) and
 * send_ts DateTime64(6) instead of the last three columns of columns18. */
static const sluice_column columns_modern[] = {
	{"batch_id", "UInt64"},
	{"event_seq", "UInt16"},
	{"sensor", "LowCardinality(String)"},
	{"region", "LowCardinality(String)"},
	{"name_upper", "LowCardinality(String)"},
	{"unit", "LowCardinality(String)"},
	{"value", "Int64"},
	{"value_scaled", "Int64"},
	{"quality", "Nullable(Float64)"},
	{"tags", "Array(LowCardinality(String))"},
	{"batch_ts", "DateTime64(3)"},
	{"send_ts", "DateTime64(6)"},
};

static sluice_table target;
static int modern; /* the table has the modern layout (columns_modern) */
static const decoder_ops *dec = &avro_decoder; /* the format parameter's */
static header hdr;
static event ev;

/* ---- error messages, built in a static buffer -------------------------- */

char msg[8192];
size_t msg_len;

void msg_reset(void) { msg_len = 0; }

void msg_bytes(const uint8_t *p, size_t n) {
	if (n > sizeof msg - msg_len)
		n = sizeof msg - msg_len;
	memcpy(msg + msg_len, p, n);
	msg_len += n;
}

void msg_str(const char *s) { msg_bytes((const uint8_t *)s, strlen(s)); }

void msg_int(int64_t v) {
	char d[24];
	int i = sizeof d;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	do {
		d[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		d[--i] = '-';
	msg_bytes((const uint8_t *)d + i, sizeof d - (size_t)i);
}

int add_tag(event *e, const uint8_t *p, size_t n) {
	if (e->ntags == e->tags_cap) {
		size_t cap = e->tags_cap ? 2 * e->tags_cap : 16;
		span *t = realloc(e->tags, cap * sizeof *t);
		if (!t)
			return -1;
		e->tags = t;
		e->tags_cap = cap;
	}
	e->tags[e->ntags].p = p;
	e->tags[e->ntags].n = n;
	e->ntags++;
	return 0;
}

/* ---- the module --------------------------------------------------------- */

/* is_modern reports whether the table's batch_ts is a DateTime64: the
 * modern layout. */
static int is_modern(const sluice_table *t) {
	for (uint32_t i = 0; i < t->ncolumns; i++)
		if (strcmp(t->columns[i].name, "batch_ts") == 0)
			return strncmp(t->columns[i].type, "DateTime64", 10) == 0;
	return 0;
}

/* The target table is sensor_events unless the parameter "table" names
 * another; a DateTime64 batch_ts makes it the modern layout, and any schema
 * but the layout's in schema.sql is refused. The parameter "format" is
 * avro (the default) or json. */
int sluice_module_init(sluice_config *cfg) {
	char name[256] = "sensor_events";
	sluice_bytes p;
	dec = &avro_decoder;
	if (sluice_param(cfg, "format", &p)) {
		if (p.len == 4 && memcmp(p.ptr, "json", 4) == 0) {
			dec = &json_decoder;
		} else if (!(p.len == 4 && memcmp(p.ptr, "avro", 4) == 0)) {
			msg_reset();
			msg_str("sensor-batch: the format parameter is \"");
			msg_bytes(p.ptr, p.len > 256 ? 256 : p.len);
			msg_str(p.len > 256 ? "…\", want avro or json" : "\", want avro or json");
			msg[msg_len < sizeof msg ? msg_len : sizeof msg - 1] = 0;
			return sluice_refuse(cfg, msg);
		}
	}
	if (sluice_param(cfg, "table", &p)) {
		if (p.len >= sizeof name)
			return sluice_refuse(cfg, "sensor-batch: the table parameter is too long");
		memcpy(name, p.ptr, p.len);
		name[p.len] = 0;
	}
	if (sluice_find_table(cfg, name, &target) != 0)
		return -1;
	modern = is_modern(&target);
	if (modern) {
		if (sluice_table_expect(cfg, &target, columns_modern, sizeof columns_modern / sizeof columns_modern[0]) != 0)
			return sluice_refuse_context(cfg, "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql (modern layout, DateTime64)");
		return 0;
	}
	if (sluice_table_expect(cfg, &target, columns18, sizeof columns18 / sizeof columns18[0]) != 0)
		return sluice_refuse_context(cfg, "sensor-batch needs the sensor_events table of examples/sensor-batch/schema.sql");
	return 0;
}

/* The range of DateTime64 that ClickHouse documents, 1900-01-01 00:00:00 to
 * 2299-12-31 23:59:59.999999 UTC, in milliseconds and microseconds. */
#define MIN_TS64_MS INT64_C(-2208988800000)
#define MAX_TS64_MS INT64_C(10413791999999)
#define MIN_TS64_US (MIN_TS64_MS * 1000)
#define MAX_TS64_US (MAX_TS64_MS * 1000 + 999)

static int range_error(const char *field, int64_t v, const char *type) {
	msg_str(field);
	msg_str(" ");
	msg_int(v);
	msg_str(" is outside the range of ");
	msg_str(type);
	return -1;
}

/* check_header: batch_id fits UInt64, and the timestamps the table's
 * types: batch_ts_ms DateTime in the 18.16 layout, batch_ts_ms and
 * send_ts_us DateTime64 in the modern one. */
static int check_header(const header *h) {
	msg_len = 0;
	if (h->batch_id < 0) {
		msg_str("batch_id ");
		msg_int(h->batch_id);
		msg_str(" is negative");
		return -1;
	}
	if (modern) {
		if (h->batch_ts_ms < MIN_TS64_MS || h->batch_ts_ms > MAX_TS64_MS)
			return range_error("batch_ts_ms", h->batch_ts_ms, "DateTime64 (1900 to 2299)");
		if (h->send_ts_us < MIN_TS64_US || h->send_ts_us > MAX_TS64_US)
			return range_error("send_ts_us", h->send_ts_us, "DateTime64 (1900 to 2299)");
		return 0;
	}
	if (h->batch_ts_ms < 0 || h->batch_ts_ms / 1000 > (int64_t)UINT32_MAX)
		return range_error("batch_ts_ms", h->batch_ts_ms, "DateTime (1970 to 2106)");
	return 0;
}

static uint8_t *upper;
static size_t upper_cap;

/* upper8 upper-cases the bytes of x that are ASCII a to z, as the Go
 * module's upper8: each byte's low 7 bits plus 0x80-'a' set its top bit
 * when it is 'a' or more, plus 0x80-'z'-1 when it is past 'z', without a
 * carry into the next byte; a byte whose own top bit is set is left. */
static inline uint64_t upper8(uint64_t x) {
	const uint64_t ones = UINT64_C(0x0101010101010101);
	uint64_t h = x & (0x7f * ones);
	uint64_t m = (h + (0x80 - 'a') * ones) & ~(h + (0x80 - 'z' - 1) * ones) & ~x & (0x80 * ones);
	return x ^ m >> 2; /* 0x80 >> 2 is 'a' - 'A' */
}

/* upper_ascii writes s[0:n] to dst with a to z upper-cased and every other
 * byte as it is, as the Go module's AppendUpper: eight bytes at a time, the
 * last eight overlapping the ones before, since a loop iteration costs
 * more in wasm than the work of a byte. */
static inline void upper_ascii(uint8_t *dst, const uint8_t *s, size_t n) {
	uint64_t v;
	if (n < 8) {
		for (size_t i = 0; i < n; i++) {
			uint8_t c = s[i];
			dst[i] = (uint8_t)(c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c);
		}
		return;
	}
	for (size_t i = 0; i < n - 8; i += 8) {
		memcpy(&v, s + i, 8);
		v = upper8(v);
		memcpy(dst + i, &v, 8);
	}
	memcpy(&v, s + n - 8, 8);
	v = upper8(v);
	memcpy(dst + n - 8, &v, 8);
}

/* write_event applies the transform to e: a seq event_seq cannot hold
 * fails the record, dropped events write nothing, the others a row in the
 * table's layout. h must have passed check_header. */
static int write_event(sluice_out *out, const header *h, const event *e) {
	if ((uint32_t)e->seq > 65535) {
		msg_len = 0;
		msg_str("event seq ");
		msg_int(e->seq);
		msg_str(" is outside 0..65535 (event_seq UInt16)");
		return sluice_fail_bytes(out, msg, msg_len);
	}
	if (e->unit.n == 4 && memcmp(e->unit.p, "drop", 4) == 0)
		return 0;
	if (!e->quality_null && e->quality < 0.2)
		return 0;
	if (e->name.n > upper_cap) {
		uint8_t *u = realloc(upper, e->name.n);
		if (!u)
			return sluice_fail(out, "sensor-batch: out of memory");
		upper = u;
		upper_cap = e->name.n;
	}
	upper_ascii(upper, e->name.p, e->name.n);
	/* value * 1000 wraps as Go's int64 does; the division truncates. */
	int64_t scaled = (int64_t)((uint64_t)e->value * 1000u) / ((int64_t)e->seq + 1);
	/* The row in one span: a bound of its size, then the values at a
	 * cursor (sluice.h, "one reservation per row"). */
	size_t bound = 8 + 2 + SLUICE_STRING_MAX(h->sensor.n) + SLUICE_STRING_MAX(h->region.n) +
	               SLUICE_STRING_MAX(e->name.n) + SLUICE_STRING_MAX(e->unit.n) + 8 + 8 + 1 + 8 +
	               SLUICE_VARINT_MAX + 8 + 8;
	for (size_t i = 0; i < e->ntags; i++)
		bound += SLUICE_STRING_MAX(e->tags[i].n);
	sluice_row_begin(out, &target);
	uint8_t *p = sluice_span_begin(out, bound);
	p = sluice_at_u64(p, (uint64_t)h->batch_id);
	p = sluice_at_u16(p, (uint16_t)e->seq);
	p = sluice_at_string(p, h->sensor.p, h->sensor.n);
	p = sluice_at_string(p, h->region.p, h->region.n);
	p = sluice_at_string(p, upper, e->name.n);
	p = sluice_at_string(p, e->unit.p, e->unit.n);
	p = sluice_at_i64(p, e->value);
	p = sluice_at_i64(p, scaled);
	if (e->quality_null) {
		p = sluice_at_null(p);
	} else {
		p = sluice_at_not_null(p);
		p = sluice_at_f64(p, e->quality);
	}
	p = sluice_at_array(p, e->ntags);
	for (size_t i = 0; i < e->ntags; i++)
		p = sluice_at_string(p, e->tags[i].p, e->tags[i].n);
	if (modern) {
		/* DateTime64(3) and DateTime64(6) ticks are the Avro values. */
		p = sluice_at_datetime64(p, h->batch_ts_ms);
		p = sluice_at_datetime64(p, h->send_ts_us);
	} else {
		p = sluice_at_datetime(p, (uint32_t)(h->batch_ts_ms / 1000));
		p = sluice_at_u16(p, (uint16_t)(h->batch_ts_ms % 1000));
		p = sluice_at_i64(p, h->send_ts_us);
	}
	sluice_span_end(out, p);
	return sluice_row_end(out);
}

/* A row per kept event; a record that is not a well-formed SensorBatch, or
 * whose values do not fit the table, is dead-lettered with the reason. */
int sluice_module_record(const sluice_record *rec, sluice_out *out) {
	if (dec->reset(rec->value.ptr, rec->value.len, &hdr) != 0)
		return sluice_fail_bytes(out, msg, msg_len);
	if (check_header(&hdr) != 0)
		return sluice_fail_bytes(out, msg, msg_len);
	while (dec->next(&ev))
		if (write_event(out, &hdr, &ev) != 0)
			return -1;
	if (dec->failed())
		return sluice_fail_bytes(out, msg, msg_len);
	return 0;
}
