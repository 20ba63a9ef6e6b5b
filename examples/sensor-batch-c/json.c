/*
 * json.c: the JSON form of a SensorBatch, the bytes ClickHouse's own Kafka
 * engine reads in the benchmark's side by side: one object per record with
 * the events as an object of six parallel arrays,
 *
 *   {"batch_id":1,"sensor":"sensor-1","region":"region-1","batch_ts_ms":…,
 *    "send_ts_us":…,"events":{"seq":[…],"name":[…],"unit":[…],"value":[…],
 *    "quality":[null,0.37,…],"tags":[[],["tag-1"],…]}}
 *
 * It follows examples/sensor-batch-json/jsonbatch (Go) rule for rule: keys
 * in any order, unknown keys skipped, a missing region is null, escapes
 * decoded, the arrays of the same length, and every malformed record fails
 * at the same byte with the same words. As there, the whole record is
 * validated before its first event: a syntax error anywhere comes before
 * an element of the wrong type. The pass that validates the events arrays
 * also decodes their elements; Next reads again, by the Go decoder's
 * rules, only those it could not take (the wrong type or range, which
 * then fail as they do there, and strings with escapes). Strings without
 * escapes alias the record; escaped ones are decoded into buffers that,
 * once grown to a record's size, are never moved while the record is
 * decoded (a decoded string is never longer than its JSON).
 */
#include <stdlib.h>
#include <string.h>
#include "sensor.h"

enum { A_SEQ, A_NAME, A_UNIT, A_VALUE, A_QUALITY, A_TAGS, N_ARRAYS };

static const char *const array_names[N_ARRAYS] = {"seq", "name", "unit", "value", "quality", "tags"};
static const char *const array_paths[N_ARRAYS] = {"events.seq", "events.name", "events.unit",
                                                  "events.value", "events.quality", "events.tags"};

/* MAX_DEPTH bounds the nesting of values the decoder skips. */
#define MAX_DEPTH 64

#define NOT_A_NUMBER ((size_t)-1)

/* buf holds decoded escaped strings. */
typedef struct {
	uint8_t *p;
	size_t n, cap;
} buf;

/* what names a value in an error: s, then the bytes k (a key). */
typedef struct {
	const char *s;
	const uint8_t *k;
	size_t kn;
} what;

/* elem is an element of an events array, as the validating pass found it:
 * its offset, and its value when ok. An element that is not ok is decoded
 * again by Next at its offset, by the rules that would fail it (a value of
 * the wrong type or range) or that decode its escapes. */
typedef struct {
	uint32_t off;
	uint8_t ok, null; /* null: quality is null */
	union {
		int64_t i;    /* seq, value */
		double f;     /* quality */
		span s;       /* name, unit */
		struct {      /* tags: d.tags.p[first : first+n] */
			uint32_t first, n;
		} t;
	} v;
} elem;

static struct {
	const uint8_t *p;
	size_t len;
	int failed;
	/* The events arrays' elements, decoded by the pass that validates
	 * them, and the tags of the tags arrays' elements. */
	struct {
		elem *p;
		size_t n, cap;
	} el[N_ARRAYS];
	struct {
		span *p;
		size_t n, cap;
	} tags;
	size_t event; /* the events Next has decoded */
	buf hdr, ev, key, skipping; /* skipping: the key whose value is skipped */
} d;

/* ---- errors -------------------------------------------------------------- */

static void begin(void) {
	msg_reset();
	msg_str("json: ");
}

static void at(size_t off) {
	msg_str(" at byte ");
	msg_int((int64_t)off);
	d.failed = 1;
}

/* fail records the first error: "json: <what><suffix> at byte <off>". */
static void fail(size_t off, const char *what, const char *suffix) {
	if (d.failed)
		return;
	begin();
	msg_str(what);
	msg_str(suffix);
	at(off);
}

/* failw is fail for a value that w names. */
static void failw(size_t off, const what *w, const char *suffix) {
	if (d.failed)
		return;
	begin();
	msg_str(w->s);
	msg_bytes(w->k, w->kn);
	msg_str(suffix);
	at(off);
}

/* fail_plain records an error without an offset: "json: <a><b><c>". */
static void fail_plain(const char *a, const char *b, const char *c) {
	if (d.failed)
		return;
	begin();
	msg_str(a);
	msg_str(b);
	msg_str(c);
	d.failed = 1;
}

/* quote_byte appends the byte c as Go's strconv.QuoteRune(rune(c)) spells
 * it: a Latin-1 code point, in UTF-8 when printable. */
