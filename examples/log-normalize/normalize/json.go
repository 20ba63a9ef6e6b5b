package normalize

import (
	"strconv"
	"unicode/utf8"
)

// A small JSON scanner for the top level of a log line: it decodes the
// object's keys and string values (escapes included) and hands every other
// value back as its raw text, validated but not decoded. Strings without
// escapes alias the input; decoded ones are appended to an arena.

// SyntaxError is a malformed JSON value.
type SyntaxError struct {
	Offset int // byte offset of the problem in the value
	msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.Offset) + ": " + e.msg
}

// maxDepth bounds the nesting of the values the scanner skips.
const maxDepth = 512

type scanner struct {
	p     []byte
	i     int
	arena []byte // decoded strings
}

func (s *scanner) fail(msg string) error {
	if s.i >= len(s.p) {
		return &SyntaxError{Offset: len(s.p), msg: "unexpected end of input, " + msg}
	}
	return &SyntaxError{Offset: s.i, msg: msg + ", found " + strconv.QuoteRune(rune(s.p[s.i]))}
}

func (s *scanner) ws() {
	for s.i < len(s.p) {
		switch s.p[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) next(c byte) bool {
	s.ws()
	if s.i < len(s.p) && s.p[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str decodes the string at s.i (which holds '"'). The result aliases the
// input when the string has no escape, the arena otherwise; its capacity is
// capped at its length.
func (s *scanner) str() ([]byte, error) {
	start := s.i + 1
	for j := start; j < len(s.p); j++ {
		switch c := s.p[j]; {
		case c == '"':
			s.i = j + 1
			return s.p[start:j:j], nil
		case c == '\\':
			return s.strSlow(start, j)
		case c < 0x20:
			s.i = j
			return nil, s.fail("control character in string")
		}
	}
	s.i = len(s.p)
	return nil, s.fail("unterminated string")
}

// strSlow decodes a string with escapes into the arena; p[start:j] has none.
func (s *scanner) strSlow(start, j int) ([]byte, error) {
	a0 := len(s.arena)
	s.arena = append(s.arena, s.p[start:j]...)
	for j < len(s.p) {
		c := s.p[j]
		switch {
		case c == '"':
			s.i = j + 1
			return s.arena[a0:len(s.arena):len(s.arena)], nil
		case c < 0x20:
			s.i = j
			return nil, s.fail("control character in string")
		case c != '\\':
			s.arena = append(s.arena, c)
			j++
			continue
		}
		if j+1 >= len(s.p) {
			break
		}
		e := s.p[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			s.arena = append(s.arena, e)
		case 'b':
			s.arena = append(s.arena, '\b')
		case 'f':
			s.arena = append(s.arena, '\f')
		case 'n':
			s.arena = append(s.arena, '\n')
		case 'r':
			s.arena = append(s.arena, '\r')
		case 't':
			s.arena = append(s.arena, '\t')
		case 'u':
			r, ok := hex4(s.p, j)
			if !ok {
				s.i = j - 2
				return nil, s.fail(`bad \u escape`)
			}
			j += 4
			if r >= 0xd800 && r < 0xdc00 { // high surrogate: a low one must follow
				if j+6 <= len(s.p) && s.p[j] == '\\' && s.p[j+1] == 'u' {
					if r2, ok := hex4(s.p, j+2); ok && r2 >= 0xdc00 && r2 < 0xe000 {
						r = 0x10000 + (r-0xd800)<<10 + (r2 - 0xdc00)
						j += 6
					}
				}
			}
			if r >= 0xd800 && r < 0xe000 {
				r = utf8.RuneError // an unpaired surrogate, as encoding/json does
			}
			s.arena = utf8.AppendRune(s.arena, r)
		default:
			s.i = j - 2
			return nil, s.fail("bad escape")
		}
	}
	s.i = len(s.p)
	return nil, s.fail("unterminated string")
}

func hex4(p []byte, j int) (rune, bool) {
	if j+4 > len(p) {
		return 0, false
	}
	var r rune
	for _, c := range p[j : j+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipString validates the string at s.i without decoding it.
func (s *scanner) skipString() error {
	for j := s.i + 1; j < len(s.p); j++ {
		switch c := s.p[j]; {
		case c == '"':
			s.i = j + 1
			return nil
		case c < 0x20:
			s.i = j
			return s.fail("control character in string")
		case c == '\\':
			if j+1 >= len(s.p) {
				break
			}
			switch s.p[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(s.p, j+2); !ok {
					s.i = j
					return s.fail(`bad \u escape`)
				}
				j += 5
			default:
				s.i = j
				return s.fail("bad escape")
			}
		}
	}
	s.i = len(s.p)
	return s.fail("unterminated string")
}

// skip validates the value at s.i (after white space) and returns its raw
// text.
func (s *scanner) skip(depth int) ([]byte, error) {
	s.ws()
	start := s.i
	if s.i >= len(s.p) {
		return nil, s.fail("expected a value")
	}
	var err error
	switch c := s.p[s.i]; {
	case c == '"':
		err = s.skipString()
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return nil, s.fail("nested too deep")
		}
		err = s.skipComposite(c, depth)
	case c == '-' || c >= '0' && c <= '9':
		err = s.skipNumber()
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	default:
		err = s.fail("expected a value")
	}
	if err != nil {
		return nil, err
	}
	return s.p[start:s.i:s.i], nil
}

func (s *scanner) skipComposite(open byte, depth int) error {
	closer := byte('}')
	if open == '[' {
		closer = ']'
	}
	s.i++
	if s.next(closer) {
		return nil
	}
	for {
		if open == '{' {
			s.ws()
			if s.i >= len(s.p) || s.p[s.i] != '"' {
				return s.fail("expected a string key")
			}
			if err := s.skipString(); err != nil {
				return err
			}
			if !s.next(':') {
				return s.fail("expected ':'")
			}
		}
		if _, err := s.skip(depth + 1); err != nil {
			return err
		}
		if s.next(',') {
			continue
		}
		if s.next(closer) {
			return nil
		}
		return s.fail("expected ',' or '" + string(closer) + "'")
	}
}

func (s *scanner) literal(lit string) error {
	if len(s.p)-s.i >= len(lit) && string(s.p[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return nil
	}
	return s.fail("expected " + lit)
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.p) && s.p[s.i] >= '0' && s.p[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) skipNumber() error {
	if s.p[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.p) && s.p[s.i] == '0' {
		s.i++
	} else if s.digits() == 0 {
		return s.fail("expected a digit")
	}
	if s.i < len(s.p) && s.p[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("expected a digit")
		}
	}
	if s.i < len(s.p) && (s.p[s.i] == 'e' || s.p[s.i] == 'E') {
		s.i++
		if s.i < len(s.p) && (s.p[s.i] == '+' || s.p[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("expected a digit")
		}
	}
	return nil
}

// appendCompact appends the raw JSON text of a valid value without the white
// space outside its strings.
func appendCompact(dst, raw []byte) []byte {
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case in && c == '\\':
			dst = append(dst, c, raw[i+1])
			i++
			continue
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
