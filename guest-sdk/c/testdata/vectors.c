/*
 * vectors.c writes the value of every line of guest-sdk/testdata/rowbinary.tsv
 * with the C SDK and prints "type<TAB>literal<TAB>hex" for each, for
 * internal/cnative's TestCSDKRowBinaryVectors, which compares the lines
 * with the file (ClickHouse's own bytes). Built natively with sluice.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int sluice_module_init(sluice_config *cfg) {
	(void)cfg;
	return 0;
}
int sluice_module_record(const sluice_record *rec, sluice_out *o) {
	(void)rec;
	(void)o;
	return 0;
}

static sluice_out out;

static void emit(const char *type, const char *literal) {
	if (out.failed) {
		fprintf(stderr, "%s %s: the record failed\n", type, literal);
		exit(1);
	}
	printf("%s\t%s\t", type, literal);
	for (size_t i = 0; i < out.len; i++)
		printf("%02x", out.buf[i]);
	printf("\n");
	out.len = 0;
}

/* V writes one vector: the statements between the type and literal and the
 * emit. */
#define V(type, literal, ...) \
	do {                      \
		__VA_ARGS__;          \
		emit(type, literal);  \
	} while (0)

/* VS writes one vector with the sluice_put_* statements put, then again
 * with the statements at, which move the cursor p of one span of bound
 * bytes, and checks that both wrote the same bytes before it emits them. */
#define VS(type, literal, bound, put, at)                                          \
	do {                                                                           \
		put;                                                                       \
		uint8_t want[256];                                                         \
		size_t n = out.len;                                                        \
		memcpy(want, out.buf, n);                                                  \
		out.len = 0;                                                               \
		uint8_t *p = sluice_span_begin(&out, bound);                               \
		at;                                                                        \
		sluice_span_end(&out, p);                                                  \
		if (out.len != n || memcmp(out.buf, want, n) != 0) {                       \
			fprintf(stderr, "%s %s: the span wrote other bytes\n", type, literal); \
			exit(1);                                                               \
		}                                                                          \
		emit(type, literal);                                                       \
	} while (0)

/* 2026-11-29 10:11:12 UTC, in seconds. */
#define T2026 1795947072LL

