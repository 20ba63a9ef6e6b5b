/*
 * sluice.c: the guest side of the sluice ABI v1 (guest-sdk/ABI.md) for C
 * modules: exports, framing, the output buffer and the schema check.
 *
 * Memory: the input buffer (sluice_alloc) and the output buffer grow
 * geometrically and are reused from batch to batch; the decoded init payload
 * is allocated once per instance. Nothing is allocated per record.
 */
#include "sluice.h"

#include <stdlib.h>

/* ---- small helpers ------------------------------------------------------- */

static uint32_t le32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static uint64_t le64(const uint8_t *p) {
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* A growable byte string for messages and the decoded config. */
typedef struct {
	char *p;
	size_t len, cap;
} strbuf;

static void sb_append(strbuf *b, const void *p, size_t n) {
	if (b->cap - b->len < n + 1) {
		size_t c = b->cap * 2;
		if (c < b->len + n + 1)
			c = b->len + n + 1;
		if (c < 256)
			c = 256;
		char *q = realloc(b->p, c);
		if (!q)
			abort();
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

static void sb_uint(strbuf *b, uint64_t v) {
	char d[20];
	int i = sizeof d;
	do {
		d[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	sb_append(b, d + i, sizeof d - (size_t)i);
}

/* sb_quote appends s in double quotes, escaping quotes, backslashes and
 * control characters (as Go's %q does for ASCII). */
static void sb_quote(strbuf *b, const char *s, size_t n) {
	static const char hex[] = "0123456789abcdef";
	sb_append(b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			sb_append(b, e, 2);
		} else if (c < 0x20 || c == 0x7f) {
			char e[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
			sb_append(b, e, 4);
		} else {
			sb_append(b, &s[i], 1);
		}
	}
	sb_append(b, "\"", 1);
}

/* ---- the framing reader -------------------------------------------------- */

/* reader decodes the little-endian framing. The first error sticks; after it
 * off is n, so every read fails and returns zero. */
typedef struct {
	const uint8_t *p;
	size_t n, off;
	const char *err;   /* what was being read, or a message (err_count) */
	size_t err_off;
	uint32_t err_count; /* a count that does not fit, when err_is_count */
	int err_is_count;
	int failed;
} reader;

static void rd_short(reader *r, const char *what) {
	if (!r->failed) {
		r->failed = 1;
		r->err = what;
		r->err_off = r->off;
	}
	r->off = r->n;
}

static uint32_t rd_u32(reader *r, const char *what) {
	if (r->n - r->off >= 4) {
		uint32_t v = le32(r->p + r->off);
		r->off += 4;
		return v;
	}
	rd_short(r, what);
	return 0;
}

static uint64_t rd_u64(reader *r, const char *what) {
	if (r->n - r->off >= 8) {
		uint64_t v = le64(r->p + r->off);
		r->off += 8;
		return v;
	}
	rd_short(r, what);
	return 0;
}

static sluice_bytes rd_bytes(reader *r, const char *what) {
	sluice_bytes b = {0, 0};
	uint32_t len = rd_u32(r, what);
	if (r->failed)
		return b;
	if (r->n - r->off >= len) {
		b.ptr = r->p + r->off;
		b.len = len;
		r->off += len;
		return b;
	}
	rd_short(r, what);
	return b;
}

/* rd_count reads a u32 element count and checks it against the bytes left,
 * given that an element takes at least min bytes. */
static uint32_t rd_count(reader *r, size_t min, const char *what) {
	uint32_t v = rd_u32(r, what);
	if (!r->failed && (uint64_t)v * min > r->n - r->off) {
		r->failed = 1;
		r->err = what;
		r->err_is_count = 1;
		r->err_count = v;
		r->err_off = r->off - 4;
		r->off = r->n;
		return 0;
	}
	return v;
}

/* rd_message appends the reader's error, as the Go SDK words it. */
static void rd_message(const reader *r, strbuf *b) {
	if (r->err_is_count) {
		sb_str(b, r->err);
		sb_str(b, " ");
		sb_uint(b, r->err_count);
		sb_str(b, " does not fit in the payload");
	} else {
		sb_str(b, "truncated reading ");
		sb_str(b, r->err);
	}
	sb_str(b, " at offset ");
	sb_uint(b, r->err_off);
}

/* ---- init ---------------------------------------------------------------- */

typedef struct {
	char *name;
	size_t name_len;
	uint32_t ncolumns;
	sluice_column *columns; /* strings owned by the config */
} table;

struct sluice_config {
	uint32_t nparams;
	sluice_bytes *params; /* key, value, key, value, … */
	uint32_t ntables;
	table *tables;
	strbuf refusal;
};

static sluice_config *g_cfg; /* the accepted config, for the instance's life */
static strbuf g_refusal;     /* the last refusal, valid until the next call */

static char *copy_str(sluice_bytes b) {
	char *s = malloc(b.len + 1);
	if (!s)
		abort();
	memcpy(s, b.ptr, b.len);
	s[b.len] = 0;
	return s;
}

static void free_config(sluice_config *c) {
	if (!c)
		return;
	for (uint32_t i = 0; i < c->nparams * 2; i++)
		free((void *)c->params[i].ptr);
	free(c->params);
	for (uint32_t i = 0; i < c->ntables; i++) {
		for (uint32_t j = 0; j < c->tables[i].ncolumns; j++) {
			free((char *)c->tables[i].columns[j].name);
			free((char *)c->tables[i].columns[j].type);
		}
		free(c->tables[i].columns);
		free(c->tables[i].name);
	}
	free(c->tables);
	free(c->refusal.p);
	free(c);
}

/* decode_init decodes the init payload, copying every string (the payload
 * buffer is reused for the next call). On failure it returns NULL with the
 * message in *msg. */
static sluice_config *decode_init(const uint8_t *p, size_t n, strbuf *msg) {
	reader r = {.p = p, .n = n};
	sluice_config *c = calloc(1, sizeof *c);
	if (!c)
		abort();
	c->nparams = rd_count(&r, 8, "nparams");
	c->params = calloc(c->nparams * 2 + 1, sizeof *c->params);
	for (uint32_t i = 0; i < c->nparams; i++) {
		sluice_bytes k = rd_bytes(&r, "param key");
		sluice_bytes v = rd_bytes(&r, "param value");
		c->params[2 * i] = (sluice_bytes){(const uint8_t *)copy_str(k), k.len};
		c->params[2 * i + 1] = (sluice_bytes){(const uint8_t *)copy_str(v), v.len};
	}
	c->ntables = rd_count(&r, 8, "ntables");
	c->tables = calloc(c->ntables + 1, sizeof *c->tables);
	for (uint32_t i = 0; i < c->ntables; i++) {
		table *t = &c->tables[i];
		sluice_bytes name = rd_bytes(&r, "table name");
		t->name = copy_str(name);
		t->name_len = name.len;
		/* Counted even after an error (it reads zero), so free_config
		 * frees exactly what was allocated. */
		t->ncolumns = rd_count(&r, 8, "ncolumns");
		t->columns = calloc(t->ncolumns + 1, sizeof *t->columns);
		for (uint32_t j = 0; j < t->ncolumns; j++) {
			sluice_bytes cn = rd_bytes(&r, "column name");
			sluice_bytes ct = rd_bytes(&r, "column type");
			t->columns[j] = (sluice_column){copy_str(cn), copy_str(ct)};
		}
	}
	if (!r.failed && r.off != n) {
		sb_str(msg, "sluice: malformed init payload: ");
		sb_uint(msg, n - r.off);
		sb_str(msg, " trailing bytes at offset ");
		sb_uint(msg, r.off);
	} else if (r.failed) {
		sb_str(msg, "sluice: malformed init payload: ");
		rd_message(&r, msg);
	} else if (c->ntables > 1u << 16) {
		sb_str(msg, "sluice: ");
		sb_uint(msg, c->ntables);
		sb_str(msg, " target tables: a table index is a u16");
	} else {
		return c;
	}
	free_config(c);
	return NULL;
}

int sluice_param(const sluice_config *cfg, const char *key, sluice_bytes *value) {
	size_t kn = strlen(key);
	for (uint32_t i = 0; i < cfg->nparams; i++) {
		sluice_bytes k = cfg->params[2 * i];
		if (k.len == kn && memcmp(k.ptr, key, kn) == 0) {
			*value = cfg->params[2 * i + 1];
			return 1;
		}
	}
	return 0;
}

int sluice_refuse(sluice_config *cfg, const char *msg) {
	cfg->refusal.len = 0;
	sb_str(&cfg->refusal, msg);
	return -1;
}

int sluice_refuse_context(sluice_config *cfg, const char *prefix) {
	strbuf b = {0};
	sb_str(&b, prefix);
	sb_str(&b, ": ");
	if (cfg->refusal.len)
		sb_append(&b, cfg->refusal.p, cfg->refusal.len);
	free(cfg->refusal.p);
	cfg->refusal = b;
	return -1;
}

/* canonical_equal compares two ClickHouse type names ignoring white space
 * outside single quotes (as the Go SDK's chtype.Canonical does). */
static int canonical_equal(const char *a, size_t an, const char *b, size_t bn) {
	size_t i = 0, j = 0;
	int qa = 0, qb = 0;
	for (;;) {
		while (i < an && !qa && (a[i] == ' ' || a[i] == '\t' || a[i] == '\r' || a[i] == '\n'))
			i++;
		while (j < bn && !qb && (b[j] == ' ' || b[j] == '\t' || b[j] == '\r' || b[j] == '\n'))
			j++;
		if (i == an || j == bn)
			return i == an && j == bn;
		if (a[i] != b[j])
			return 0;
		if (a[i] == '\\' && qa) { /* an escaped character inside quotes */
			if (i + 1 < an && j + 1 < bn && a[i + 1] == b[j + 1]) {
				i += 2;
				j += 2;
				continue;
			}
			if (i + 1 < an || j + 1 < bn)
				return 0;
		}
		if (a[i] == '\'')
			qa = !qa;
		if (b[j] == '\'')
			qb = !qb;
		i++;
		j++;
	}
}

int sluice_find_table(sluice_config *cfg, const char *name, sluice_table *out) {
	size_t nn = strlen(name);
	for (uint32_t i = 0; i < cfg->ntables; i++) {
		const table *t = &cfg->tables[i];
		if (t->name_len == nn && memcmp(t->name, name, nn) == 0) {
			*out = (sluice_table){t->name, (uint16_t)i, t->ncolumns, t->columns};
			return 0;
		}
	}
	strbuf *b = &cfg->refusal;
	b->len = 0;
	sb_str(b, "sluice: the pipeline has no target table ");
	sb_quote(b, name, nn);
	sb_str(b, " (tables: ");
	for (uint32_t i = 0; i < cfg->ntables; i++) {
		sb_str(b, i ? ", " : "");
		sb_quote(b, cfg->tables[i].name, cfg->tables[i].name_len);
	}
	sb_str(b, cfg->ntables ? ")" : "none)");
	return -1;
}

static void column_text(strbuf *b, const char *what, size_t i, const char *is, const sluice_column *c) {
	sb_str(b, what);
	sb_uint(b, i + 1);
	sb_str(b, is);
	sb_str(b, c->name);
	sb_str(b, " ");
	sb_str(b, c->type);
}

int sluice_table_expect(sluice_config *cfg, const sluice_table *t, const sluice_column *cols, size_t n) {
	strbuf probs = {0};
	size_t m = n > t->ncolumns ? n : t->ncolumns;
	for (size_t i = 0; i < m; i++) {
		const char *sep = probs.len ? "; " : "";
		if (i >= t->ncolumns) {
			sb_str(&probs, sep);
			column_text(&probs, "missing column #", i, " ", &cols[i]);
		} else if (i >= n) {
			sb_str(&probs, sep);
			column_text(&probs, "unexpected column #", i, " ", &t->columns[i]);
		} else if (strcmp(cols[i].name, t->columns[i].name) != 0 ||
		           !canonical_equal(cols[i].type, strlen(cols[i].type), t->columns[i].type,
		                            strlen(t->columns[i].type))) {
			sb_str(&probs, sep);
			column_text(&probs, "column #", i, " is ", &t->columns[i]);
			sb_str(&probs, ", want ");
			sb_str(&probs, cols[i].name);
			sb_str(&probs, " ");
			sb_str(&probs, cols[i].type);
		}
	}
	if (!probs.len)
		return 0;
	strbuf *b = &cfg->refusal;
	b->len = 0;
	sb_str(b, "sluice: table ");
	sb_quote(b, t->name, strlen(t->name));
	sb_str(b, " does not have the columns this module writes: ");
	sb_append(b, probs.p, probs.len);
	free(probs.p);
	return -1;
}

const char *sluice_run_init(const uint8_t *payload, size_t n, size_t *msg_len) {
	free_config(g_cfg);
	g_cfg = NULL;
	g_refusal.len = 0;
	sluice_config *c = decode_init(payload, n, &g_refusal);
	if (c) {
		if (sluice_module_init(c) == 0) {
			g_cfg = c;
			*msg_len = 0;
			return NULL;
		}
		if (c->refusal.len)
			sb_append(&g_refusal, c->refusal.p, c->refusal.len);
		else
			sb_str(&g_refusal, "sluice: the module refused its config (no message)");
		free_config(c);
	}
	*msg_len = g_refusal.len;
	return g_refusal.p;
}

/* ---- the output ---------------------------------------------------------- */

static sluice_out g_out;

void sluice__grow(sluice_out *o, size_t n) {
	size_t c = o->cap * 2;
	if (c < o->len + n)
		c = o->len + n;
	if (c < 64 << 10)
		c = 64 << 10;
	uint8_t *b = realloc(o->buf, c);
	if (!b)
		abort(); /* a trap: the host replaces the instance */
	o->buf = b;
	o->cap = c;
}

void sluice_row_begin(sluice_out *o, const sluice_table *t) {
	if (o->row_start) { /* the previous row was not ended */
		sluice_fail(o, "sluice: sluice_row_begin called before sluice_row_end of the previous row");
		return;
	}
	uint8_t *p = sluice_reserve(o, 6);
	memcpy(p, &t->index, 2);
	o->len += 6; /* the u32 length is patched by sluice_row_end */
	o->row_start = o->len - 4;
}

int sluice_row_end(sluice_out *o) {
	if (!o->row_start)
		return sluice_fail(o, "sluice: sluice_row_end called with no row started");
	uint64_t n = o->len - o->row_start - 4;
	if (n > UINT32_MAX)
		return sluice_fail(o, "sluice: row too long");
	uint32_t n32 = (uint32_t)n;
	memcpy(o->buf + o->row_start, &n32, 4);
	o->row_start = 0;
	o->nrows++;
	return 0;
}

void sluice_fail_begin(sluice_out *o) {
	if (o->failed)
		return;
	o->failed = 1;
	o->err_start = o->len;
	o->err_len = 0;
}

void sluice_fail_append(sluice_out *o, const void *p, size_t n) {
	if (o->failed != 1)
		return;
	/* The message is built at the end of the output; rows written after it
	 * would land on it, so it owns the bytes up to o->len. */
	if (o->err_start + o->err_len != o->len)
		return;
	memcpy(sluice_reserve(o, n), p, n);
	o->len += n;
	o->err_len += n;
}

int sluice_fail_end(sluice_out *o) {
	if (o->failed == 1)
		o->failed = 2;
	return -1;
}

int sluice_fail_bytes(sluice_out *o, const void *msg, size_t n) {
	if (o->failed)
		return -1;
	sluice_fail_begin(o);
	sluice_fail_append(o, msg, n);
	return sluice_fail_end(o);
}

int sluice_fail(sluice_out *o, const char *msg) { return sluice_fail_bytes(o, msg, strlen(msg)); }

/* Seconds since the epoch of 1900-01-01, 2299-12-31 23:59:59 and the last
 * second a DateTime64(9) reaches; the last day of Date and Date32. */
#define SLUICE__MIN_1900 (-2208988800LL)
#define SLUICE__MAX_2299 (10413791999LL)
#define SLUICE__MAX_DT64_9 (9223372036LL)
#define SLUICE__DAYS_DATE_MAX 65535
#define SLUICE__DAYS_DATE32_MIN (-25567)
#define SLUICE__DAYS_DATE32_MAX 120529

static int64_t floor_days(int64_t secs) { return secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400); }

static int time_out_of_range(sluice_out *o, const char *type, int64_t secs) {
	sluice_fail_begin(o);
	static const char prefix[] = "time out of range for ";
	sluice_fail_append(o, prefix, sizeof prefix - 1);
	sluice_fail_append(o, type, strlen(type));
	char num[24];
	int n = 0;
	uint64_t v = secs < 0 ? (uint64_t)(-(secs + 1)) + 1 : (uint64_t)secs;
	do {
		num[sizeof num - 1 - n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	if (secs < 0)
		num[sizeof num - 1 - n++] = '-';
	static const char mid[] = ": ";
	sluice_fail_append(o, mid, sizeof mid - 1);
	sluice_fail_append(o, num + sizeof num - n, (size_t)n);
	static const char unit[] = " seconds since the epoch";
	sluice_fail_append(o, unit, sizeof unit - 1);
	return sluice_fail_end(o);
}

int sluice_put_time_datetime(sluice_out *o, int64_t secs) {
	if (secs < 0 || secs > (int64_t)UINT32_MAX)
		return time_out_of_range(o, "DateTime", secs);
	sluice_put_u32(o, (uint32_t)secs);
	return 0;
}

int sluice_put_time_datetime64(sluice_out *o, int64_t secs, uint32_t nsec, int precision) {
	if (precision < 0 || precision > 9 || nsec >= 1000000000u)
		return sluice_fail(o, "DateTime64: precision must be 0…9 and nanoseconds below 10^9");
	if (secs < SLUICE__MIN_1900 || secs > SLUICE__MAX_2299 ||
	    (precision == 9 && (secs > SLUICE__MAX_DT64_9 || (secs == SLUICE__MAX_DT64_9 && nsec > 854775807u))))
		return time_out_of_range(o, "DateTime64", secs);
	int64_t scale = 1, unit = 1000000000;
	for (int i = 0; i < precision; i++) {
		scale *= 10;
		unit /= 10;
	}
	sluice_put_i64(o, secs * scale + (int64_t)(nsec / (uint32_t)unit));
	return 0;
}

int sluice_put_time_date(sluice_out *o, int64_t secs) {
	int64_t days = floor_days(secs);
	if (days < 0 || days > SLUICE__DAYS_DATE_MAX)
		return time_out_of_range(o, "Date", secs);
	sluice_put_u16(o, (uint16_t)days);
	return 0;
}

int sluice_put_time_date32(sluice_out *o, int64_t secs) {
	int64_t days = floor_days(secs);
	if (days < SLUICE__DAYS_DATE32_MIN || days > SLUICE__DAYS_DATE32_MAX)
		return time_out_of_range(o, "Date32", secs);
	sluice_put_i32(o, (int32_t)days);
	return 0;
}

int sluice_record_header(const sluice_record *rec, const char *key, sluice_bytes *value) {
	size_t kn = strlen(key);
	const uint8_t *p = rec->headers;
	for (uint32_t i = 0; i < rec->nheaders; i++) {
		uint32_t k = le32(p);
		uint32_t v = le32(p + 4 + k);
		if (k == kn && memcmp(p + 4, key, kn) == 0) {
			*value = (sluice_bytes){p + 8 + k, v};
			return 1;
		}
		p += 8 + k + v;
	}
	return 0;
}

/* write_error writes an error entry with message m at the end of o. m must
 * not point into o's buffer. */
static void write_error(sluice_out *o, const char *m, size_t n) {
	uint8_t *p = sluice_reserve(o, 5 + n);
	uint32_t n32 = (uint32_t)n;
	p[0] = 1;
	memcpy(p + 1, &n32, 4);
	memcpy(p + 5, m, n);
	o->len += 5 + n;
}

/* finish_failed turns the record entry at started into an error entry with
 * the message built in the buffer (or a default one). */
static void finish_failed(sluice_out *o, size_t started) {
	static const char none[] = "sluice: the module failed the record without a message";
	if (!o->failed || o->err_len == 0) {
		o->len = started;
		write_error(o, none, sizeof none - 1);
		return;
	}
	uint32_t n32 = (uint32_t)o->err_len;
	uint8_t *b = o->buf;
	memmove(b + started + 5, b + o->err_start, o->err_len);
	b[started] = 1;
	memcpy(b + started + 1, &n32, 4);
	o->len = started + 5 + o->err_len;
}

/* decode_record decodes the next record; the fast path is a record without
 * headers, with plain bounds checks. */
static int decode_record(reader *r, sluice_record *rec) {
	const uint8_t *p = r->p;
	size_t off = r->off, n = r->n;
	if (n - off >= 24) {
		uint32_t kn = le32(p + off + 16);
		if (kn <= n - off - 24) {
			size_t vo = off + 20 + kn;
			uint32_t vn = le32(p + vo);
			if (vn <= n - vo - 8) {
				size_t ho = vo + 4 + vn;
				if (le32(p + ho) == 0) {
					rec->offset = (int64_t)le64(p + off);
					rec->timestamp = (int64_t)le64(p + off + 8);
					rec->key = (sluice_bytes){p + off + 20, kn};
					rec->value = (sluice_bytes){p + vo + 4, vn};
					rec->nheaders = 0;
					rec->headers = p + ho + 4;
					r->off = ho + 4;
					return 1;
				}
			}
		}
	}
	rec->offset = (int64_t)rd_u64(r, "offset");
	rec->timestamp = (int64_t)rd_u64(r, "timestamp");
	rec->key = rd_bytes(r, "key");
	rec->value = rd_bytes(r, "value");
	rec->nheaders = rd_count(r, 8, "nheaders");
	rec->headers = r->p + r->off;
	for (uint32_t j = 0; j < rec->nheaders && !r->failed; j++) {
		rd_bytes(r, "header key");
		rd_bytes(r, "header value");
	}
	return !r->failed;
}

static strbuf g_msg; /* a batch-level message, reused */

const uint8_t *sluice_run_transform(const uint8_t *payload, size_t n, size_t *out_len) {
	sluice_out *o = &g_out;
	o->len = 0;
	reader r = {.p = payload, .n = n};
	sluice_record rec;
	rec.topic = rd_bytes(&r, "topic");
	rec.partition = (int32_t)rd_u32(&r, "partition");
	uint32_t nrec = rd_count(&r, 28, "nrecords"); /* a record takes at least 28 bytes */
	if (r.failed) {
		g_msg.len = 0;
		sb_str(&g_msg, "sluice: malformed batch payload: ");
		rd_message(&r, &g_msg);
		sluice_log(SLUICE_ERROR, g_msg.p, g_msg.len);
		sluice_put_u32(o, 0);
		*out_len = o->len;
		return o->buf;
	}
	sluice_put_u32(o, nrec);
	int bad = 0;
	for (uint32_t i = 0; i < nrec; i++) {
		size_t started = o->len;
		if (!bad && !decode_record(&r, &rec)) {
			bad = 1;
			g_msg.len = 0;
			sb_str(&g_msg, "sluice: malformed batch payload: record ");
			sb_uint(&g_msg, i);
			sb_str(&g_msg, ": ");
			rd_message(&r, &g_msg);
		}
		if (bad) {
			write_error(o, g_msg.p, g_msg.len);
			continue;
		}
		if (!g_cfg) {
			static const char m[] = "sluice: sluice_transform called before a successful sluice_init";
			write_error(o, m, sizeof m - 1);
			continue;
		}
		uint8_t *p = sluice_reserve(o, 5);
		memset(p, 0, 5); /* status ok, nrows patched below */
		o->len += 5;
		o->nrows = 0;
		o->failed = 0;
		o->row_start = 0;
		int rc = sluice_module_record(&rec, o);
		if (rc == 0 && !o->failed && o->row_start) {
			o->row_start = 0;
			sluice_fail(o, "sluice: the module returned without ending its row (sluice_row_end)");
		}
		if (rc != 0 || o->failed) {
			o->row_start = 0;
			finish_failed(o, started);
			continue;
		}
		memcpy(o->buf + started + 1, &o->nrows, 4);
	}
	if (!bad && r.off != n) {
		g_msg.len = 0;
		sb_str(&g_msg, "sluice: batch payload has ");
		sb_uint(&g_msg, n - r.off);
		sb_str(&g_msg, " trailing bytes");
		sluice_log(SLUICE_WARN, g_msg.p, g_msg.len);
	}
	*out_len = o->len;
	return o->buf;
}

/* ---- the exports --------------------------------------------------------- */

#ifdef __wasm__

__attribute__((import_module("sluice"), import_name("log"))) void sluice__host_log(int32_t level, const char *p, int32_t n);

void sluice_log(int level, const char *msg, size_t n) { sluice__host_log(level, msg, (int32_t)n); }

static uint8_t *g_in;
static size_t g_in_cap;

static int64_t pack(const void *p, size_t n) {
	if (n == 0)
		return 0;
	return (int64_t)((uint64_t)(uintptr_t)p << 32 | (uint32_t)n);
}

__attribute__((export_name("sluice_abi_version"))) int32_t sluice_abi_version(void) { return SLUICE_ABI_VERSION; }

__attribute__((export_name("sluice_alloc"))) void *sluice_alloc(int32_t size) {
	if (size < 0)
		return NULL;
	if ((size_t)size > g_in_cap || !g_in) {
		size_t c = g_in_cap * 2;
		if (c < (size_t)size)
			c = (size_t)size;
		if (c < 64 << 10)
			c = 64 << 10;
		free(g_in); /* the old buffer's contents are not kept, as the ABI allows */
		g_in = malloc(c);
		if (!g_in)
			abort();
		g_in_cap = c;
	}
	return g_in;
}

__attribute__((export_name("sluice_init"))) int64_t sluice_init(const uint8_t *p, int32_t n) {
	size_t len;
	const char *m = sluice_run_init(p, n > 0 ? (size_t)n : 0, &len);
	return pack(m, len);
}

__attribute__((export_name("sluice_transform"))) int64_t sluice_transform(const uint8_t *p, int32_t n) {
	size_t len;
	const uint8_t *out = sluice_run_transform(p, n > 0 ? (size_t)n : 0, &len);
	return pack(out, len);
}

#else

#include <stdio.h>

void sluice_log(int level, const char *msg, size_t n) {
	static const char *const names[] = {"debug", "info", "warn", "error"};
	fprintf(stderr, "sluice %s: %.*s\n", level >= 0 && level < 4 ? names[level] : "log", (int)n, msg);
}

#endif
