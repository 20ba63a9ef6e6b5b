/*
 * sluice.h: the C SDK for sluice normalization modules (guest ABI version 1,
 * guest-sdk/ABI.md). See README.md beside it.
 *
 * A module defines two functions, sluice_module_init and
 * sluice_module_record, and links with sluice.c. The SDK owns the exports,
 * the framing and the buffers; the module sees one record at a time and
 * writes rows with the sluice_put_* functions.
 *
 * The same sources build natively (for tests and benchmarks): then
 * sluice_run_init and sluice_run_transform take the payloads directly.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_ABI_VERSION 1

/* A byte string that aliases memory someone else owns. */
typedef struct {
	const uint8_t *ptr;
	size_t len;
} sluice_bytes;

/* A column a module writes: its name and ClickHouse type as written in the
 * table's schema, e.g. {"level", "LowCardinality(String)"}. */
typedef struct {
	const char *name;
	const char *type;
} sluice_column;

/* A target table found and checked at init. index is its position in the
 * init payload, the table index of its rows. */
typedef struct {
	const char *name;
	uint16_t index;
	uint32_t ncolumns;
	const sluice_column *columns; /* the table's, as the host declared them */
} sluice_table;

/* The init payload, decoded. Valid during sluice_module_init only. */
typedef struct sluice_config sluice_config;

/* One Kafka record. Its byte strings alias the batch payload: valid until
 * sluice_module_record returns. */
typedef struct {
	sluice_bytes topic;
	int32_t partition;
	int64_t offset;
	int64_t timestamp; /* milliseconds since the Unix epoch */
	sluice_bytes key;
	sluice_bytes value;
	uint32_t nheaders;
	const uint8_t *headers; /* framed; read with sluice_record_header */
} sluice_record;

/* The output payload under construction. */
typedef struct sluice_out {
	uint8_t *buf;
	size_t len, cap;
	size_t row_start; /* offset of the open row's u32 length; 0: no row open */
	uint32_t nrows;
	int failed;       /* 0: no error; 1: message being built; 2: message done */
	size_t err_start; /* the message is built at buf[err_start:err_start+err_len] */
	size_t err_len;
} sluice_out;

/* ---- to be defined by the module ---------------------------------------- */

/* Called once per instance, before any record. Look the tables up and check
 * them with sluice_find_table and sluice_table_expect. Return 0 to accept the config; otherwise
 * the message set with sluice_refuse (or by sluice_table_expect) refuses it. */
int sluice_module_init(sluice_config *cfg);

/* Called once per record. Write zero or more rows (zero filters the record
 * out) and return 0, or return sluice_fail(out, ...) to dead-letter the
 * record with a message; any rows written for it are then dropped. */
int sluice_module_record(const sluice_record *rec, sluice_out *out);

/* ---- init ---------------------------------------------------------------- */

/* The module parameter key, or 0 when the pipeline does not set it. */
int sluice_param(const sluice_config *cfg, const char *key, sluice_bytes *value);

/* Finds the target table called name and fills *t. Returns 0, or -1 with
 * the refusal message set (naming the tables the pipeline has). */
int sluice_find_table(sluice_config *cfg, const char *name, sluice_table *t);

/* Checks that table t has exactly the columns cols[0..n), names and types,
 * in this order (types compared as written, ignoring white space outside
 * quotes: String and LowCardinality(String) differ). Returns 0, or -1 with
 * the refusal message set, listing every difference. */
int sluice_table_expect(sluice_config *cfg, const sluice_table *t, const sluice_column *cols, size_t n);

/* Sets the refusal message (copied); returns -1, for `return sluice_refuse(…)`.
 * sluice_refuse_context puts prefix before the message already set (as
 * "prefix: message"), to add context to sluice_table_expect's. */
int sluice_refuse(sluice_config *cfg, const char *msg);
int sluice_refuse_context(sluice_config *cfg, const char *prefix);

/* ---- records ------------------------------------------------------------- */

/* The value of the record's first header called key, or 0 when none. */
int sluice_record_header(const sluice_record *rec, const char *key, sluice_bytes *value);

/* ---- the row writer ------------------------------------------------------ */

/* Rows are ClickHouse RowBinary: one value per column, in the order the
 * table declared at init. The SDK does not check each value's type against
 * its column (the check is once, at init, by sluice_table_expect); the host
 * decodes every row against the table's types and fails the record of a row
 * that does not match. */