static void quote_byte(uint8_t c) {
	static const char hex[] = "0123456789abcdef";
	char q[12];
	size_t n = 0;
	q[n++] = '\'';
	if (c == '\'' || c == '\\') {
		q[n++] = '\\';
		q[n++] = (char)c;
	} else if (c >= 0x20 && c < 0x7f) {
		q[n++] = (char)c;
	} else if (c >= 0xa1 && c != 0xad) {
		q[n++] = (char)(0xc0 | c >> 6);
		q[n++] = (char)(0x80 | (c & 0x3f));
	} else {
		static const char esc[] = "abtnvfr"; /* \a (7) to \r (13) */
		q[n++] = '\\';
		if (c >= 7 && c <= 13) {
			q[n++] = esc[c - 7];
		} else if (c < 0x80) {
			q[n++] = 'x';
			q[n++] = hex[c >> 4];
			q[n++] = hex[c & 15];
		} else {
			q[n++] = 'u';
			q[n++] = '0';
			q[n++] = '0';
			q[n++] = hex[c >> 4];
			q[n++] = hex[c & 15];
		}
	}
	q[n++] = '\'';
	msg_bytes((const uint8_t *)q, n);
}

/* ---- scanning ------------------------------------------------------------ */

static inline size_t ws(size_t i) {
	const uint8_t *p = d.p;
	while (i < d.len && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
		i++;
	return i;
}

static inline int lit(size_t i, const char *s, size_t n) {
	return d.len - i >= n && memcmp(d.p + i, s, n) == 0;
}

/* ---- eight bytes at a time ---------------------------------------------
 * A loop iteration costs more in wasm than the work of a byte (sluice's
 * deadline instrumentation counts every one), so the scans of strings and
 * digits test eight bytes per iteration: each function below sets the high
 * bit of the bytes of a little-endian word that stop the scan. Borrows and
 * carries can only mark bytes after a stopping one, so the lowest mark is
 * always the first stop. */

#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "json.c's word scans assume a little-endian target (wasm32 is)"
#endif

static inline uint64_t load8(const uint8_t *p) {
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* zero_bytes marks the zero bytes of v. */
static inline uint64_t zero_bytes(uint64_t v) { return (v - ONES) & ~v & HIGHS; }

/* string_stops marks '"', '\\' and the control characters. */
static inline uint64_t string_stops(uint64_t v) {
	return zero_bytes(v ^ (ONES * '"')) | zero_bytes(v ^ (ONES * '\\')) | ((v - ONES * 0x20) & ~v & HIGHS);
}

/* non_digits marks the bytes that are not '0' to '9'. */
static inline uint64_t non_digits(uint64_t v) {
	uint64_t x = ((v & (ONES * 0xf0)) ^ (ONES * 0x30)) | (((v + ONES * 0x06) & (ONES * 0xf0)) ^ (ONES * 0x30));
	return (((x & ~HIGHS) + ~HIGHS) | x) & HIGHS;
}

static inline int is_string_stop(uint8_t c) { return c == '"' || c == '\\' || c < 0x20; }

/* string_run returns the offset of the first '"', '\\' or control
 * character at or after i, or len; or i when i is past len (skip_string
 * asks for the byte after a '\\' that ends the record). */
static inline size_t string_run(size_t i) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	for (; i + 8 <= len; i += 8) {
		uint64_t m = string_stops(load8(p + i));
		if (m)
			return i + ((size_t)__builtin_ctzll(m) >> 3);
	}
	while (i < len && !is_string_stop(p[i]))
		i++;
	return i;
}

/* digit_run returns the offset of the first byte at or after i that is
 * not a digit, or len. */
static inline size_t digit_run(size_t i) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	for (; i + 8 <= len; i += 8) {
		uint64_t m = non_digits(load8(p + i));
		if (m)
			return i + ((size_t)__builtin_ctzll(m) >> 3);
	}
	while (i < len && p[i] >= '0' && p[i] <= '9')
		i++;
	return i;
}

