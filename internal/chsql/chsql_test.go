package chsql

import (
	"slices"
	"testing"
)

func TestQuoteEnd(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{`'abc' rest`, 5},
		{`'it\'s'`, 7},
		{`'b''c'x`, 6},
		{"`a``b`", 6},
		{`"x\\"y`, 5},
		{`'open`, -1},
		{`'ends in backslash\'`, -1},
	} {
		if got := QuoteEnd(tc.s, 0); got != tc.want {
			t.Errorf("QuoteEnd(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestClosingParen(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{`(a, (b), c) d`, 10},
		{`(a, ')', "(", c)`, 15},
		{`(a, (b)`, -1},
		{`(a, 'open)`, -1},
	} {
		if got := ClosingParen(tc.s, 0); got != tc.want {
			t.Errorf("ClosingParen(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func TestSplitTopLevel(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want []string
	}{
		{`UInt8`, []string{"UInt8"}},
		{` a , b,c `, []string{"a", "b", "c"}},
		{`'two', default, logs, cityHash64(host, 'x,y')`, []string{"'two'", "default", "logs", "cityHash64(host, 'x,y')"}},
		{`'a,''b' = 1, 'c\', d' = 2`, []string{`'a,''b' = 1`, `'c\', d' = 2`}},
		{"`a,b`, Map(String, Array(UInt8))", []string{"`a,b`", "Map(String, Array(UInt8))"}},
		{`x, 'unclosed, y`, []string{"x", "'unclosed, y"}},
		{``, nil},
	} {
		if got := SplitTopLevel(tc.s); !slices.Equal(got, tc.want) {
			t.Errorf("SplitTopLevel(%q) = %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want string
		end  int
	}{
		{`'plain' x`, "plain", 7},
		{`'b''c'`, "b'c", 6},
		{`'it\'s\tx'`, "it's\tx", 10},
		{`"q\"x"`, `q"x`, 6},
		{"`a``b`", "a`b", 6},
		{`'\0\b\f\r\n\\'`, "\x00\b\f\r\n\\", 14},
		{`'open`, "", -1},
	} {
		got, end := Unquote(tc.s, 0)
		if got != tc.want || end != tc.end {
			t.Errorf("Unquote(%q) = %q, %d; want %q, %d", tc.s, got, end, tc.want, tc.end)
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:                       "plain",
		`Distributed(\'two\', x)`:     "Distributed('two', x)",
		`a\tb\nc\\d`:                  "a\tb\nc\\d",
		`Enum8(\'a\' = 1, \'b\' = 2)`: "Enum8('a' = 1, 'b' = 2)",
		`trailing\`:                   `trailing\`,
		`\0\r\b\f`:                    "\x00\r\b\f",
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