void sluice__grow(sluice_out *o, size_t n);

/* sluice_reserve makes room for n more bytes and returns where they go. */
static inline uint8_t *sluice_reserve(sluice_out *o, size_t n) {
	if (__builtin_expect(o->cap - o->len < n, 0))
		sluice__grow(o, n);
	return o->buf + o->len;
}

/* Starts a row of table t. */
void sluice_row_begin(sluice_out *o, const sluice_table *t);
/* Ends the row. Returns 0, or -1 (and fails the record) when no row is open. */
int sluice_row_end(sluice_out *o);

/* The sluice_at_* writers store a value at p, which has room for it, and
 * return the position after it: the bytes of the sluice_put_* of the same
 * name (see "One reservation per row" below). */
#define SLUICE__AT(name, type)                                            \
	static inline uint8_t *sluice_at_##name(uint8_t *p, type v) {         \
		memcpy(p, &v, sizeof v);                                          \
		return p + sizeof v;                                              \
	}
#define SLUICE__PUT(name, type)                                          \
	SLUICE__AT(name, type)                                               \
	static inline void sluice_put_##name(sluice_out *o, type v) {        \
		memcpy(sluice_reserve(o, sizeof v), &v, sizeof v);               \
		o->len += sizeof v;                                              \
	}
/* Little-endian hosts only: wasm32, x86-64, arm64. */
SLUICE__PUT(u8, uint8_t)
SLUICE__PUT(u16, uint16_t)
SLUICE__PUT(u32, uint32_t)
SLUICE__PUT(u64, uint64_t)
SLUICE__PUT(i8, int8_t)
SLUICE__PUT(i16, int16_t)
SLUICE__PUT(i32, int32_t)
SLUICE__PUT(i64, int64_t)
SLUICE__PUT(f32, float)
SLUICE__PUT(f64, double)
#undef SLUICE__PUT
#undef SLUICE__AT

/* Bool, Date (days since the epoch), DateTime (seconds since the epoch),
 * Enum8 and Enum16 (the value's number). */
static inline void sluice_put_bool(sluice_out *o, int v) { sluice_put_u8(o, v != 0); }
static inline void sluice_put_date(sluice_out *o, uint16_t days) { sluice_put_u16(o, days); }
static inline void sluice_put_datetime(sluice_out *o, uint32_t secs) { sluice_put_u32(o, secs); }
static inline void sluice_put_enum8(sluice_out *o, int8_t v) { sluice_put_i8(o, v); }
static inline void sluice_put_enum16(sluice_out *o, int16_t v) { sluice_put_i16(o, v); }

/* The most bytes a LEB128 count takes, and a String of n bytes. */
#define SLUICE_VARINT_MAX 10
#define SLUICE_STRING_MAX(n) ((size_t)(n) + SLUICE_VARINT_MAX)

/* sluice__leb128 writes v at p, which has room for 10 bytes, and returns
 * the end. */