/* int_at reads a JSON number that is an integer in the range of an int64. */
static size_t int_at(size_t i, const char *w, int64_t *v) {
	const uint8_t *p = d.p;
	size_t len = d.len, start = i, digits;
	int neg = i < len && p[i] == '-';
	uint64_t u = 0;
	*v = 0;
	if (neg)
		i++;
	for (digits = i; i < len && p[i] >= '0' && p[i] <= '9'; i++) {
		if (u > (UINT64_MAX - 9) / 10) {
			fail(start, w, ": integer out of range");
			return len;
		}
		u = u * 10 + (uint64_t)(p[i] - '0');
	}
	if (i == digits)
		fail(start, w, ": not a number");
	else if (p[digits] == '0' && i - digits > 1)
		fail(start, w, ": leading zero");
	else if (i < len && (p[i] == '.' || p[i] == 'e' || p[i] == 'E'))
		fail(start, w, ": not an integer");
	else if ((!neg && u > (uint64_t)INT64_MAX) || (neg && u > (uint64_t)1 << 63))
		fail(start, w, ": integer out of range");
	else {
		*v = neg ? (int64_t)(0 - u) : (int64_t)u;
		return i;
	}
	return len;
}

/* number scans the JSON number at i: the offset after it, or NOT_A_NUMBER
 * when it is not valid number syntax. */
static size_t number(size_t i) {
	const uint8_t *p = d.p;
	size_t len = d.len, digits, f;
	if (i < len && p[i] == '-')
		i++;
	i = digit_run(digits = i);
	if (i == digits || (p[digits] == '0' && i - digits > 1))
		return NOT_A_NUMBER;
	if (i < len && p[i] == '.') {
		i = digit_run(f = i + 1);
		if (i == f)
			return NOT_A_NUMBER;
	}
	if (i < len && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < len && (p[i] == '+' || p[i] == '-'))
			i++;
		i = digit_run(f = i);
		if (i == f)
			return NOT_A_NUMBER;
	}
	return i;
}

/* The powers of ten a double holds exactly. */
static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* float_value converts the JSON number at [i, end): 0, or 1 when it is
 * out of the range of a double, 2 when out of memory. */
static int float_value(size_t i, size_t end, double *f) {
	const uint8_t *p = d.p;
	size_t start = i;
	*f = 0;
	/* Clinger's fast path: at most 15 significant digits and no exponent
	 * make the mantissa and the power of ten exact, and one division is
	 * correctly rounded, as strtod is. */
	int neg = p[i] == '-';
	if (neg)
		i++;
	uint64_t m = 0;
	int digits = 0, frac = 0, dot = 0;
	for (; i < end; i++) {
		uint8_t c = p[i];
		if (c == '.') {
			dot = 1;
			continue;
		}
		if (c < '0' || c > '9')
			digits = 99; /* an exponent: the slow path */
		m = m * 10 + (uint64_t)(c - '0');
		digits++;
		if (dot)
			frac++;
	}
	if (digits <= 15) {
		double v = (double)m / pow10[frac];
		*f = neg ? -v : v;
		return 0;
	}
	/* strtod needs a terminated string; JSON numbers of more than 64 bytes
	 * are copied to the heap. */
	char small[65], *s = small;
	size_t n = end - start;
	if (n >= sizeof small && !(s = malloc(n + 1)))
		return 2;
	memcpy(s, p + start, n);
	s[n] = 0;
	double v = strtod(s, 0);
	if (s != small)
		free(s);
	if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308)
		return 1;
	*f = v;
	return 0;
}

/* float_at reads a JSON number. */
static size_t float_at(size_t i, const char *w, double *f) {
	size_t end = number(i);
	*f = 0;
	if (end == NOT_A_NUMBER) {
		fail(i, w, ": not a number");
		return d.len;
	}
	switch (float_value(i, end, f)) {
	case 0:
		return end;
	case 1:
		fail(i, w, ": number out of range");
		return d.len;
	default:
		fail(i, w, ": out of memory");
		return d.len;
	}
}

/* digits8 is the number that the digits in the bytes of x that mask keeps
 * spell, the first digit in the lowest kept byte: mask keeps the top n
 * bytes (1 to 8), so that the bytes below are leading zeros. Pairs, then
 * fours, then the eight, each step one multiply-add per lane. */
static inline uint64_t digits8(uint64_t x, uint64_t mask) {
	x = (x & mask) - (ONES * '0' & mask);
	x = x * 10 + (x >> 8);
	return ((x & UINT64_C(0x000000ff000000ff)) * (100 + (UINT64_C(1000000) << 32)) +
	        ((x >> 16) & UINT64_C(0x000000ff000000ff)) * (1 + (UINT64_C(10000) << 32))) >>
	       32;
}

/* top_bytes keeps the top n (1 to 8) bytes of a word. */
static inline uint64_t top_bytes(size_t n) { return ~UINT64_C(0) << (8 * (8 - n)); }

