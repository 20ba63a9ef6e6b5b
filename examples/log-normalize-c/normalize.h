/*
 * normalize.h: one JSON log line to the fields of a row of the logs table,
 * the C port of examples/log-normalize/normalize (same rules, same error
 * messages). Plain C99 with the C library only: it builds for wasm32-wasi
 * (the module, with module.c) and natively (tests and benchmarks).
 */
#ifndef LOG_NORMALIZE_H
#define LOG_NORMALIZE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
	const uint8_t *p;
	size_t n;
} ln_bytes;

/* An attribute: a top-level field other than ts, level, service and msg. A
 * string value is decoded; any other value is its compact JSON text. */
typedef struct {
	ln_bytes key, value;
} ln_attr;

/* A normalized log line. Reuse one entry for many lines (zero-initialise it
 * first): its byte strings alias the input and the entry's buffers, valid
 * until the next ln_normalize with the same entry. */
typedef struct {
	int64_t time;     /* seconds since the Unix epoch, rounded down */
	ln_bytes service; /* "unknown" when missing, null or empty */
	ln_bytes level;   /* trace, debug, info, warn, error, fatal or unknown */
	ln_bytes msg;
	ln_bytes template_; /* see ln_append_template */
	uint64_t fingerprint;
	ln_attr *attrs; /* sorted by key; of duplicate keys, the last wins */
	size_t nattrs;

	/* error: the message when ln_normalize fails */
	const char *err;
	size_t err_len;

	/* buffers, grown as needed and reused */
	size_t attrs_cap;
	ln_attr *scratch;
	uint8_t *arena; /* decoded strings and compacted JSON */
	size_t arena_cap;
	uint8_t *tmpl;
	size_t tmpl_cap;
	char *errbuf;
	size_t errbuf_cap;
} ln_entry;

/* ln_normalize parses value, a JSON object, into e (the rules are those of
 * examples/log-normalize/README.md). It returns 0, or -1 with the reason in
 * e->err. */
int ln_normalize(const uint8_t *value, size_t n, int64_t kafka_ts_millis, ln_entry *e);

/* ln_append_template writes the template of msg[0..n) to dst, which must
 * have room for ln_template_bound(n) bytes, and returns its length. */
size_t ln_append_template(uint8_t *dst, const uint8_t *msg, size_t n);
static inline size_t ln_template_bound(size_t n) { return 5 * n; }

/* ln_fingerprint is the 64-bit FNV-1a hash of p[0..n). */
uint64_t ln_fingerprint(const uint8_t *p, size_t n);

/* ln_free releases e's buffers. */
void ln_free(ln_entry *e);

#endif