int main(void) {
	sluice_out *o = &out;
	VS("UInt64", "18446744073709551615", 8, sluice_put_u64(o, UINT64_MAX), p = sluice_at_u64(p, UINT64_MAX));
	VS("Int32", "-2", 4, sluice_put_i32(o, -2), p = sluice_at_i32(p, -2));
	VS("String", "'héllo'", SLUICE_STRING_MAX(6), sluice_put_cstr(o, "héllo"), p = sluice_at_string(p, "héllo", 6));
	VS("Float32", "-1.5", 4, sluice_put_f32(o, -1.5f), p = sluice_at_f32(p, -1.5f));
	VS("Bool", "true", 1, sluice_put_bool(o, 1), p = sluice_at_bool(p, 1));
	V("UUID", "'61f0c404-5cb3-11e7-907b-a6006ad3dba0'", sluice_put_uuid(o, 0x61f0c4045cb311e7ULL, 0x907ba6006ad3dba0ULL));
	V("IPv4", "'1.2.3.4'", sluice_put_ipv4(o, 1, 2, 3, 4));
	{
		const uint8_t doc[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, mapped[16] = {[10] = 0xff, 0xff, 1, 2, 3, 4};
		V("IPv6", "'2001:db8::1'", sluice_put_ipv6(o, doc));
		V("IPv6", "'::ffff:1.2.3.4'", sluice_put_ipv6(o, mapped));
	}
	VS("Enum8('a' = 1, 'b' = -2)", "'b'", 1, sluice_put_enum8(o, -2), p = sluice_at_enum8(p, -2));
	VS("Enum16('x' = 1000, 'y' = -300)", "'y'", 2, sluice_put_enum16(o, -300), p = sluice_at_enum16(p, -300));
	VS("Nullable(Int64)", "-3", 9, sluice_put_not_null(o); sluice_put_i64(o, -3), p = sluice_at_not_null(p); p = sluice_at_i64(p, -3));
	VS("Nullable(String)", "NULL", 1, sluice_put_null(o), p = sluice_at_null(p));
	VS("LowCardinality(Nullable(String))", "'x'", 1 + SLUICE_STRING_MAX(1), sluice_put_not_null(o); sluice_put_cstr(o, "x"),
	   p = sluice_at_not_null(p); p = sluice_at_string(p, "x", 1));
	VS("Array(UInt8)", "[1, 2]", SLUICE_VARINT_MAX + 2, sluice_put_array(o, 2); sluice_put_u8(o, 1); sluice_put_u8(o, 2),
	   p = sluice_at_array(p, 2); p = sluice_at_u8(p, 1); p = sluice_at_u8(p, 2));
	VS("LowCardinality(FixedString(2))", "'ab'", 2, sluice_put_fixed(o, "ab", 2), p = sluice_at_fixed(p, "ab", 2));
	V("DateTime", "'2026-11-29 10:11:12'", sluice_put_time_datetime(o, T2026));
	VS("DateTime('UTC')", "'2026-11-29 10:11:12'", 4, sluice_put_datetime(o, (uint32_t)T2026), p = sluice_at_datetime(p, (uint32_t)T2026));
	V("DateTime('Europe/Berlin')", "1780308000", sluice_put_time_datetime(o, 1780308000));
	V("DateTime64(3)", "'2026-11-29 10:11:12.345'", sluice_put_time_datetime64(o, T2026, 345000000, 3));
	V("DateTime64(3)", "'1900-01-01 00:00:00.001'", sluice_put_time_datetime64(o, -2208988800LL, 1000000, 3));
	VS("DateTime64(6, 'UTC')", "'2026-11-29 10:11:12.345678'", 8, sluice_put_datetime64(o, T2026 * 1000000 + 345678),
	   p = sluice_at_datetime64(p, T2026 * 1000000 + 345678));
	/* 2262-04-11 08:47:16.854775807 in Tokyo (UTC+9) is 2262-04-10 23:47:16 UTC:
	 * a day before the last DateTime64(9), INT64_MAX nanoseconds. */
	V("DateTime64(9, 'Asia/Tokyo')", "'2262-04-11 08:47:16.854775807'",
	  sluice_put_time_datetime64(o, 9223372036LL - 86400, 854775807, 9));
	/* 2299-12-31 23:59:59 in Berlin (UTC+1 in winter). */
	V("DateTime64(0, 'Europe/Berlin')", "'2299-12-31 23:59:59'", sluice_put_time_datetime64(o, 10413791999LL - 3600, 0, 0));
	V("Date", "'2100-01-01'", sluice_put_time_date(o, 4102444800LL + 13 * 3600));
	V("Date32", "'1900-01-01'", sluice_put_time_date32(o, -2208988800LL + 86399));
	VS("Date32", "'2299-12-31'", 4, sluice_put_date32(o, 120529), p = sluice_at_date32(p, 120529));
	VS("Decimal32(2)", "'-12.34'", 4, sluice_put_decimal32(o, -1234), p = sluice_at_decimal32(p, -1234));
	VS("Decimal64(4)", "'99999.0001'", 8, sluice_put_decimal64(o, 999990001), p = sluice_at_decimal64(p, 999990001));
	V("Decimal(18, 4)", "'-0.0001'", sluice_put_decimal64(o, -1));
	V("Decimal128(10)", "'-1.0000000001'", sluice_put_int128(o, (uint64_t)-10000000001LL, -1));
	{
		/* 1234567890123456789012345678901234567890 in 64-bit limbs. */
		const uint64_t d[4] = {0xacbc5f96ce3f0ad2ULL, 0xa0c92075c0dbf3b8ULL, 3, 0};
		V("Decimal256(20)", "'12345678901234567890.12345678901234567890'", sluice_put_int256(o, d));
	}
	V("Int128", "'-170141183460469231731687303715884105728'", sluice_put_int128(o, 0, INT64_MIN));
	V("Int128", "'-1'", sluice_put_int128(o, UINT64_MAX, -1));
	V("UInt128", "'340282366920938463463374607431768211455'", sluice_put_uint128(o, UINT64_MAX, UINT64_MAX));
	{
		const uint64_t min[4] = {0, 0, 0, 1ULL << 63}, one[4] = {1, 0, 0, 0},
			       max[4] = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
		V("Int256", "'-57896044618658097711785492504343953926634992332820282019728792003956564819968'", sluice_put_int256(o, min));
		V("Int256", "'1'", sluice_put_int256(o, one));
		V("UInt256", "'115792089237316195423570985008687907853269984665640564039457584007913129639935'", sluice_put_int256(o, max));
	}
	VS("Map(String, UInt64)", "map('a', 1, 'b', 2)", SLUICE_VARINT_MAX + 2 * (SLUICE_STRING_MAX(1) + 8),
	   sluice_put_map(o, 2); sluice_put_cstr(o, "a"); sluice_put_u64(o, 1); sluice_put_cstr(o, "b"); sluice_put_u64(o, 2),
	   p = sluice_at_map(p, 2); p = sluice_at_string(p, "a", 1); p = sluice_at_u64(p, 1); p = sluice_at_string(p, "b", 1);
	   p = sluice_at_u64(p, 2));
	V("Map(String, String)", "map()", sluice_put_map(o, 0));
	V("Map(LowCardinality(String), Array(Nullable(Int32)))", "map('x', [1, NULL])",
	  sluice_put_map(o, 1); sluice_put_cstr(o, "x"); sluice_put_array(o, 2); sluice_put_not_null(o); sluice_put_i32(o, 1);
	  sluice_put_null(o));
	V("Tuple(UInt8, String)", "(1, 'x')", sluice_put_u8(o, 1); sluice_put_cstr(o, "x"));
	V("Tuple(a Int64, b Nullable(String), c Array(UInt8))", "(-1, NULL, [1, 2])",
	  sluice_put_i64(o, -1); sluice_put_null(o); sluice_put_array(o, 2); sluice_put_u8(o, 1); sluice_put_u8(o, 2));
	V("Array(LowCardinality(Nullable(String)))", "['a', NULL, '']",
	  sluice_put_array(o, 3); sluice_put_not_null(o); sluice_put_cstr(o, "a"); sluice_put_null(o); sluice_put_not_null(o);
	  sluice_put_cstr(o, ""));
	V("Array(Array(Nullable(UInt8)))", "[[1, NULL], []]",
	  sluice_put_array(o, 2); sluice_put_array(o, 2); sluice_put_not_null(o); sluice_put_u8(o, 1); sluice_put_null(o);
	  sluice_put_array(o, 0));
	V("Array(Nullable(DateTime64(3)))", "['2026-01-01 00:00:00.001', NULL]",
	  sluice_put_array(o, 2); sluice_put_not_null(o); sluice_put_time_datetime64(o, 1767225600LL, 1000000, 3);
	  sluice_put_null(o));
	V("Array(Tuple(String, Float64))", "[('a', 1.5)]", sluice_put_array(o, 1); sluice_put_cstr(o, "a"); sluice_put_f64(o, 1.5));
	V("JSON", "'{\"a\":1,\"b\":\"x\"}'", sluice_put_cstr(o, "{\"a\":1,\"b\":\"x\"}"));

	/* Out of range: nothing written, the record failed. */
	static const struct {
		const char *what;
		int (*put)(sluice_out *, int64_t);
		int64_t secs;
	} bad[] = {
		{"DateTime before 1970", sluice_put_time_datetime, -1},
		{"DateTime after 2106", sluice_put_time_datetime, 4294967296LL},
		{"DateTime of year 1 (a zero time)", sluice_put_time_datetime, -62135596800LL},
		{"Date after 2149-06-06", sluice_put_time_date, 65536LL * 86400},
		{"Date32 before 1900", sluice_put_time_date32, -2208988801LL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		sluice_out f = {0};
		if (bad[i].put(&f, bad[i].secs) != -1 || !f.failed || f.err_start != 0) {
			fprintf(stderr, "%s: written\n", bad[i].what);
			return 1;
		}
		printf("refused\t%s\t%.*s\n", bad[i].what, (int)f.err_len, (const char *)f.buf + f.err_start);
	}
	sluice_out f = {0};
	if (sluice_put_time_datetime64(&f, 9223372037LL, 0, 9) != -1 || f.err_start != 0) {
		fprintf(stderr, "DateTime64(9) after 2262: written\n");
		return 1;
	}
	printf("refused\tDateTime64(9) after 2262-04-11\t%.*s\n", (int)f.err_len, (const char *)f.buf + f.err_start);
	return 0;
}