/* int_value converts the JSON number at [i, end) if int_at would take it:
 * 1 and *v, else 0. Up to 16 digits that end 8 or 16 bytes into the
 * record are read a word at a time, from the words that end where they
 * do; non_digits may mark a digit after a byte of 0xfa or more, which a
 * record's JSON does not hold before a number, and that only sends the
 * value to the loop. */
static int int_value(size_t i, size_t end, int64_t *v) {
	const uint8_t *p = d.p;
	int neg = p[i] == '-';
	uint64_t u = 0;
	if (neg)
		i++;
	size_t n = end - i;
	if (n >= 1 && n <= 8 && end >= 8) {
		uint64_t w = load8(p + end - 8), m = top_bytes(n);
		if ((non_digits(w) & m) == 0) {
			u = digits8(w, m);
			*v = neg ? (int64_t)(0 - u) : (int64_t)u;
			return 1;
		}
	} else if (n > 8 && n <= 16 && end >= 16) {
		uint64_t lo = load8(p + end - 8), hi = load8(p + end - 16), m = top_bytes(n - 8);
		if ((non_digits(lo) | (non_digits(hi) & m)) == 0) {
			u = digits8(hi, m) * 100000000 + digits8(lo, ~UINT64_C(0));
			*v = neg ? (int64_t)(0 - u) : (int64_t)u;
			return 1;
		}
	}
	for (; i < end; i++) {
		if (p[i] < '0' || p[i] > '9' || u > (UINT64_MAX - 9) / 10)
			return 0;
		u = u * 10 + (uint64_t)(p[i] - '0');
	}
	if ((!neg && u > (uint64_t)INT64_MAX) || (neg && u > (uint64_t)1 << 63))
		return 0;
	*v = neg ? (int64_t)(0 - u) : (int64_t)u;
	return 1;
}

static int hex4(size_t i, uint32_t *r) {
	if (i > d.len || d.len - i < 4)
		return 0;
	uint32_t v = 0;
	for (size_t j = i; j < i + 4; j++) {
		uint8_t c = d.p[j];
		if (c >= '0' && c <= '9')
			c -= '0';
		else if (c >= 'a' && c <= 'f')
			c -= 'a' - 10;
		else if (c >= 'A' && c <= 'F')
			c -= 'A' - 10;
		else
			return 0;
		v = v << 4 | c;
	}
	*r = v;
	return 1;
}

/* reserve makes b hold a record's worth of decoded strings, so that it is
 * never moved while the record is decoded. */
static int reserve(buf *b) {
	if (b->cap >= d.len)
		return 0;
	uint8_t *p = realloc(b->p, d.len);
	if (!p)
		return -1;
	b->p = p;
	b->cap = d.len;
	return 0;
}

static inline void put(buf *b, uint8_t c) {
	if (b->n < b->cap)
		b->p[b->n++] = c;
}

static void put_rune(buf *b, uint32_t r) {
	if (r < 0x80) {
		put(b, (uint8_t)r);
	} else if (r < 0x800) {
		put(b, (uint8_t)(0xc0 | r >> 6));
		put(b, (uint8_t)(0x80 | (r & 0x3f)));
	} else if (r < 0x10000) {
		put(b, (uint8_t)(0xe0 | r >> 12));
		put(b, (uint8_t)(0x80 | (r >> 6 & 0x3f)));
		put(b, (uint8_t)(0x80 | (r & 0x3f)));
	} else {
		put(b, (uint8_t)(0xf0 | r >> 18));
		put(b, (uint8_t)(0x80 | (r >> 12 & 0x3f)));
		put(b, (uint8_t)(0x80 | (r >> 6 & 0x3f)));
		put(b, (uint8_t)(0x80 | (r & 0x3f)));
	}
}

/* unescape decodes the string that starts at start, whose first escape is
 * at i, onto b. */
