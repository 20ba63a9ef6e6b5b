/*
 * The C SDK's conformance module: it runs the script each record carries
 * (guest-sdk/conformance/README.md) with the SDK's writers. The C SDK has
 * no call that lists the tables, so the suite names them, in order, in the
 * parameter "tables" ("a|b").
 */
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

#define MAX_TABLES 16

static sluice_table tables[MAX_TABLES];
static size_t ntables;

/* dup returns b as a NUL-terminated string that lives for the instance. */
static char *dup(const uint8_t *p, size_t n) {
	char *s = malloc(n + 1);
	if (!s)
		abort();
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

int sluice_module_init(sluice_config *cfg) {
	sluice_bytes v;
	if (sluice_param(cfg, "refuse", &v))
		return sluice_refuse(cfg, dup(v.ptr, v.len));
	if (sluice_param(cfg, "expect", &v)) {
		sluice_table t;
		if (sluice_find_table(cfg, dup(v.ptr, v.len), &t) != 0)
			return -1;
		sluice_bytes spec = {(const uint8_t *)"", 0};
		sluice_param(cfg, "columns", &spec);
		char *s = dup(spec.ptr, spec.len);
		size_t n = 1;
		for (char *p = s; *p; p++)
			n += *p == '|';
		sluice_column *cols = calloc(n, sizeof *cols);
		if (!cols)
			abort();
		char *c = s;
		for (size_t i = 0; i < n; i++) {
			char *end = strchr(c, '|');
			if (end)
				*end = 0;
			char *sp = strchr(c, ' ');
			if (sp) {
				*sp = 0;
				cols[i] = (sluice_column){c, sp + 1};
			} else {
				cols[i] = (sluice_column){c, ""};
			}
			c = end ? end + 1 : c + strlen(c);
		}
		if (sluice_table_expect(cfg, &t, cols, n) != 0)
			return -1;
	}
	ntables = 0;
	if (sluice_param(cfg, "tables", &v) && v.len) {
		char *s = dup(v.ptr, v.len);
		for (char *name = s; name && ntables < MAX_TABLES;) {
			char *end = strchr(name, '|');
			if (end)
				*end = 0;
			if (sluice_find_table(cfg, name, &tables[ntables]) != 0)
				return -1;
			ntables++;
			name = end ? end + 1 : NULL;
		}
	}
	return 0;
}

typedef struct {
	const uint8_t *p, *end;
} script;

static uint64_t le(script *s, size_t n) {
	uint64_t v = 0;
	for (size_t i = 0; i < n; i++)
		v |= (uint64_t)s->p[i] << (8 * i);
	s->p += n;
	return v;
}

static sluice_bytes take(script *s) {
	size_t n = (size_t)le(s, 4);
	sluice_bytes b = {s->p, n};
	s->p += n;
	return b;
}

static uint64_t be64(const uint8_t *p) {
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

int sluice_module_record(const sluice_record *rec, sluice_out *out) {
	script s = {rec->value.ptr, rec->value.ptr + rec->value.len};
	while (s.p < s.end) {
		uint8_t op = *s.p++;
		switch (op) {
		case 'R':
			sluice_row_begin(out, &tables[le(&s, 2)]);
			break;
		case 'E':
			sluice_row_end(out);
			break;
		case 'X': {
			sluice_bytes m = take(&s);
			return sluice_fail_bytes(out, m.ptr, m.len);
		}
		case 'N':
			sluice_put_null(out);
			break;
		case 'n':
			sluice_put_not_null(out);
			break;
		case 'A':
			sluice_put_array(out, (size_t)le(&s, 4));
			break;
		case 'a':
			sluice_put_u8(out, (uint8_t)le(&s, 1));
			break;
		case 'b':
			sluice_put_u16(out, (uint16_t)le(&s, 2));
			break;
		case 'c':
			sluice_put_u32(out, (uint32_t)le(&s, 4));
			break;
		case 'd':
			sluice_put_u64(out, le(&s, 8));
			break;
		case 'e':
			sluice_put_i8(out, (int8_t)le(&s, 1));
			break;
		case 'f':
			sluice_put_i16(out, (int16_t)le(&s, 2));
			break;
		case 'g':
			sluice_put_i32(out, (int32_t)le(&s, 4));
			break;
		case 'h':
			sluice_put_i64(out, (int64_t)le(&s, 8));
			break;
		case 'i': {
			uint32_t bits = (uint32_t)le(&s, 4);
			float f;
			memcpy(&f, &bits, 4);
			sluice_put_f32(out, f);
			break;
		}
		case 'j': {
			uint64_t bits = le(&s, 8);
			double d;
			memcpy(&d, &bits, 8);
			sluice_put_f64(out, d);
			break;
		}
		case 's':
			sluice_put_bytes(out, take(&s));
			break;
		case 'x': {
			/* The C SDK writes FixedString(N) as exactly N bytes: the
			 * module pads. The suite's FixedString values are full width. */
			sluice_bytes b = take(&s);
			sluice_put_fixed(out, b.ptr, b.len);
			break;
		}
		case 'D':
			sluice_put_date(out, (uint16_t)le(&s, 2));
			break;
		case 'T':
			sluice_put_datetime(out, (uint32_t)le(&s, 4));
			break;
		case 't':
			sluice_put_datetime64(out, (int64_t)le(&s, 8));
			break;
		case 'B':
			sluice_put_bool(out, (int)le(&s, 1));
			break;
		case 'U':
			sluice_put_uuid(out, be64(s.p), be64(s.p + 8));
			s.p += 16;
			break;
		case 'm':
			sluice_put_enum8(out, (int8_t)le(&s, 1));
			break;
		case 'M':
			sluice_put_enum16(out, (int16_t)le(&s, 2));
			break;
		case 'v':
			sluice_put_ipv4(out, s.p[0], s.p[1], s.p[2], s.p[3]);
			s.p += 4;
			break;
		case 'V':
			sluice_put_ipv6(out, s.p);
			s.p += 16;
			break;
		case 'K':
			sluice_put_bytes(out, rec->key);
			break;
		case 'O':
			sluice_put_i64(out, rec->offset);
			break;
		case 'P':
			sluice_put_i32(out, rec->partition);
			break;
		case 'S':
			sluice_put_i64(out, rec->timestamp);
			break;
		case 'Q':
			sluice_put_bytes(out, rec->topic);
			break;
		case 'H': {
			sluice_bytes name = take(&s), v;
			char key[256];
			size_t n = name.len < sizeof key - 1 ? name.len : sizeof key - 1;
			memcpy(key, name.ptr, n);
			key[n] = 0;
			if (sluice_record_header(rec, key, &v)) {
				sluice_put_not_null(out);
				sluice_put_bytes(out, v);
			} else {
				sluice_put_null(out);
			}
			break;
		}
		case 'L': {
			uint32_t n = (uint32_t)le(&s, 4);
			sluice_put_array(out, n);
			for (uint32_t i = 0; i < n; i++)
				sluice_put_bytes(out, take(&s));
			break;
		}
		case 'I':
		case 'W': {
			uint32_t n = (uint32_t)le(&s, 4);
			sluice_put_array(out, n);
			for (uint32_t i = 0; i < n; i++)
				sluice_put_u64(out, le(&s, 8));
			break;
		}
		default:
			return sluice_fail(out, "conformance: unknown op");
		}
	}
	return 0;
}
