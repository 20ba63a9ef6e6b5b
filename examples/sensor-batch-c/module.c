/*
 * module.c: the C port of examples/sensor-batch (Go), with guest-sdk/c: the
 * same rows of sensor_events, byte for byte, in the layout the table's
 * schema has (ClickHouse 18.16's or the modern one with DateTime64), and
 * the same per-record error messages. The Avro decoder follows
 * examples/sensor-batch/sensor/avro.go rule for rule, so that every
 * malformed datum fails at the same byte with the same words.
 */
#include <stdlib.h>
#include "sluice.h"

#define SCHEMA_ID 1u

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

/* ---- error messages, built in a static buffer -------------------------- */

static char msg[512];
static size_t msg_len;

static void msg_str(const char *s) {
	size_t n = strlen(s);
	if (n > sizeof msg - msg_len)
		n = sizeof msg - msg_len;
	memcpy(msg + msg_len, s, n);
	msg_len += n;
}

static void msg_int(int64_t v) {
	char d[24];
	int i = sizeof d;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	do {
		d[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		d[--i] = '-';
	size_t n = sizeof d - (size_t)i;
	if (n > sizeof msg - msg_len)
		n = sizeof msg - msg_len;
	memcpy(msg + msg_len, d + i, n);
	msg_len += n;
}

/* ---- the decoder -------------------------------------------------------- */

typedef struct {
	const uint8_t *p;
	size_t n;
} span;

typedef struct {
	int64_t batch_id;
	span sensor, region;
	int64_t batch_ts_ms, send_ts_us;
} header;

typedef struct {
	int32_t seq;
	span name, unit;
	int64_t value;
	int quality_null;
	double quality;
	size_t ntags, tags_cap;
	span *tags; /* grown as needed, reused from event to event */
} event;

typedef struct {
	const uint8_t *p;
	size_t len, off;
	int64_t left; /* events left in the current block */
	int done, failed;
} decoder;

static decoder dec;
static header hdr;
static event ev;

/* fail records the first error, "avro: <what> at byte <off>", and makes
 * every later read fail fast. */
static void fail_begin(decoder *d) {
	(void)d;
	msg_len = 0;
	msg_str("avro: ");
}

static void fail_end(decoder *d, size_t off) {
	msg_str(" at byte ");
	msg_int((int64_t)off);
	d->failed = 1;
	d->off = d->len;
	d->left = 0;
}

static void fail(decoder *d, size_t off, const char *what, const char *suffix) {
	if (d->failed) {
		d->off = d->len;
		d->left = 0;
		return;
	}
	fail_begin(d);
	msg_str(what);
	msg_str(suffix);
	fail_end(d, off);
}

/* varint decodes the zigzag varint at p[i:]: 0 and *v, *next, or -1 when
 * truncated, -2 when it overflows 64 bits. */
static inline int varint(const uint8_t *p, size_t len, size_t i, int64_t *v, size_t *next) {
	uint64_t u = 0;
	for (unsigned s = 0; s < 64; s += 7) {
		if (i >= len)
			return -1;
		uint8_t c = p[i++];
		u |= (uint64_t)(c & 0x7f) << s;
		if (c < 0x80) {
			if (s == 63 && c > 1)
				return -2;
			*v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
			*next = i;
			return 0;
		}
	}
	return -2;
}

/* fail_varint is the error of a varint read at off that did not decode. */
static void fail_varint(decoder *d, size_t off, int rc, const char *what) {
	if (rc == -1)
		fail(d, off, "truncated reading ", what);
	else
		fail(d, off, what, ": varint overflows 64 bits");
}

static void fail_string(decoder *d, size_t off, int rc, int64_t n, const char *what) {
	if (rc < 0) {
		fail_varint(d, off, rc, what);
		return;
	}
	if (d->failed)
		return;
	fail_begin(d);
	msg_str(what);
	msg_str(n < 0 ? ": negative length " : ": length ");
	msg_int(n);
	if (n >= 0)
		msg_str(" overruns the message");
	fail_end(d, off);
}

static int64_t read_long(decoder *d, const char *what) {
	int64_t v;
	size_t next;
	int rc = varint(d->p, d->len, d->off, &v, &next);
	if (rc == 0) {
		d->off = next;
		return v;
	}
	if (!d->failed)
		fail_varint(d, d->off, rc, what);
	return 0;
}

static span read_bytes(decoder *d, const char *what) {
	span s = {0, 0};
	size_t start = d->off;
	int64_t v;
	size_t next;
	int rc = varint(d->p, d->len, d->off, &v, &next);
	if (rc < 0) {
		if (!d->failed)
			fail_varint(d, start, rc, what);
		return s;
	}
	d->off = next;
	if (v >= 0 && (uint64_t)v <= d->len - d->off) {
		s.p = d->p + d->off;
		s.n = (size_t)v;
		d->off += (size_t)v;
		return s;
	}
	fail_string(d, start, 0, v, what);
	return s;
}

/* dec_reset decodes the framing and the header; nonzero on an error, in msg. */
static int dec_reset(decoder *d, const uint8_t *p, size_t len, header *h) {
	d->p = p;
	d->len = len;
	d->off = 0;
	d->left = 0;
	d->done = d->failed = 0;
	if (len < 5 || p[0] != 0) {
		msg_len = 0;
		if (len == 0) {
			msg_str("avro: empty message, want Confluent wire format (0x00, schema id, datum)");
			return -1;
		}
		static const char hex[] = "0123456789abcdef";
		char b[3] = {hex[p[0] >> 4], hex[p[0] & 15], 0};
		msg_str("avro: not Confluent wire format: first byte 0x");
		msg_str(b);
		msg_str(" of ");
		msg_int((int64_t)len);
		msg_str(", want 0x00 and a 4-byte schema id");
		return -1;
	}
	uint32_t id = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
	if (id != SCHEMA_ID) {
		msg_len = 0;
		msg_str("avro: schema id ");
		msg_int(id);
		msg_str(", want 1 (SensorBatch)");
		return -1;
	}
	d->off = 5;
	h->batch_id = read_long(d, "batch_id");
	h->sensor = read_bytes(d, "sensor");
	switch (read_long(d, "region union index")) {
	case 0:
		h->region.p = 0;
		h->region.n = 0;
		break;
	case 1:
		h->region = read_bytes(d, "region");
		break;
	default:
		fail(d, d->off, "region: union index is neither 0 (null) nor 1 (string)", "");
	}
	h->batch_ts_ms = read_long(d, "batch_ts_ms");
	h->send_ts_us = read_long(d, "send_ts_us");
	return d->failed ? -1 : 0;
}

/* block_count reads the events array's block count; a negative count is
 * followed by the block's size in bytes. */
static int64_t block_count(decoder *d) {
	size_t start = d->off;
	int64_t n = read_long(d, "events block count");
	if (n < 0) {
		if (n == INT64_MIN) {
			fail(d, start, "events: block count out of range", "");
			return 0;
		}
		n = -n;
		if (read_long(d, "events block size") < 0) {
			fail(d, start, "events: negative block size", "");
			return 0;
		}
	}
	return d->failed ? 0 : n;
}

/* dec_next decodes the next event: 1, or 0 at the end or on an error. */
static int dec_next(decoder *d, event *e) {
	if (d->failed || d->done)
		return 0;
	if (d->left == 0) {
		d->left = block_count(d);
		if (d->left == 0) {
			d->done = 1;
			if (!d->failed && d->off != d->len) {
				fail_begin(d);
				msg_int((int64_t)(d->len - d->off));
				msg_str(" trailing bytes after the datum");
				fail_end(d, d->off);
			}
			return 0;
		}
	}
	d->left--;
	const uint8_t *p = d->p;
	size_t len = d->len, i = d->off, j, k;
	int64_t v = 0, n = 0;
	int rc;
	if ((rc = varint(p, len, i, &v, &j)) < 0) {
		fail_varint(d, i, rc, "seq");
		return 0;
	}
	if (v < INT32_MIN || v > INT32_MAX) {
		fail(d, i, "seq: out of the range of an Avro int", "");
		return 0;
	}
	e->seq = (int32_t)v;
	if ((rc = varint(p, len, j, &n, &k)) < 0 || (uint64_t)n > len - k) {
		fail_string(d, j, rc, n, "name");
		return 0;
	}
	e->name.p = p + k;
	e->name.n = (size_t)n;
	i = k + (size_t)n;
	if ((rc = varint(p, len, i, &n, &k)) < 0 || (uint64_t)n > len - k) {
		fail_string(d, i, rc, n, "unit");
		return 0;
	}
	e->unit.p = p + k;
	e->unit.n = (size_t)n;
	i = k + (size_t)n;
	if ((rc = varint(p, len, i, &e->value, &j)) < 0) {
		fail_varint(d, i, rc, "value");
		return 0;
	}
	if ((rc = varint(p, len, j, &v, &k)) < 0) {
		fail_varint(d, j, rc, "quality union index");
		return 0;
	}
	if (v == 0) {
		e->quality_null = 1;
		e->quality = 0;
		i = k;
	} else if (v == 1 && len >= 8 && k <= len - 8) {
		uint64_t bits = 0;
		for (int b = 7; b >= 0; b--)
			bits = bits << 8 | p[k + (size_t)b];
		memcpy(&e->quality, &bits, 8);
		e->quality_null = 0;
		i = k + 8;
	} else if (v == 1) {
		fail(d, k, "truncated reading quality", "");
		return 0;
	} else {
		fail(d, j, "quality: union index is neither 0 (null) nor 1 (double)", "");
		return 0;
	}
	e->ntags = 0;
	for (;;) {
		int64_t c = 0, size = 0;
		if ((rc = varint(p, len, i, &c, &j)) < 0) {
			fail_varint(d, i, rc, "tags block count");
			return 0;
		}
		if (c < 0) {
			if (c == INT64_MIN) {
				fail(d, i, "tags: block count out of range", "");
				return 0;
			}
			if ((rc = varint(p, len, j, &size, &k)) < 0) {
				fail_varint(d, j, rc, "tags block size");
				return 0;
			}
			if (size < 0) {
				fail(d, j, "tags: negative block size", "");
				return 0;
			}
			c = -c;
			j = k;
		}
		i = j;
		if (c == 0)
			break;
		for (; c > 0; c--) {
			if ((rc = varint(p, len, i, &n, &k)) < 0 || (uint64_t)n > len - k) {
				fail_string(d, i, rc, n, "tag");
				return 0;
			}
			if (e->ntags == e->tags_cap) {
				size_t cap = e->tags_cap ? 2 * e->tags_cap : 16;
				span *t = realloc(e->tags, cap * sizeof *t);
				if (!t) {
					fail(d, i, "tags: out of memory", "");
					return 0;
				}
				e->tags = t;
				e->tags_cap = cap;
			}
			e->tags[e->ntags].p = p + k;
			e->tags[e->ntags].n = (size_t)n;
			e->ntags++;
			i = k + (size_t)n;
		}
	}
	d->off = i;
	return 1;
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
 * but the layout's in schema.sql is refused. */
int sluice_module_init(sluice_config *cfg) {
	char name[256] = "sensor_events";
	sluice_bytes p;
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
	for (size_t i = 0; i < e->name.n; i++) {
		uint8_t c = e->name.p[i];
		upper[i] = (uint8_t)(c >= 'a' && c <= 'z' ? c - ('a' - 'A') : c);
	}
	/* value * 1000 wraps as Go's int64 does; the division truncates. */
	int64_t scaled = (int64_t)((uint64_t)e->value * 1000u) / ((int64_t)e->seq + 1);
	sluice_row_begin(out, &target);
	sluice_put_u64(out, (uint64_t)h->batch_id);
	sluice_put_u16(out, (uint16_t)e->seq);
	sluice_put_string(out, h->sensor.p, h->sensor.n);
	sluice_put_string(out, h->region.p, h->region.n);
	sluice_put_string(out, upper, e->name.n);
	sluice_put_string(out, e->unit.p, e->unit.n);
	sluice_put_i64(out, e->value);
	sluice_put_i64(out, scaled);
	if (e->quality_null) {
		sluice_put_null(out);
	} else {
		sluice_put_not_null(out);
		sluice_put_f64(out, e->quality);
	}
	sluice_put_array(out, e->ntags);
	for (size_t i = 0; i < e->ntags; i++)
		sluice_put_string(out, e->tags[i].p, e->tags[i].n);
	if (modern) {
		/* DateTime64(3) and DateTime64(6) ticks are the Avro values. */
		sluice_put_datetime64(out, h->batch_ts_ms);
		sluice_put_datetime64(out, h->send_ts_us);
	} else {
		sluice_put_datetime(out, (uint32_t)(h->batch_ts_ms / 1000));
		sluice_put_u16(out, (uint16_t)(h->batch_ts_ms % 1000));
		sluice_put_i64(out, h->send_ts_us);
	}
	return sluice_row_end(out);
}

/* A row per kept event; a record that is not a well-formed SensorBatch, or
 * whose values do not fit the table, is dead-lettered with the reason. */
int sluice_module_record(const sluice_record *rec, sluice_out *out) {
	if (dec_reset(&dec, rec->value.ptr, rec->value.len, &hdr) != 0)
		return sluice_fail_bytes(out, msg, msg_len);
	if (check_header(&hdr) != 0)
		return sluice_fail_bytes(out, msg, msg_len);
	while (dec_next(&dec, &ev))
		if (write_event(out, &hdr, &ev) != 0)
			return -1;
	if (dec.failed)
		return sluice_fail_bytes(out, msg, msg_len);
	return 0;
}