static size_t unescape(size_t start, size_t i, buf *b, const char *w, span *out) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	if (reserve(b) != 0) {
		fail(start - 1, w, ": out of memory");
		return len;
	}
	size_t from = b->n;
	if (b->cap - b->n < i - start) { /* cannot be: see reserve */
		fail(start - 1, w, ": out of memory");
		return len;
	}
	memcpy(b->p + b->n, p + start, i - start);
	b->n += i - start;
	while (i < len) {
		uint8_t c = p[i];
		if (c == '"') {
			out->p = b->p + from;
			out->n = b->n - from;
			return i + 1;
		}
		if (c < 0x20) {
			fail(i, w, ": control character in a string");
			return len;
		}
		if (c != '\\') {
			put(b, c);
			i++;
			continue;
		}
		if (i + 1 >= len)
			break;
		switch (p[i + 1]) {
		case '"':
		case '\\':
		case '/':
			put(b, p[i + 1]);
			break;
		case 'b':
			put(b, '\b');
			break;
		case 'f':
			put(b, '\f');
			break;
		case 'n':
			put(b, '\n');
			break;
		case 'r':
			put(b, '\r');
			break;
		case 't':
			put(b, '\t');
			break;
		case 'u': {
			uint32_t r, lo;
			if (!hex4(i + 2, &r)) {
				fail(i, w, ": bad \\u escape");
				return len;
			}
			i += 6;
			if (r >= 0xd800 && r < 0xdc00) { /* a high surrogate: a low one should follow */
				if (hex4(i + 2, &lo) && p[i] == '\\' && p[i + 1] == 'u' && lo >= 0xdc00 && lo < 0xe000) {
					r = 0x10000 + ((r - 0xd800) << 10) + (lo - 0xdc00);
					i += 6;
				} else {
					r = 0xfffd;
				}
			} else if (r >= 0xdc00 && r < 0xe000) {
				r = 0xfffd;
			}
			put_rune(b, r);
			continue;
		}
		default:
			fail(i, w, ": bad escape");
			return len;
		}
		i += 2;
	}
	fail(start - 1, w, ": unterminated string");
	return len;
}

/* str reads a JSON string into out: the record's bytes, or without escapes
 * decoded onto b. */
static inline size_t str(size_t i, buf *b, const char *w, span *out) {
	const uint8_t *p = d.p;
	size_t len = d.len, start;
	out->p = 0;
	out->n = 0;
	if (i >= len || p[i] != '"') {
		fail(i, w, ": not a string");
		return len;
	}
	start = i + 1;
	i = string_run(start);
	if (i < len && p[i] == '"') {
		out->p = p + start;
		out->n = i - start;
		return i + 1;
	}
	if (i < len && p[i] == '\\')
		return unescape(start, i, b, w, out);
	if (i < len)
		fail(i, w, ": control character in a string");
	else
		fail(start - 1, w, ": unterminated string");
	return len;
}

/* member is called by members with a key and the offset of its value, and
 * returns the offset after the value. */
typedef size_t (*member_fn)(span key, size_t i, void *arg);

/* members reads the members of an object whose '{' precedes i and returns
 * the offset after the '}'. */
static size_t members(size_t i, member_fn member, void *arg) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	i = ws(i);
	if (i < len && p[i] == '}')
		return i + 1;
	while (!d.failed) {
		/* A nested members call (skipping a value) may reuse d.key: key
		 * is used only before the value is read. */
		span key;
		d.key.n = 0;
		i = str(i, &d.key, "a key", &key);
		i = ws(i);
		if (!d.failed && (i >= len || p[i] != ':'))
			fail(i, "", "expected ':' after a key");
		if (d.failed)
			break;
		i = member(key, ws(i + 1), arg);
		i = ws(i);
		if (d.failed)
			break;
		if (i < len && p[i] == ',')
			i = ws(i + 1);
		else if (i < len && p[i] == '}')
			return i + 1;
		else
			fail(i, "", "expected ',' or '}' in an object");
	}
	return len;
}

static size_t skip(size_t i, int depth, const what *w);

typedef struct {
	int depth;
	const what *w;
} skip_arg;

static size_t skip_member(span key, size_t i, void *arg) {
	(void)key;
	skip_arg *a = arg;
	return skip(i, a->depth, a->w);
}

static inline int escape_char(uint8_t c) {
	return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
}

/* skip_string skips the string whose '"' is at i. */
static inline size_t skip_string(size_t i, const what *w) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	uint32_t r;
	for (i = string_run(i + 1); i < len; i = string_run(i + 1)) {
		uint8_t c = p[i];
		if (c == '"')
			return i + 1;
		if (c == '\\') {
			if (i + 1 < len && p[i + 1] == 'u') {
				if (!hex4(i + 2, &r)) {
					failw(i, w, ": bad \\u escape");
					return len;
				}
				i += 5;
			} else if (i + 1 < len && !escape_char(p[i + 1])) {
				failw(i, w, ": bad escape");
				return len;
			} else {
				i++;
			}
		} else {
			failw(i, w, ": control character in a string");
			return len;
		}
	}
	failw(i, w, ": unterminated string");
	return len;
}

/* skip_number skips the number at i. */
static inline size_t skip_number(size_t i, const what *w) {
	size_t end = number(i);
	if (end == NOT_A_NUMBER) {
		failw(i, w, ": not a number");
		return d.len;
	}
	return end;
}

