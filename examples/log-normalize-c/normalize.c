/*
 * normalize.c: the C port of examples/log-normalize/normalize. The Go code
 * is the reference: same scanning rules, same results, same error messages.
 * No wasm-specific code here; module.c is the sluice glue.
 */
#include "normalize.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers ------------------------------------------------------------- */

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
	if (need <= *cap)
		return p;
	size_t c = *cap * 2;
	if (c < need)
		c = need;
	if (c < 64)
		c = 64;
	void *q = realloc(p, c * elem);
	if (!q)
		abort();
	*cap = c;
	return q;
}

void ln_free(ln_entry *e) {
	free(e->attrs);
	free(e->scratch);
	free(e->arena);
	free(e->tmpl);
	free(e->errbuf);
	memset(e, 0, sizeof *e);
}

/* ---- character classes --------------------------------------------------- */

enum { CL_WORD = 1, CL_HEX = 2, CL_DIGIT = 4 };

/* class[c]: CL_WORD for a letter, digit, '_' or a byte of a non-ASCII
 * character; CL_HEX for 0-9a-fA-F; CL_DIGIT for 0-9. */
static const uint8_t class[256] = {
#define D (CL_WORD | CL_HEX | CL_DIGIT)
#define H (CL_WORD | CL_HEX)
#define W CL_WORD
	/* 0x00 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 0x10 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 0x20 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 0x30 */ D, D, D, D, D, D, D, D, D, D, 0, 0, 0, 0, 0, 0,
	/* 0x40 */ 0, H, H, H, H, H, H, W, W, W, W, W, W, W, W, W,
	/* 0x50 */ W, W, W, W, W, W, W, W, W, W, W, 0, 0, 0, 0, W,
	/* 0x60 */ 0, H, H, H, H, H, H, W, W, W, W, W, W, W, W, W,
	/* 0x70 */ W, W, W, W, W, W, W, W, W, W, W, 0, 0, 0, 0, 0,
	/* 0x80 */ W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
	W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W,
#undef D
#undef H
#undef W
};

static inline int is_word(uint8_t c) { return class[c] & CL_WORD; }
static inline int is_hex(uint8_t c) { return class[c] & CL_HEX; }
static inline int is_digit(uint8_t c) { return class[c] & CL_DIGIT; }
static inline int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ---- error messages ------------------------------------------------------ */

static void err_reset(ln_entry *e) { e->err_len = 0; }

static void err_add(ln_entry *e, const void *p, size_t n) {
	e->errbuf = grow(e->errbuf, &e->errbuf_cap, e->err_len + n + 1, 1);
	memcpy(e->errbuf + e->err_len, p, n);
	e->err_len += n;
	e->errbuf[e->err_len] = 0;
	e->err = e->errbuf;
}

static void err_str(ln_entry *e, const char *s) { err_add(e, s, strlen(s)); }