static inline uint8_t *sluice__leb128(uint8_t *p, uint64_t v) {
	while (v >= 0x80) {
		*p++ = (uint8_t)v | 0x80;
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint8_t *sluice_at_uvarint(uint8_t *p, uint64_t v) { return sluice__leb128(p, v); }
static inline uint8_t *sluice_at_string(uint8_t *p, const void *s, size_t n) {
	p = sluice__leb128(p, n);
	memcpy(p, s, n);
	return p + n;
}

/* A LEB128 length or count. */
static inline void sluice_put_uvarint(sluice_out *o, uint64_t v) {
	uint8_t *p = sluice_reserve(o, SLUICE_VARINT_MAX);
	o->len += (size_t)(sluice_at_uvarint(p, v) - p);
}

/* String (and LowCardinality(String)): a LEB128 length and the bytes, in
 * one reservation. */
static inline void sluice_put_string(sluice_out *o, const void *p, size_t n) {
	uint8_t *d = sluice_reserve(o, SLUICE_STRING_MAX(n));
	o->len += (size_t)(sluice_at_string(d, p, n) - d);
}
static inline void sluice_put_bytes(sluice_out *o, sluice_bytes b) { sluice_put_string(o, b.ptr, b.len); }
static inline void sluice_put_cstr(sluice_out *o, const char *s) { sluice_put_string(o, s, strlen(s)); }

/* FixedString(N): exactly n bytes. */
static inline void sluice_put_fixed(sluice_out *o, const void *p, size_t n) {
	memcpy(sluice_reserve(o, n), p, n);
	o->len += n;
}

/* Array(T): the element count, then that many T values. */
static inline void sluice_put_array(sluice_out *o, size_t count) { sluice_put_uvarint(o, count); }

/* Nullable(T): sluice_put_null, or sluice_put_not_null followed by a T. */
static inline void sluice_put_null(sluice_out *o) { sluice_put_u8(o, 1); }
static inline void sluice_put_not_null(sluice_out *o) { sluice_put_u8(o, 0); }

/* UUID from its two halves (hi: the first 16 hex digits of the text form). */
static inline void sluice_put_uuid(sluice_out *o, uint64_t hi, uint64_t lo) {
	sluice_put_u64(o, hi);
	sluice_put_u64(o, lo);
}
/* IPv4 from its four octets a.b.c.d; IPv6 from its 16 bytes, network order. */
static inline void sluice_put_ipv4(sluice_out *o, uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
	sluice_put_u32(o, (uint32_t)a << 24 | (uint32_t)b << 16 | (uint32_t)c << 8 | d);
}
static inline void sluice_put_ipv6(sluice_out *o, const uint8_t addr[16]) { sluice_put_fixed(o, addr, 16); }

/* Date32 (days since the epoch, negative before it) and DateTime64(P)
 * (ticks of 10^-P seconds since the epoch, e.g. milliseconds for P = 3).
 * DateTime(tz) and DateTime64(P, tz) take the same values: the zone only
 * changes how ClickHouse shows them. */
static inline void sluice_put_date32(sluice_out *o, int32_t days) { sluice_put_i32(o, days); }
static inline void sluice_put_datetime64(sluice_out *o, int64_t ticks) { sluice_put_i64(o, ticks); }

/* Int128 and UInt128 from their low and high 64 bits (two's complement);
 * Int256 and UInt256 from four 64-bit limbs, least significant first. */
static inline void sluice_put_int128(sluice_out *o, uint64_t lo, int64_t hi) {
	sluice_put_u64(o, lo);
	sluice_put_i64(o, hi);
}
static inline void sluice_put_uint128(sluice_out *o, uint64_t lo, uint64_t hi) {
	sluice_put_u64(o, lo);
	sluice_put_u64(o, hi);
}
static inline void sluice_put_int256(sluice_out *o, const uint64_t limbs[4]) {
	for (int i = 0; i < 4; i++)
		sluice_put_u64(o, limbs[i]);
}

/* Decimal(P, S), Decimal32(S) … Decimal256(S): the unscaled value (12.34 in
 * a Decimal(9, 2) is 1234) at the width of P: 4 bytes for P <= 9, 8 for
 * P <= 18, 16 for P <= 38 (sluice_put_int128), 32 for P <= 76
 * (sluice_put_int256). */
static inline void sluice_put_decimal32(sluice_out *o, int32_t unscaled) { sluice_put_i32(o, unscaled); }
static inline void sluice_put_decimal64(sluice_out *o, int64_t unscaled) { sluice_put_i64(o, unscaled); }

/* Map(K, V): the entry count, then that many key, value pairs. A Tuple is
 * its elements in order, with nothing before them. A JSON column takes the
 * value's text, written as a String. */
static inline void sluice_put_map(sluice_out *o, size_t count) { sluice_put_uvarint(o, count); }

/* ---- one reservation per row ----------------------------------------------
 * Each sluice_put_* checks the room left and updates the length through o:
 * in wasm, loads and stores of memory for every value. A module that knows
 * a bound of a row's size can write it with one reservation instead:
 * sluice_span_begin(o, n) makes room for n bytes and returns a cursor; the
 * sluice_at_* writers store a value at the cursor and return it moved past
 * the value, held in a local; sluice_span_end(o, cursor) takes the bytes
 * written. The bound is the sum of the values' sizes, with
 * SLUICE_STRING_MAX(n) for a String of n bytes and SLUICE_VARINT_MAX for an
 * Array or Map count. The bytes are those of the sluice_put_* writers, and
 * a span may sit between sluice_row_begin and sluice_row_end beside them.
 * sluice_span_end traps (abort) if the cursor went past the room made: a
 * bound that is too small is a bug of the module, which may have
 * overwritten its own memory by then. */

static inline uint8_t *sluice_span_begin(sluice_out *o, size_t n) { return sluice_reserve(o, n); }

static inline void sluice_span_end(sluice_out *o, uint8_t *p) {
	if (p < o->buf + o->len || p > o->buf + o->cap)
		abort();
	o->len = (size_t)(p - o->buf);
}

static inline uint8_t *sluice_at_fixed(uint8_t *p, const void *s, size_t n) {
	memcpy(p, s, n);
	return p + n;
}
static inline uint8_t *sluice_at_array(uint8_t *p, size_t count) { return sluice__leb128(p, count); }
static inline uint8_t *sluice_at_map(uint8_t *p, size_t count) { return sluice__leb128(p, count); }
static inline uint8_t *sluice_at_null(uint8_t *p) { return sluice_at_u8(p, 1); }
static inline uint8_t *sluice_at_not_null(uint8_t *p) { return sluice_at_u8(p, 0); }
static inline uint8_t *sluice_at_bool(uint8_t *p, int v) { return sluice_at_u8(p, v != 0); }
static inline uint8_t *sluice_at_date(uint8_t *p, uint16_t days) { return sluice_at_u16(p, days); }
static inline uint8_t *sluice_at_datetime(uint8_t *p, uint32_t secs) { return sluice_at_u32(p, secs); }
static inline uint8_t *sluice_at_date32(uint8_t *p, int32_t days) { return sluice_at_i32(p, days); }
static inline uint8_t *sluice_at_datetime64(uint8_t *p, int64_t ticks) { return sluice_at_i64(p, ticks); }
static inline uint8_t *sluice_at_enum8(uint8_t *p, int8_t v) { return sluice_at_i8(p, v); }
static inline uint8_t *sluice_at_enum16(uint8_t *p, int16_t v) { return sluice_at_i16(p, v); }
static inline uint8_t *sluice_at_decimal32(uint8_t *p, int32_t unscaled) { return sluice_at_i32(p, unscaled); }
static inline uint8_t *sluice_at_decimal64(uint8_t *p, int64_t unscaled) { return sluice_at_i64(p, unscaled); }

/* Times with range checks, from seconds since the epoch (and nanoseconds
 * for DateTime64(precision)): a time outside the type's range (DateTime
 * 1970 … 2106-02-07 06:28:15; Date 1970 … 2149-06-06; Date32 and
 * DateTime64 1900 … 2299, DateTime64(9) to 2262-04-11 23:47:16) writes
 * nothing and fails the record, returning -1, instead of landing as some
 * other date; 0 when written. Dates are the day in UTC; DateTime64
 * truncates to its precision. */
int sluice_put_time_datetime(sluice_out *o, int64_t secs);
int sluice_put_time_datetime64(sluice_out *o, int64_t secs, uint32_t nsec, int precision);
int sluice_put_time_date(sluice_out *o, int64_t secs);
int sluice_put_time_date32(sluice_out *o, int64_t secs);

/* ---- record errors ------------------------------------------------------- */

/* Fails the record with the message (copied; the first failure wins) and
 * returns -1, for `return sluice_fail(out, "…")`. */
int sluice_fail(sluice_out *o, const char *msg);
int sluice_fail_bytes(sluice_out *o, const void *msg, size_t n);
/* Fails the record with a message built by appending pieces: start with
 * sluice_fail_begin, append, then return sluice_fail_end. */
void sluice_fail_begin(sluice_out *o);
void sluice_fail_append(sluice_out *o, const void *p, size_t n);
int sluice_fail_end(sluice_out *o);

/* ---- logging ------------------------------------------------------------- */

enum { SLUICE_DEBUG = 0, SLUICE_INFO = 1, SLUICE_WARN = 2, SLUICE_ERROR = 3 };

/* Sends a log line to the host, which tags and rate-limits it. Natively it
 * goes to standard error. */
void sluice_log(int level, const char *msg, size_t n);

/* ---- native driving (tests and benchmarks) ------------------------------- */

/* What the exports do, for a native build: sluice_run_init returns NULL
 * when the module accepts the init payload, else the refusal (valid until
 * the next call); sluice_run_transform returns the output payload for a
 * batch payload and its length (valid until the next call). */
#define SLUICE__VISIBLE __attribute__((visibility("default")))
SLUICE__VISIBLE const char *sluice_run_init(const uint8_t *payload, size_t n, size_t *msg_len);
SLUICE__VISIBLE const uint8_t *sluice_run_transform(const uint8_t *payload, size_t n, size_t *out_len);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
