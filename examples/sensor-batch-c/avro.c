/*
 * avro.c: the Confluent-framed Avro SensorBatch decoder of the C
 * sensor-batch module. It follows examples/sensor-batch/sensor/avro.go rule
 * for rule, so that every malformed datum fails at the same byte with the
 * same words.
 */
#include <stdlib.h>
#include <string.h>
#include "sensor.h"

#define SCHEMA_ID 1u

typedef struct {
	const uint8_t *p;
	size_t len, off;
	int64_t left; /* events left in the current block */
	int done, failed;
} decoder;

static decoder dec;

/* fail records the first error, "avro: <what> at byte <off>", and makes
 * every later read fail fast. */
static void fail_begin(decoder *d) {
	(void)d;
	msg_reset();
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
		msg_reset();
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
		msg_reset();
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
			if (add_tag(e, p + k, (size_t)n) != 0) {
				fail(d, i, "tags: out of memory", "");
				return 0;
			}
			i = k + (size_t)n;
		}
	}
	d->off = i;
	return 1;
}

static int avro_reset(const uint8_t *p, size_t len, header *h) { return dec_reset(&dec, p, len, h); }
static int avro_next(event *e) { return dec_next(&dec, e); }
static int avro_failed(void) { return dec.failed; }

const decoder_ops avro_decoder = {avro_reset, avro_next, avro_failed};