static void err_int(ln_entry *e, int64_t v) {
	char d[24];
	int i = sizeof d;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	do {
		d[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		d[--i] = '-';
	err_add(e, d + i, sizeof d - (size_t)i);
}

static void fixed_error(ln_entry *e, const char *msg) {
	e->err = msg;
	e->err_len = strlen(msg);
}

/* is_print is Go's strconv.IsPrint for the code points it reports as not
 * printable that a log line may plausibly carry: the C0 and C1 controls,
 * spaces other than ' ', format characters, surrogates, private use and
 * noncharacters. (Unassigned code points, which Go also escapes, are kept.) */
static int is_print(uint32_t r) {
	if (r < 0x20 || (r >= 0x7f && r <= 0xa0) || r == 0xad)
		return 0;
	if (r < 0x300)
		return 1;
	switch (r) {
	case 0x061c: case 0x06dd: case 0x070f: case 0x1680: case 0x180e: case 0x202f:
	case 0x205f: case 0x3000: case 0xfeff:
		return 0;
	}
	if ((r >= 0x0600 && r <= 0x0605) || (r >= 0x2000 && r <= 0x200f) || (r >= 0x2028 && r <= 0x202e) ||
	    (r >= 0x2060 && r <= 0x206f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff9 && r <= 0xfffb) ||
	    (r & 0xfffe) == 0xfffe || r >= 0xf0000 || (r >= 0xe0000 && r <= 0xe0fff))
		return 0;
	return 1;
}

static size_t utf8_encode(uint8_t *d, uint32_t r) {
	if (r < 0x80) {
		d[0] = (uint8_t)r;
		return 1;
	}
	if (r < 0x800) {
		d[0] = (uint8_t)(0xc0 | r >> 6);
		d[1] = (uint8_t)(0x80 | (r & 0x3f));
		return 2;
	}
	if (r >= 0xd800 && r < 0xe000)
		r = 0xfffd;
	if (r < 0x10000) {
		d[0] = (uint8_t)(0xe0 | r >> 12);
		d[1] = (uint8_t)(0x80 | (r >> 6 & 0x3f));
		d[2] = (uint8_t)(0x80 | (r & 0x3f));
		return 3;
	}
	if (r > 0x10ffff) {
		return utf8_encode(d, 0xfffd);
	}
	d[0] = (uint8_t)(0xf0 | r >> 18);
	d[1] = (uint8_t)(0x80 | (r >> 12 & 0x3f));
	d[2] = (uint8_t)(0x80 | (r >> 6 & 0x3f));
	d[3] = (uint8_t)(0x80 | (r & 0x3f));
	return 4;
}

/* utf8_decode decodes the rune at p[0..n) as Go's utf8.DecodeRune does,
 * returning its width, or 0 for an invalid byte. */
static size_t utf8_decode(const uint8_t *p, size_t n, uint32_t *r) {
	uint8_t c = p[0];
	if (c < 0x80) {
		*r = c;
		return 1;
	}
	size_t w;
	uint32_t v, min;
	uint8_t lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf) {
		w = 2, v = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		w = 3, v = c & 0x0f, min = 0x800;
		if (c == 0xe0)
			lo = 0xa0;
		if (c == 0xed)
			hi = 0x9f; /* no surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		w = 4, v = c & 0x07, min = 0x10000;
		if (c == 0xf0)
			lo = 0x90;
		if (c == 0xf4)
			hi = 0x8f;
	} else {
		return 0;
	}
	if (n < w || p[1] < lo || p[1] > hi)
		return 0;
	v = v << 6 | (p[1] & 0x3f);
	for (size_t k = 2; k < w; k++) {
		if ((p[k] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (p[k] & 0x3f);
	}
	(void)min;
	*r = v;
	return w;
}

/* err_quote appends p[0..n) quoted as Go's strconv.Quote (q '"') or, for a
 * single rune, strconv.QuoteRune (q '\''). */
static void err_quote_rune(ln_entry *e, uint32_t r, uint8_t q) {
	static const char hex[] = "0123456789abcdef";
	char b[12];
	size_t k = 0;
	if (r == q || r == '\\') {
		b[k++] = '\\';
		b[k++] = (char)r;
	} else if (is_print(r)) {
		k = utf8_encode((uint8_t *)b, r);
	} else {
		b[k++] = '\\';
		switch (r) {
		case '\a': b[k++] = 'a'; break;
		case '\b': b[k++] = 'b'; break;
		case '\f': b[k++] = 'f'; break;
		case '\n': b[k++] = 'n'; break;
		case '\r': b[k++] = 'r'; break;
		case '\t': b[k++] = 't'; break;
		case '\v': b[k++] = 'v'; break;
		default:
			if (r < ' ' || r == 0x7f) {
				b[k++] = 'x';
				b[k++] = hex[r >> 4 & 15];
				b[k++] = hex[r & 15];
			} else if (r < 0x10000) {
				b[k++] = 'u';
				for (int s = 12; s >= 0; s -= 4)
					b[k++] = hex[r >> s & 15];
			} else {
				b[k++] = 'U';
				for (int s = 28; s >= 0; s -= 4)
					b[k++] = hex[r >> s & 15];
			}
		}
	}
	err_add(e, b, k);
}

static void err_quote(ln_entry *e, const uint8_t *p, size_t n) {
	static const char hex[] = "0123456789abcdef";
	err_add(e, "\"", 1);
	for (size_t i = 0; i < n;) {
		uint32_t r;
		size_t w = utf8_decode(p + i, n - i, &r);
		if (w == 0) {
			char b[4] = {'\\', 'x', hex[p[i] >> 4], hex[p[i] & 15]};
			err_add(e, b, 4);
			i++;
			continue;
		}
		err_quote_rune(e, r, '"');
		i += w;
	}
	err_add(e, "\"", 1);
}

/* ---- the JSON scanner ---------------------------------------------------- */

/* A small JSON scanner for the top level of a log line: it decodes the
 * object's keys and string values (escapes included) and hands every other
 * value back as its raw text, validated but not decoded. Strings without
 * escapes alias the input; decoded ones are appended to the arena, which
 * ln_normalize sizes up front so that it never moves during a line. */

#define MAX_DEPTH 512

typedef struct {
	const uint8_t *p;
	size_t n, i;
	uint8_t *arena;
	size_t alen;
	ln_entry *e;
} scanner;

/* fail sets the SyntaxError message for position s->i and returns -1. */
static int fail(scanner *s, const char *msg) {
	ln_entry *e = s->e;
	err_reset(e);
	err_str(e, "invalid JSON at byte ");
	if (s->i >= s->n) {
		err_int(e, (int64_t)s->n);
		err_str(e, ": unexpected end of input, ");
		err_str(e, msg);
	} else {
		err_int(e, (int64_t)s->i);
		err_str(e, ": ");
		err_str(e, msg);
		err_str(e, ", found '");
		err_quote_rune(e, s->p[s->i], '\'');
		err_str(e, "'");
	}
	return -1;
}

static inline void ws(scanner *s) {
	while (s->i < s->n && is_space(s->p[s->i]))
		s->i++;
}

static inline int next(scanner *s, uint8_t c) {
	ws(s);
	if (s->i < s->n && s->p[s->i] == c) {
		s->i++;
		return 1;
	}
	return 0;
}

static int hex4(const uint8_t *p, size_t n, size_t j, uint32_t *r) {
	if (j + 4 > n)
		return 0;
	uint32_t v = 0;
	for (size_t k = j; k < j + 4; k++) {
		uint8_t c = p[k];
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

/* str_slow decodes a string with escapes into the arena; p[start..j) has
 * none. */
static int str_slow(scanner *s, size_t start, size_t j, ln_bytes *out) {
	const uint8_t *p = s->p;
	size_t n = s->n;
	uint8_t *a = s->arena;
	size_t a0 = s->alen, k = a0;
	memcpy(a + k, p + start, j - start);
	k += j - start;
	while (j < n) {
		uint8_t c = p[j];
		if (c == '"') {
			s->i = j + 1;
			s->alen = k;
			*out = (ln_bytes){a + a0, k - a0};
			return 0;
		}
		if (c < 0x20) {
			s->i = j;
			return fail(s, "control character in string");
		}
		if (c != '\\') {
			a[k++] = c;
			j++;
			continue;
		}
		if (j + 1 >= n)
			break;
		uint8_t esc = p[j + 1];
		j += 2;
		switch (esc) {
		case '"': case '\\': case '/': a[k++] = esc; break;
		case 'b': a[k++] = '\b'; break;
		case 'f': a[k++] = '\f'; break;
		case 'n': a[k++] = '\n'; break;
		case 'r': a[k++] = '\r'; break;
		case 't': a[k++] = '\t'; break;
		case 'u': {
			uint32_t r, r2;
			if (!hex4(p, n, j, &r)) {
				s->i = j - 2;
				return fail(s, "bad \\u escape");
			}
			j += 4;
			if (r >= 0xd800 && r < 0xdc00) { /* high surrogate: a low one must follow */
				if (j + 6 <= n && p[j] == '\\' && p[j + 1] == 'u' && hex4(p, n, j + 2, &r2) &&
				    r2 >= 0xdc00 && r2 < 0xe000) {
					r = 0x10000 + ((r - 0xd800) << 10) + (r2 - 0xdc00);
					j += 6;
				}
			}
			k += utf8_encode(a + k, r); /* an unpaired surrogate is U+FFFD */
			break;
		}
		default:
			s->i = j - 2;
			return fail(s, "bad escape");
		}
	}
	s->i = n;
	return fail(s, "unterminated string");
}

/* str decodes the string at s->i (which holds '"'). */
static int str(scanner *s, ln_bytes *out) {
	const uint8_t *p = s->p;
	size_t n = s->n, start = s->i + 1;
	for (size_t j = start; j < n; j++) {
		uint8_t c = p[j];
		if (c == '"') {
			s->i = j + 1;
			*out = (ln_bytes){p + start, j - start};
			return 0;
		}
		if (c == '\\')
			return str_slow(s, start, j, out);
		if (c < 0x20) {
			s->i = j;
			return fail(s, "control character in string");
		}
	}
	s->i = n;
	return fail(s, "unterminated string");
}

/* skip_string validates the string at s->i without decoding it. */
static int skip_string(scanner *s) {
	const uint8_t *p = s->p;
	size_t n = s->n;
	uint32_t r;
	for (size_t j = s->i + 1; j < n; j++) {
		uint8_t c = p[j];
		if (c == '"') {
			s->i = j + 1;
			return 0;
		}
		if (c < 0x20) {
			s->i = j;
			return fail(s, "control character in string");
		}
		if (c == '\\') {
			if (j + 1 >= n)
				break;
			switch (p[j + 1]) {
			case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
				j++;
				break;
			case 'u':
				if (!hex4(p, n, j + 2, &r)) {
					s->i = j;
					return fail(s, "bad \\u escape");
				}
				j += 5;
				break;
			default:
				s->i = j;
				return fail(s, "bad escape");
			}
		}
	}
	s->i = n;
	return fail(s, "unterminated string");
}

static int literal(scanner *s, const char *lit, const char *msg) {
	size_t l = strlen(lit);
	if (s->n - s->i >= l && memcmp(s->p + s->i, lit, l) == 0) {
		s->i += l;
		return 0;
	}
	return fail(s, msg);
}

static size_t digits(scanner *s) {
	size_t k = s->i;
	while (s->i < s->n && is_digit(s->p[s->i]))
		s->i++;
	return s->i - k;
}

static int skip_number(scanner *s) {
	if (s->p[s->i] == '-')
		s->i++;
	if (s->i < s->n && s->p[s->i] == '0')
		s->i++;
	else if (digits(s) == 0)
		return fail(s, "expected a digit");
	if (s->i < s->n && s->p[s->i] == '.') {
		s->i++;
		if (digits(s) == 0)
			return fail(s, "expected a digit");
	}
	if (s->i < s->n && (s->p[s->i] == 'e' || s->p[s->i] == 'E')) {
		s->i++;
		if (s->i < s->n && (s->p[s->i] == '+' || s->p[s->i] == '-'))
			s->i++;
		if (digits(s) == 0)
			return fail(s, "expected a digit");
	}
	return 0;
}

static int skip(scanner *s, int depth, ln_bytes *raw);

static int skip_composite(scanner *s, uint8_t open, int depth) {
	uint8_t closer = open == '[' ? ']' : '}';
	s->i++;
	if (next(s, closer))
		return 0;
	for (;;) {
		if (open == '{') {
			ws(s);
			if (s->i >= s->n || s->p[s->i] != '"')
				return fail(s, "expected a string key");
			if (skip_string(s))
				return -1;
			if (!next(s, ':'))
				return fail(s, "expected ':'");
		}
		ln_bytes v;
		if (skip(s, depth + 1, &v))
			return -1;
		if (next(s, ','))
			continue;
		if (next(s, closer))
			return 0;
		return fail(s, open == '[' ? "expected ',' or ']'" : "expected ',' or '}'");
	}
}

/* skip validates the value at s->i (after white space) and returns its raw
 * text. */
static int skip(scanner *s, int depth, ln_bytes *raw) {
	ws(s);
	size_t start = s->i;
	if (s->i >= s->n)
		return fail(s, "expected a value");
	uint8_t c = s->p[s->i];
	int rc;
	if (c == '"') {
		rc = skip_string(s);
	} else if (c == '{' || c == '[') {
		if (depth >= MAX_DEPTH)
			return fail(s, "nested too deep");
		rc = skip_composite(s, c, depth);
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		rc = skip_number(s);
	} else if (c == 't') {
		rc = literal(s, "true", "expected true");
	} else if (c == 'f') {
		rc = literal(s, "false", "expected false");
	} else if (c == 'n') {
		rc = literal(s, "null", "expected null");
	} else {
		return fail(s, "expected a value");
	}
	if (rc)
		return rc;
	*raw = (ln_bytes){s->p + start, s->i - start};
	return 0;
}

/* compact appends the raw text of a valid JSON value to the arena without
 * the white space outside its strings. */
static ln_bytes compact(scanner *s, ln_bytes raw) {
	uint8_t *a = s->arena;
	size_t a0 = s->alen, k = a0;
	int in = 0;
	for (size_t i = 0; i < raw.n; i++) {
		uint8_t c = raw.p[i];
		if (in && c == '\\') {
			a[k++] = c;
			a[k++] = raw.p[++i];
			continue;
		}
		if (c == '"')
			in = !in;
		else if (!in && is_space(c))
			continue;
		a[k++] = c;
	}
	s->alen = k;
	return (ln_bytes){a + a0, k - a0};
}

/* ---- levels -------------------------------------------------------------- */

#define LIT(s) ((ln_bytes){(const uint8_t *)(s), sizeof(s) - 1})

/* eq compares p[0..n) with a string literal; the constant length lets the
 * compiler compare in a few loads instead of calling memcmp. */
#define eq(p, n, lit) ((n) == sizeof(lit) - 1 && memcmp((p), (lit), sizeof(lit) - 1) == 0)

static ln_bytes normalize_level(ln_bytes s) {
	const uint8_t *p = s.p;
	size_t n = s.n;
	while (n > 0 && is_space(p[0]))
		p++, n--;
	while (n > 0 && is_space(p[n - 1]))
		n--;
	uint8_t b[16];
	if (n > sizeof b)
		return LIT("unknown");
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];
		b[i] = c >= 'A' && c <= 'Z' ? (uint8_t)(c + 'a' - 'A') : c;
	}
	if (n == 0)
		return LIT("info");
	/* Dispatch on the first byte, then compare whole spellings. */
	switch (b[0]) {
	case 't':
		if (eq(b, n, "trace") || eq(b, n, "trc") || eq(b, n, "t"))
			return LIT("trace");
		break;
	case 'v':
		if (eq(b, n, "verbose"))
			return LIT("trace");
		break;
	case 'd':
		if (eq(b, n, "debug") || eq(b, n, "dbg") || eq(b, n, "d"))
			return LIT("debug");
		break;
	case 'i':
		if (eq(b, n, "info") || eq(b, n, "inf") || eq(b, n, "i") || eq(b, n, "information") ||
		    eq(b, n, "informational"))
			return LIT("info");
		break;
	case 'n':
		if (eq(b, n, "notice"))
			return LIT("info");
		break;
	case 'w':
		if (eq(b, n, "warn") || eq(b, n, "warning") || eq(b, n, "wrn") || eq(b, n, "w"))
			return LIT("warn");
		break;
	case 'e':
		if (eq(b, n, "error") || eq(b, n, "err") || eq(b, n, "e"))
			return LIT("error");
		if (eq(b, n, "emerg") || eq(b, n, "emergency"))
			return LIT("fatal");
		break;
	case 'f':
		if (eq(b, n, "fatal") || eq(b, n, "ftl") || eq(b, n, "f"))
			return LIT("fatal");
		break;
	case 'c':
		if (eq(b, n, "crit") || eq(b, n, "critical"))
			return LIT("fatal");
		break;
	case 'p':
		if (eq(b, n, "panic"))
			return LIT("fatal");
		break;
	case 'a':
		if (eq(b, n, "alert"))
			return LIT("fatal");
		break;
	}
	return LIT("unknown");
}

/* numeric_level maps the numeric levels of pino and bunyan. */
static ln_bytes numeric_level(ln_bytes raw) {
	if (raw.n == 2 && raw.p[1] == '0') {
		switch (raw.p[0]) {
		case '1': return LIT("trace");
		case '2': return LIT("debug");
		case '3': return LIT("info");
		case '4': return LIT("warn");
		case '5': return LIT("error");
		case '6': return LIT("fatal");
		}
	}
	return LIT("unknown");
}

/* ---- timestamps ---------------------------------------------------------- */

static int num(const uint8_t *s, size_t n, size_t i, size_t w, int *v) {
	if (i + w > n)
		return 0;
	int x = 0;
	for (size_t k = i; k < i + w; k++) {
		if (s[k] < '0' || s[k] > '9')
			return 0;
		x = x * 10 + (s[k] - '0');
	}
	*v = x;
	return 1;
}

static int days_in(int year, int month) {
	switch (month) {
	case 2:
		return year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28;
	case 4: case 6: case 9: case 11:
		return 30;
	}
	return 31;
}

/* days_since_epoch counts the days from 1970-01-01 to year-month-day in the
 * proleptic Gregorian calendar, with March as the first month of a year so
 * that the leap day comes last. */
static int64_t days_since_epoch(int64_t year, int month, int day) {
	if (month <= 2)
		year--;
	int64_t era = (year >= 0 ? year : year - 399) / 400;
	int64_t yoe = year - era * 400;
	int64_t doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int parse_rfc3339(const uint8_t *s, size_t n, int64_t *out) {
	/* 2006-01-02T15:04:05 */
	if (n < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':' ||
	    (s[10] != 'T' && s[10] != 't' && s[10] != ' '))
		return 0;
	int year, month, day, hour, min, sec;
	if (!num(s, n, 0, 4, &year) || !num(s, n, 5, 2, &month) || !num(s, n, 8, 2, &day) ||
	    !num(s, n, 11, 2, &hour) || !num(s, n, 14, 2, &min) || !num(s, n, 17, 2, &sec) || month < 1 ||
	    month > 12 || day < 1 || day > days_in(year, month) || hour > 23 || min > 59 || sec > 60)
		return 0;
	size_t i = 19;
	if (s[i] == '.' || s[i] == ',') {
		i++;
		size_t start = i;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
		if (i == start)
			return 0;
	}
	int offset = 0;
	if (i == n) {
		return 0; /* RFC 3339 requires a zone */
	} else if (s[i] == 'Z' || s[i] == 'z') {
		i++;
	} else if (s[i] == '+' || s[i] == '-') {
		int oh, om;
		size_t j = i + 3;
		int ok = num(s, n, i + 1, 2, &oh);
		if (j < n && s[j] == ':')
			j++;
		int ok2 = num(s, n, j, 2, &om);
		if (!ok || !ok2 || oh > 23 || om > 59)
			return 0;
		offset = oh * 3600 + om * 60;
		if (s[i] == '-')
			offset = -offset;
		i = j + 2;
	} else {
		return 0;
	}
	if (i != n)
		return 0;
	int64_t t = days_since_epoch(year, month, day) * 86400 + hour * 3600 + min * 60 + sec;
	*out = t - offset;
	return 1;
}

/* epoch_units converts the integer part v of an epoch number to seconds,
 * rounding down; frac_neg says a negative number had a fraction cut off. */
static int64_t epoch_units(int64_t v, int frac_neg) {
	int64_t a = v < 0 ? -v : v, div;
	if (a < 100000000000LL)
		div = 1;
	else if (a < 100000000000000LL)
		div = 1000;
	else if (a < 100000000000000000LL)
		div = 1000000;
	else
		div = 1000000000;
	int64_t q = v / div; /* rounds toward zero: correct it toward minus infinity */
	if ((v < 0 && v % div != 0) || frac_neg)
		q--;
	return q;
}

/* parse_exponent is the rare case of an epoch number with an exponent:
 * s[0..n) is [-]digits[.digits] then [eE] at e. It accepts what Go's
 * strconv.ParseFloat accepts there: an optional sign and digits. */
static int parse_exponent(const uint8_t *s, size_t n, size_t e, int64_t *out) {
	size_t k = e + 1;
	if (k < n && (s[k] == '+' || s[k] == '-'))
		k++;
	if (k == n)
		return 0;
	for (; k < n; k++)
		if (s[k] < '0' || s[k] > '9')
			return 0;
	/* strtod needs a C string; long mantissas are legal, so it may not fit buf. */
	char buf[64];
	char *c = n < sizeof buf ? buf : malloc(n + 1);
	if (!c)
		abort();
	memcpy(c, s, n);
	c[n] = 0;
	double f = strtod(c, NULL);
	if (c != buf)
		free(c);
	if (!(f <= 9.2e18 && f >= -9.2e18))
		return 0;
	*out = epoch_units((int64_t)f, f < 0 && (double)(int64_t)f != f);
	return 1;
}

/* parse_epoch parses a JSON number as a time since the epoch, in a unit
 * guessed from its magnitude: below 1e11 it is seconds, below 1e14
 * milliseconds, below 1e17 microseconds, else nanoseconds. */
static int parse_epoch(const uint8_t *s, size_t n, int64_t *out) {
	size_t i = 0;
	int neg = 0;
	if (i < n && s[i] == '-') {
		neg = 1;
		i++;
	}
	size_t start = i;
	uint64_t ip = 0;
	while (i < n && s[i] >= '0' && s[i] <= '9') {
		if (ip > (uint64_t)INT64_MAX / 10)
			return 0;
		ip = ip * 10 + (uint64_t)(s[i] - '0');
		i++;
	}
	if (i == start)
		return 0;
	int frac = 0;
	if (i < n && s[i] == '.') {
		i++;
		size_t fs = i;
		while (i < n && s[i] >= '0' && s[i] <= '9') {
			if (s[i] != '0')
				frac = 1;
			i++;
		}
		if (i == fs)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E'))
		return parse_exponent(s, n, i, out);
	if (i != n || ip > (uint64_t)INT64_MAX)
		return 0;
	int64_t v = (int64_t)ip;
	if (neg)
		v = -v;
	*out = epoch_units(v, neg && frac);
	return 1;
}

/* parse_time parses a ts given as a JSON string: RFC 3339, or a number
 * written as a string. */
static int parse_time(ln_bytes s, int64_t *out) {
	if (s.n > 0 && ((s.p[0] >= '0' && s.p[0] <= '9') || s.p[0] == '-') && parse_epoch(s.p, s.n, out))
		return 1;
	return parse_rfc3339(s.p, s.n, out);
}

static int64_t floor_div(int64_t a, int64_t b) {
	int64_t q = a / b;
	if (a % b != 0 && a < 0)
		q--;
	return q;
}

/* ---- templates ----------------------------------------------------------- */

static inline int ends_token(const uint8_t *s, size_t n, size_t j) { return j >= n || !is_word(s[j]); }

static size_t match_quoted(const uint8_t *s, size_t n, size_t i) {
	uint8_t q = s[i];
	for (size_t j = i + 1; j < n; j++) {
		if (s[j] == '\\')
			j++;
		else if (s[j] == q)
			return ends_token(s, n, j + 1) ? j + 1 : 0;
	}
	return 0;
}

static size_t match_uuid(const uint8_t *s, size_t n, size_t i) {
	if (n - i < 36)
		return 0;
	for (size_t k = 0; k < 36; k++) {
		uint8_t c = s[i + k];
		if (k == 8 || k == 13 || k == 18 || k == 23) {
			if (c != '-')
				return 0;
		} else if (!is_hex(c)) {
			return 0;
		}
	}
	return ends_token(s, n, i + 36) ? i + 36 : 0;
}

/* octet matches a decimal number 0-255 of 1-3 digits at j. */
static size_t octet(const uint8_t *s, size_t n, size_t j) {
	int v = 0;
	size_t k = j;
	while (k < n && k - j < 3 && is_digit(s[k])) {
		v = v * 10 + (s[k] - '0');
		k++;
	}
	if (k == j || v > 255)
		return 0;
	return k;
}

static size_t match_ipv4(const uint8_t *s, size_t n, size_t i) {
	size_t j = i;
	for (int part = 0; part < 4; part++) {
		if (part > 0) {
			if (j >= n || s[j] != '.')
				return 0;
			j++;
		}
		if ((j = octet(s, n, j)) == 0)
			return 0;
	}
	if (!ends_token(s, n, j) || (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])))
		return 0;
	if (j + 1 < n && s[j] == ':' && is_digit(s[j + 1])) { /* a port */
		size_t k = j + 1;
		while (k < n && k - j <= 5 && is_digit(s[k]))
			k++;
		if (k - j <= 6 && ends_token(s, n, k))
			j = k;
	}
	return j;
}

/* valid_ipv6 checks the text form of an IPv6 address (RFC 4291 2.2), and
 * that it has a decimal digit. */
static int valid_ipv6(const uint8_t *a, size_t n) {
	int groups = 0, compressed = 0, digit = 0;
	size_t k = 0;
	if (n >= 2 && a[0] == ':' && a[1] == ':') {
		compressed = 1, k = 2;
		if (k == n)
			return 0; /* "::" alone: too ambiguous in prose */
	} else if (a[0] == ':') {
		return 0;
	}
	while (k < n) {
		/* A group, or an IPv4 tail. */
		size_t start = k;
		while (k < n && is_hex(a[k])) {
			digit = digit || is_digit(a[k]);
			k++;
		}
		if (k < n && a[k] == '.') {
			if (match_ipv4(a, n, start) != n || groups > 6)
				return 0;
			groups += 2;
			k = n;
			break;
		}
		if (k - start < 1 || k - start > 4)
			return 0;
		groups++;
		if (k == n)
			break;
		/* a[k] == ':' */
		k++;
		if (k < n && a[k] == ':') {
			if (compressed)
				return 0;
			compressed = 1;
			k++;
			if (k == n)
				break;
		} else if (k == n) {
			return 0;
		}
	}
	if (!digit)
		return 0;
	return compressed ? groups < 8 : groups == 8;
}

static size_t match_ipv6(const uint8_t *s, size_t n, size_t i) {
	/* The candidate: a run of hex digits, ':' and '.', less a trailing '.'
	 * or single ':' (punctuation after the address). */
	size_t j = i;
	while (j < n && (is_hex(s[j]) || s[j] == ':' || s[j] == '.'))
		j++;
	if (!ends_token(s, n, j))
		return 0;
	while (j > i && (s[j - 1] == '.' || (s[j - 1] == ':' && (j < i + 2 || s[j - 2] != ':'))))
		j--;
	if (j - i < 2 || !valid_ipv6(s + i, j - i))
		return 0;
	return j;
}

/* match_hex matches a hex id at i, given the run of hex digits s[i..j) and
 * the number of decimal digits in it. */
static size_t match_hex(const uint8_t *s, size_t n, size_t i, size_t j, size_t ndigits) {
	if (j == i + 1 && s[i] == '0' && j + 1 < n && (s[j] == 'x' || s[j] == 'X') && is_hex(s[j + 1])) {
		j += 2;
		while (j < n && is_hex(s[j]))
			j++;
		return ends_token(s, n, j) ? j : 0;
	}
	size_t len = j - i, letters = len - ndigits;
	if (!ends_token(s, n, j) || letters == 0 || len < 8 || (len < 16 && ndigits == 0))
		return 0;
	return j;
}

static size_t match_number(const uint8_t *s, size_t n, size_t i) {
	size_t j = i;
	if (s[j] == '-' || s[j] == '+')
		j++;
	size_t start = j;
	while (j < n && is_digit(s[j]))
		j++;
	if (j == start)
		return 0;
	if (j + 1 < n && s[j] == '.' && is_digit(s[j + 1])) {
		j += 2;
		while (j < n && is_digit(s[j]))
			j++;
	}
	if (j + 1 < n && (s[j] == 'e' || s[j] == 'E')) {
		size_t k = j + 1;
		if (k + 1 < n && (s[k] == '+' || s[k] == '-'))
			k++;
		if (k < n && is_digit(s[k])) {
			while (k < n && is_digit(s[k]))
				k++;
			if (ends_token(s, n, k))
				j = k;
		}
	}
	return j;
}

#define PUT(lit) (memcpy(dst + d, lit, sizeof(lit) - 1), d += sizeof(lit) - 1)

size_t ln_append_template(uint8_t *dst, const uint8_t *msg, size_t n) {
	size_t i = 0, d = 0;
	while (i < n) {
		uint8_t c = msg[i];
		if (i > 0 && is_word(msg[i - 1])) {
			dst[d++] = c;
			i++;
			continue;
		}
		/* At the start of a token. */
		if (c == '"' || c == '\'') {
			size_t j = match_quoted(msg, n, i);
			if (j > 0) {
				PUT("<str>");
				i = j;
				continue;
			}
		}
		if (is_hex(c) || c == ':') {
			/* The run of hex digits at i tells which matchers can apply. */
			size_t j = i, nd = 0;
			while (j < n && is_hex(msg[j])) {
				nd += is_digit(msg[j]) != 0;
				j++;
			}
			size_t len = j - i, k = 0;
			uint8_t nx = j < n ? msg[j] : 0;
			if (len == 8 && nx == '-') {
				if ((k = match_uuid(msg, n, i)) > 0)
					PUT("<uuid>");
			} else if (len > 0 && len <= 3 && nx == '.' && nd == len) {
				if ((k = match_ipv4(msg, n, i)) > 0)
					PUT("<ip>");
			}
			if (k == 0 && len <= 4 && nx == ':') {
				if ((k = match_ipv6(msg, n, i)) > 0)
					PUT("<ip>");
			}
			if (k == 0) {
				if ((k = match_hex(msg, n, i, j, nd)) > 0)
					PUT("<hex>");
			}
			if (k > 0) {
				i = k;
				continue;
			}
		}
		size_t j = match_number(msg, n, i);
		if (j > 0) {
			PUT("<num>");
			i = j;
			continue;
		}
		if (is_word(c)) { /* copy the rest of the word, and words joined by dots */
			j = i + 1;
			while (j < n && (is_word(msg[j]) || (msg[j] == '.' && j + 1 < n && is_word(msg[j + 1]))))
				j++;
			memcpy(dst + d, msg + i, j - i);
			d += j - i;
			i = j;
			continue;
		}
		dst[d++] = c;
		i++;
	}
	return d;
}

uint64_t ln_fingerprint(const uint8_t *p, size_t n) {
	uint64_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* ---- attributes ---------------------------------------------------------- */

static int key_cmp(const ln_attr *a, const ln_attr *b) {
	size_t n = a->key.n < b->key.n ? a->key.n : b->key.n;
	int c = n ? memcmp(a->key.p, b->key.p, n) : 0;
	if (c)
		return c;
	return (a->key.n > b->key.n) - (a->key.n < b->key.n);
}

/* sort_attrs sorts stably by key: insertion sort for short runs, merged
 * bottom-up through the scratch array. */
static void sort_attrs(ln_entry *e) {
	ln_attr *a = e->attrs;
	size_t n = e->nattrs;
	const size_t run = 8;
	for (size_t lo = 0; lo < n; lo += run) {
		size_t hi = lo + run < n ? lo + run : n;
		for (size_t i = lo + 1; i < hi; i++) {
			ln_attr x = a[i];
			size_t j = i;
			while (j > lo && key_cmp(&a[j - 1], &x) > 0) {
				a[j] = a[j - 1];
				j--;
			}
			a[j] = x;
		}
	}
	if (n <= run)
		return;
	ln_attr *src = a, *dst = e->scratch;
	for (size_t w = run; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			size_t i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				dst[k++] = key_cmp(&src[j], &src[i]) < 0 ? src[j++] : src[i++];
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		ln_attr *t = src;
		src = dst;
		dst = t;
	}
	if (src != a)
		memcpy(a, src, n * sizeof *a);
}

/* ---- the line ------------------------------------------------------------ */

typedef struct {
	ln_bytes val;
	int str; /* a decoded string; otherwise raw JSON */
	int set; /* present and not null */
} field;

/* text is a field as text: a string as decoded, anything else compacted. */
static ln_bytes text(scanner *s, field f) {
	if (f.str || f.val.n == 0 || (f.val.p[0] != '{' && f.val.p[0] != '['))
		return f.val;
	return compact(s, f.val);
}

static void ts_error(ln_entry *e, field ts) {
	err_reset(e);
	err_str(e, "ts ");
	if (ts.str)
		err_quote(e, ts.val.p, ts.val.n);
	else
		err_add(e, ts.val.p, ts.val.n);
	err_str(e, " is neither RFC 3339 nor a number of (milli)seconds since the epoch");
}

int ln_normalize(const uint8_t *value, size_t n, int64_t kafka_ts_millis, ln_entry *e) {
	/* Decoded strings and compacted text never take more bytes than their
	 * source, and no byte of the line is the source of two of them: an arena
	 * of n bytes never moves during the line, so slices of it stay valid. */
	e->arena = grow(e->arena, &e->arena_cap, n + 1, 1);
	scanner sc = {value, n, 0, e->arena, 0, e}, *s = &sc;
	e->nattrs = 0;
	field ts = {0}, level = {0}, service = {0}, msg = {0};
	ws(s);
	if (s->i >= n || value[s->i] != '{') {
		fixed_error(e, "value is not a JSON object");
		return -1;
	}
	s->i++;
	if (!next(s, '}')) {
		for (;;) {
			ws(s);
			if (s->i >= n || value[s->i] != '"')
				return fail(s, "expected a string key");
			ln_bytes key;
			if (str(s, &key))
				return -1;
			if (!next(s, ':'))
				return fail(s, "expected ':'");
			field f = {0};
			ws(s);
			if (s->i < n && value[s->i] == '"') {
				f.str = 1;
				if (str(s, &f.val))
					return -1;
			} else if (skip(s, 0, &f.val)) {
				return -1;
			}
			f.set = f.str || !(f.val.n == 4 && memcmp(f.val.p, "null", 4) == 0);
			if (key.n == 2 && key.p[0] == 't' && key.p[1] == 's') {
				ts = f;
			} else if (eq(key.p, key.n, "level")) {
				level = f;
			} else if (eq(key.p, key.n, "service")) {
				service = f;
			} else if (key.n == 3 && memcmp(key.p, "msg", 3) == 0) {
				msg = f;
			} else {
				ln_bytes v = f.val;
				if (!f.str && v.n > 0 && (v.p[0] == '{' || v.p[0] == '['))
					v = compact(s, v);
				if (e->nattrs == e->attrs_cap) {
					size_t c = e->attrs_cap;
					e->attrs = grow(e->attrs, &e->attrs_cap, c + 1, sizeof *e->attrs);
					e->scratch = realloc(e->scratch, e->attrs_cap * sizeof *e->scratch);
					if (!e->scratch)
						abort();
				}
				e->attrs[e->nattrs++] = (ln_attr){key, v};
			}
			if (next(s, ','))
				continue;
			if (next(s, '}'))
				break;
			return fail(s, "expected ',' or '}'");
		}
	}
	ws(s);
	if (s->i != n)
		return fail(s, "unexpected data after the object");

	if (!msg.set) {
		fixed_error(e, "log line has no \"msg\" field (or it is null)");
		return -1;
	}
	e->msg = text(s, msg);

	if (!ts.set) {
		e->time = floor_div(kafka_ts_millis, 1000);
	} else if (ts.str ? !parse_time(ts.val, &e->time) : !parse_epoch(ts.val.p, ts.val.n, &e->time)) {
		ts_error(e, ts);
		return -1;
	}

	if (!level.set)
		e->level = LIT("info");
	else if (level.str)
		e->level = normalize_level(level.val);
	else if (level.val.n > 0 && (level.val.p[0] == '-' || (level.val.p[0] >= '0' && level.val.p[0] <= '9')))
		e->level = numeric_level(level.val);
	else
		e->level = LIT("unknown");

	e->service = LIT("unknown");
	if (service.set && service.val.n > 0)
		e->service = text(s, service);

	e->tmpl = grow(e->tmpl, &e->tmpl_cap, ln_template_bound(e->msg.n), 1);
	size_t tn = ln_append_template(e->tmpl, e->msg.p, e->msg.n);
	e->template_ = (ln_bytes){e->tmpl, tn};
	e->fingerprint = ln_fingerprint(e->tmpl, tn);

	if (e->nattrs > 1) {
		sort_attrs(e);
		/* Of equal keys, keep the last (the stable sort kept input order). */
		size_t k = 0;
		for (size_t i = 0; i < e->nattrs; i++) {
			if (i + 1 < e->nattrs && key_cmp(&e->attrs[i], &e->attrs[i + 1]) == 0)
				continue;
			e->attrs[k++] = e->attrs[i];
		}
		e->nattrs = k;
	}
	return 0;
}
