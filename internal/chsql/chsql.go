// Package chsql reads the pieces of ClickHouse SQL that sluice meets in
// schemas: quoted names and string literals, and the arguments of types and
// table engines.
package chsql

import "strings"

// QuoteEnd returns the index just past the quoted string or name that
// starts at s[open] (a ', ` or "), skipping backslash escapes and doubled
// quotes; -1 if it is not closed.
func QuoteEnd(s string, open int) int {
	q := s[open]
	for i := open + 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return -1
}

// ClosingParen returns the index of the parenthesis closing the one at
// s[open], skipping quoted text; -1 if there is none.
func ClosingParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '\'', '`', '"':
			end := QuoteEnd(s, i)
			if end < 0 {
				return -1
			}
			i = end - 1
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// SplitTopLevel splits type or engine arguments at the commas outside
// parentheses and quotes, trimming spaces; an unclosed quote runs to the
// end.
func SplitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'', '`', '"':
			end := QuoteEnd(s, i)
			if end < 0 {
				end = len(s)
			}
			i = end - 1
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if rest := strings.TrimSpace(s[start:]); rest != "" {
		out = append(out, rest)
	}
	return out
}

// Unquote reads the quoted string or name that starts at s[open], undoing
// backslash escapes and doubled quotes, and returns its text and the index
// just past it; -1 if it is not closed.
func Unquote(s string, open int) (string, int) {
	end := QuoteEnd(s, open)
	if end < 0 {
		return "", -1
	}
	q := s[open]
	body := s[open+1 : end-1]
	if !strings.ContainsRune(body, '\\') && !strings.Contains(body, string([]byte{q, q})) {
		return body, end
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case c == '\\' && i+1 < len(body):
			i++
			b.WriteByte(unescapeByte(body[i]))
		case c == q:
			// The first of a doubled quote: QuoteEnd guarantees the second.
			i++
			b.WriteByte(q)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), end
}

// Unescape undoes ClickHouse's backslash escapes, as in TabSeparated
// fields: \n \t \r \0 \b \f, and \c for any other c is c.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			i++
			c = unescapeByte(s[i])
		}
		b.WriteByte(c)
	}
	return b.String()
}

func unescapeByte(c byte) byte {
	if j := strings.IndexByte("ntr0bf", c); j >= 0 {
		return "\n\t\r\x00\b\f"[j]
	}
	return c
}