/* skip skips the value at i and returns the offset after it. depth is the
 * value's nesting. */
static size_t skip(size_t i, int depth, const what *w) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	if (depth > MAX_DEPTH) {
		failw(i, w, ": nested too deeply");
		return len;
	}
	if (i >= len) {
		failw(i, w, ": unexpected end of the message");
		return len;
	}
	uint8_t c = p[i];
	switch (c) {
	case '"':
		return skip_string(i, w);
	case '{': {
		skip_arg a = {depth + 1, w};
		return members(i + 1, skip_member, &a);
	}
	case '[':
		i = ws(i + 1);
		if (i < len && p[i] == ']')
			return i + 1;
		while (!d.failed) {
			/* Strings and numbers in place: the events arrays are
			 * mostly that. */
			if (depth < MAX_DEPTH && i < len && p[i] == '"')
				i = skip_string(i, w);
			else if (depth < MAX_DEPTH && i < len && (p[i] == '-' || (p[i] >= '0' && p[i] <= '9')))
				i = skip_number(i, w);
			else
				i = skip(i, depth + 1, w);
			i = ws(i);
			if (d.failed)
				break;
			if (i < len && p[i] == ',')
				i = ws(i + 1);
			else if (i < len && p[i] == ']')
				return i + 1;
			else
				failw(i, w, ": expected ',' or ']' in an array");
		}
		return len;
	case 't':
	case 'n':
		if (lit(i, c == 't' ? "true" : "null", 4))
			return i + 4;
		break;
	case 'f':
		if (lit(i, "false", 5))
			return i + 5;
		break;
	default:
		if (c == '-' || (c >= '0' && c <= '9'))
			return skip_number(i, w);
	}
	if (!d.failed) {
		begin();
		msg_str(w->s);
		msg_bytes(w->k, w->kn);
		msg_str(": unexpected character ");
		quote_byte(c);
		at(i);
	}
	return len;
}

/* skip_named skips a value that errors name by prefix and key; the key is
 * copied, as nested objects reuse the key buffer. */
static size_t skip_named(size_t i, const char *prefix, span key) {
	d.skipping.n = 0;
	what w = {prefix, 0, 0};
	if (key.n > 0) {
		if (reserve(&d.skipping) != 0) {
			fail(i, prefix, ": out of memory");
			return d.len;
		}
		memcpy(d.skipping.p, key.p, key.n);
		w.k = d.skipping.p;
		w.kn = key.n;
	}
	return skip(i, 0, &w);
}

/* grow makes room for one more item in the array at *p of *n items of
 * size bytes, *cap allocated; nonzero when out of memory. */
static int grow(void **p, size_t n, size_t *cap, size_t size) {
	if (n < *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 128;
	void *q = realloc(*p, c * size);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

/* tags_scan validates and decodes the tags array whose '[' is at i when it
 * holds only strings without escapes or control characters, the arrays
 * the corpus has, onto d.tags: the offset after its ']', or NOT_A_NUMBER,
 * with d.tags as it was, for any other array, valid or not, which skip
 * then reads with its rules and errors. An array it takes is one skip
 * takes, ending at the same offset. */
static size_t tags_scan(size_t i, elem *e) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	uint32_t first = (uint32_t)d.tags.n;
	e->v.t.first = first;
	e->v.t.n = 0;
	i = ws(i + 1);
	if (i < len && p[i] == ']')
		return i + 1;
	for (;;) {
		if (i >= len || p[i] != '"')
			break;
		size_t end = string_run(i + 1);
		if (end >= len || p[end] != '"')
			break;
		if (grow((void **)&d.tags.p, d.tags.n, &d.tags.cap, sizeof *d.tags.p) != 0)
			break;
		d.tags.p[d.tags.n].p = p + i + 1;
		d.tags.p[d.tags.n].n = end - i - 1;
		d.tags.n++;
		e->v.t.n++;
		i = ws(end + 1);
		if (i < len && p[i] == ']')
			return i + 1;
		if (i >= len || p[i] != ',')
			break;
		i = ws(i + 1);
	}
	d.tags.n = first;
	e->v.t.n = 0;
	return NOT_A_NUMBER;
}

/* scan_array validates events array k at i, as skip would, with the same
 * errors, and decodes its elements into d.el[k]. */
static size_t scan_array(size_t i, int k) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	what w = {array_paths[k], 0, 0};
	d.el[k].n = 0;
	if (len > UINT32_MAX) {
		fail(i, array_paths[k], ": the record is too long");
		return len;
	}
	i = ws(i + 1);
	if (i < len && p[i] == ']')
		return i + 1;
	while (!d.failed) {
		if (grow((void **)&d.el[k].p, d.el[k].n, &d.el[k].cap, sizeof *d.el[k].p) != 0) {
			fail(i, array_paths[k], ": out of memory");
			break;
		}
		elem *e = &d.el[k].p[d.el[k].n++];
		e->off = (uint32_t)i;
		e->ok = e->null = 0;
		size_t end;
		uint8_t c = i < len ? p[i] : 0;
		if (c == '"') {
			end = string_run(i + 1);
			if (end < len && p[end] == '"') {
				if (k == A_NAME || k == A_UNIT) {
					e->v.s.p = p + i + 1;
					e->v.s.n = end - i - 1;
					e->ok = 1;
				}
				end++;
			} else {
				end = skip_string(i, &w);
			}
		} else if (i < len && (c == '-' || (c >= '0' && c <= '9'))) {
			end = skip_number(i, &w);
			if (!d.failed && (k == A_SEQ || k == A_VALUE))
				e->ok = (uint8_t)int_value(i, end, &e->v.i);
			else if (!d.failed && k == A_QUALITY)
				e->ok = float_value(i, end, &e->v.f) == 0;
		} else if (k == A_TAGS && c == '[' && (end = tags_scan(i, e)) != NOT_A_NUMBER) {
			e->ok = 1;
		} else if (k == A_QUALITY && c == 'n' && lit(i, "null", 4)) {
			end = i + 4;
			e->ok = e->null = 1;
		} else {
			/* Anything else is read by skip's rules, and taken again by
			 * Next (not ok). */
			end = skip(i, 1, &w);
		}
		i = ws(end);
		if (d.failed)
			break;
		if (i < len && p[i] == ',')
			i = ws(i + 1);
		else if (i < len && p[i] == ']')
			return i + 1;
		else
			failw(i, &w, ": expected ',' or ']' in an array");
	}
	return len;
}

/* ---- the batch ----------------------------------------------------------- */

static int span_is(span s, const char *lit) {
	size_t n = strlen(lit);
	return s.n == n && memcmp(s.p, lit, n) == 0;
}

typedef struct {
	int seen[N_ARRAYS];
} events_arg;

static size_t events_member(span key, size_t i, void *arg) {
	events_arg *a = arg;
	int k = -1;
	for (int j = 0; j < N_ARRAYS; j++)
		if (span_is(key, array_names[j]))
			k = j;
	if (k < 0)
		return skip_named(i, "events.", key);
	if (i >= d.len || d.p[i] != '[') {
		fail(i, array_paths[k], " is not an array");
		return d.len;
	}
	a->seen[k] = 1;
	return scan_array(i, k);
}

/* events reads the events object at i, noting where each array starts. */
static size_t events(size_t i) {
	if (i >= d.len || d.p[i] != '{') {
		fail(i, "", "events is not an object");
		return d.len;
	}
	events_arg a = {{0}};
	i = members(i + 1, events_member, &a);
	for (int k = 0; k < N_ARRAYS; k++)
		if (!a.seen[k])
			fail_plain("the batch has no ", array_paths[k], "");
	return i;
}

enum {
	F_BATCH_ID = 1,
	F_SENSOR = 2,
	F_BATCH_TS = 4,
	F_SEND_TS = 8,
	F_EVENTS = 16,
};

typedef struct {
	header *h;
	int seen;
} header_arg;

static size_t header_member(span key, size_t i, void *arg) {
	header_arg *a = arg;
	header *h = a->h;
	if (span_is(key, "batch_id")) {
		a->seen |= F_BATCH_ID;
		return int_at(i, "batch_id", &h->batch_id);
	}
	if (span_is(key, "sensor")) {
		a->seen |= F_SENSOR;
		return str(i, &d.hdr, "sensor", &h->sensor);
	}
	if (span_is(key, "region")) {
		if (lit(i, "null", 4)) {
			h->region.p = 0;
			h->region.n = 0;
			return i + 4;
		}
		return str(i, &d.hdr, "region", &h->region);
	}
	if (span_is(key, "batch_ts_ms")) {
		a->seen |= F_BATCH_TS;
		return int_at(i, "batch_ts_ms", &h->batch_ts_ms);
	}
	if (span_is(key, "send_ts_us")) {
		a->seen |= F_SEND_TS;
		return int_at(i, "send_ts_us", &h->send_ts_us);
	}
	if (span_is(key, "events")) {
		a->seen |= F_EVENTS;
		return events(i);
	}
	return skip_named(i, "", key);
}

static int json_reset(const uint8_t *p, size_t len, header *h) {
	d.p = p;
	d.len = len;
	d.failed = 0;
	d.hdr.n = 0;
	d.tags.n = 0;
	d.event = 0;
	for (int k = 0; k < N_ARRAYS; k++)
		d.el[k].n = 0;
	memset(h, 0, sizeof *h);
	size_t i = ws(0);
	if (i >= len || p[i] != '{') {
		fail(i, "", "value is not a JSON object");
		return -1;
	}
	header_arg a = {h, 0};
	i = members(i + 1, header_member, &a);
	if (!d.failed && ws(i) != len)
		fail(ws(i), "", "data after the object");
	static const struct {
		int bit;
		const char *name;
	} required[] = {{F_BATCH_ID, "batch_id"}, {F_SENSOR, "sensor"}, {F_BATCH_TS, "batch_ts_ms"},
	                {F_SEND_TS, "send_ts_us"}, {F_EVENTS, "events"}};
	for (size_t k = 0; k < sizeof required / sizeof required[0] && !d.failed; k++)
		if (!(a.seen & required[k].bit))
			fail_plain("the batch has no \"", required[k].name, "\"");
	return d.failed ? -1 : 0;
}

static size_t tags(size_t i, event *e) {
	const uint8_t *p = d.p;
	size_t len = d.len;
	if (i >= len || p[i] != '[') {
		fail(i, "", "events.tags: an element is not an array");
		return len;
	}
	i = ws(i + 1);
	if (i < len && p[i] == ']')
		return i + 1;
	while (!d.failed) {
		span t;
		i = str(i, &d.ev, "a tag", &t);
		if (add_tag(e, t.p, t.n) != 0) {
			fail(i, "a tag", ": out of memory");
			break;
		}
		i = ws(i);
		if (d.failed)
			break;
		if (i < len && p[i] == ',')
			i = ws(i + 1);
		else if (i < len && p[i] == ']')
			return i + 1;
		else
			fail(i, "", "expected ',' or ']' in a tags array");
	}
	return len;
}

/* json_next takes the next event from the decoded arrays; an element the
 * validating pass did not decode is read again at its offset, as the Go
 * decoder reads every element, in the same order: the first that fails is
 * the record's error. */
static int json_next(event *e) {
	if (d.failed)
		return 0;
	size_t k = d.event, n = 0;
	for (int a = 0; a < N_ARRAYS; a++)
		n += d.el[a].n == k;
	if (n == N_ARRAYS)
		return 0;
	if (n > 0) {
		fail_plain("the events arrays have different lengths", "", "");
		return 0;
	}
	d.event++;
	d.ev.n = 0;
	const elem *x = &d.el[A_SEQ].p[k];
	int64_t v = x->v.i;
	if (!x->ok)
		int_at(x->off, "events.seq", &v);
	else if (v < INT32_MIN || v > INT32_MAX)
		fail(int_at(x->off, "events.seq", &v), "events.seq", ": out of the range of an int");
	e->seq = (int32_t)v;
	x = &d.el[A_NAME].p[k];
	if (x->ok)
		e->name = x->v.s;
	else
		str(x->off, &d.ev, "events.name", &e->name);
	x = &d.el[A_UNIT].p[k];
	if (x->ok)
		e->unit = x->v.s;
	else
		str(x->off, &d.ev, "events.unit", &e->unit);
	x = &d.el[A_VALUE].p[k];
	if (x->ok)
		e->value = x->v.i;
	else
		int_at(x->off, "events.value", &e->value);
	x = &d.el[A_QUALITY].p[k];
	e->quality_null = x->ok && x->null;
	e->quality = 0;
	if (x->ok && !x->null)
		e->quality = x->v.f;
	else if (!x->ok)
		float_at(x->off, "events.quality", &e->quality);
	e->ntags = 0;
	x = &d.el[A_TAGS].p[k];
	if (!x->ok) {
		tags(x->off, e);
	} else {
		for (uint32_t t = 0; t < x->v.t.n; t++) {
			const span *s = &d.tags.p[x->v.t.first + t];
			if (add_tag(e, s->p, s->n) != 0) {
				fail(x->off, "a tag", ": out of memory");
				break;
			}
		}
	}
	return !d.failed;
}

static int json_failed(void) { return d.failed; }

const decoder_ops json_decoder = {json_reset, json_next, json_failed};
