// Package chtype parses the ClickHouse column types that the guest ABI can
// carry in RowBinary (see guest-sdk/ABI.md) into a small tree that the row
// writer walks with integer compares.
package chtype

import (
	"fmt"
	"strconv"
	"strings"
)

// Kind is the encoding of a value in RowBinary.
type Kind uint8

// The kinds. LowCardinality(T) has no kind of its own: it is encoded as T.
const (
	Invalid Kind = iota
	UInt8
	UInt16
	UInt32
	UInt64
	Int8
	Int16
	Int32
	Int64
	Float32
	Float64
	String
	FixedString
	Date
	DateTime
	Bool
	UUID
	Enum8
	Enum16
	IPv4
	IPv6
	Nullable
	Array
	numKinds
)

var kindNames = [numKinds]string{
	Invalid: "unsupported type", UInt8: "UInt8", UInt16: "UInt16", UInt32: "UInt32", UInt64: "UInt64",
	Int8: "Int8", Int16: "Int16", Int32: "Int32", Int64: "Int64", Float32: "Float32", Float64: "Float64",
	String: "String", FixedString: "FixedString", Date: "Date", DateTime: "DateTime", Bool: "Bool",
	UUID: "UUID", Enum8: "Enum8", Enum16: "Enum16", IPv4: "IPv4", IPv6: "IPv6",
	Nullable: "Nullable", Array: "Array",
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxDepth is the deepest nesting of Array and Nullable a type may have.
const MaxDepth = 8

// EnumValue is one declared value of an Enum8 or Enum16.
type EnumValue struct {
	Name  string
	Value int16
}

// Type is a parsed column type.
type Type struct {
	Kind Kind
	Size int         // FixedString(N): N
	Elem *Type       // Nullable(T), Array(T): T
	Enum []EnumValue // Enum8, Enum16: the declared values, in declaration order
	Text string      // the type as written, e.g. "LowCardinality(String)"
}

// HasEnum reports whether v is a declared value of an enum type.
func (t *Type) HasEnum(v int16) bool {
	for i := range t.Enum {
		if t.Enum[i].Value == v {
			return true
		}
	}
	return false
}

// EnumName returns the name of the enum value v.
func (t *Type) EnumName(v int16) (string, bool) {
	for i := range t.Enum {
		if t.Enum[i].Value == v {
			return t.Enum[i].Name, true
		}
	}
	return "", false
}

// Canonical returns s without the white space outside quoted names, so that
// "Enum8('a' = 1)" and "Enum8('a'=1)" compare equal.
func Canonical(s string) string {
	if !strings.ContainsAny(s, " \t\r\n") {
		return s
	}
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '\'':
			quoted = !quoted
		case !quoted && (c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Parse parses a ClickHouse type name as system.columns spells it.
// Types the ABI cannot carry (Decimal, Tuple, Map, DateTime64, …) are an error.
func Parse(s string) (*Type, error) {
	p := parser{s: s}
	t := p.typ(0)
	if p.err == nil {
		p.ws()
		if p.pos != len(s) {
			p.fail("unexpected %q", s[p.pos:])
		}
	}
	if p.err != nil {
		return nil, p.err
	}
	return t, nil
}

type parser struct {
	s   string
	pos int
	err error
}

func (p *parser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("type %q: "+format, append([]any{p.s}, args...)...)
	}
}

func (p *parser) ws() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n' || p.s[p.pos] == '\r') {
		p.pos++
	}
}

func (p *parser) peek(c byte) bool {
	p.ws()
	return p.pos < len(p.s) && p.s[p.pos] == c
}

func (p *parser) expect(c byte) {
	if !p.peek(c) {
		p.fail("expected %q at offset %d", c, p.pos)
		return
	}
	p.pos++
}

func (p *parser) ident() string {
	p.ws()
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			p.pos++
			continue
		}
		break
	}
	return p.s[start:p.pos]
}

func (p *parser) int() int64 {
	p.ws()
	start := p.pos
	if p.pos < len(p.s) && (p.s[p.pos] == '-' || p.s[p.pos] == '+') {
		p.pos++
	}
	for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
		p.pos++
	}
	v, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
	if err != nil {
		p.fail("expected an integer at offset %d", start)
	}
	return v
}

func (p *parser) quoted() string {
	if !p.peek('\'') {
		p.fail("expected a quoted name at offset %d", p.pos)
		return ""
	}
	p.pos++
	var b []byte
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		p.pos++
		switch c {
		case '\'':
			return string(b)
		case '\\':
			if p.pos < len(p.s) {
				b = append(b, p.s[p.pos])
				p.pos++
			}
		default:
			b = append(b, c)
		}
	}
	p.fail("unterminated quoted name")
	return ""
}

var simple = map[string]Kind{
	"UInt8": UInt8, "UInt16": UInt16, "UInt32": UInt32, "UInt64": UInt64,
	"Int8": Int8, "Int16": Int16, "Int32": Int32, "Int64": Int64,
	"Float32": Float32, "Float64": Float64, "String": String,
	"Date": Date, "Bool": Bool, "Boolean": Bool, "UUID": UUID, "IPv4": IPv4, "IPv6": IPv6,
}

func (p *parser) typ(depth int) *Type {
	p.ws()
	start := p.pos
	name := p.ident()
	if p.err != nil {
		return nil
	}
	t := &Type{}
	switch name {
	case "":
		p.fail("expected a type name at offset %d", start)
		return nil
	case "LowCardinality":
		p.expect('(')
		inner := p.typ(depth)
		p.expect(')')
		if p.err != nil {
			return nil
		}
		*t = *inner
	case "Nullable", "Array":
		if depth >= MaxDepth {
			p.fail("nested deeper than %d", MaxDepth)
			return nil
		}
		t.Kind = Nullable
		if name == "Array" {
			t.Kind = Array
		}
		p.expect('(')
		t.Elem = p.typ(depth + 1)
		p.expect(')')
	case "FixedString":
		t.Kind = FixedString
		p.expect('(')
		n := p.int()
		p.expect(')')
		if p.err == nil && (n < 1 || n > 1<<30) {
			p.fail("FixedString size %d out of range", n)
		}
		t.Size = int(n)
	case "DateTime":
		t.Kind = DateTime
		if p.peek('(') { // DateTime('Europe/Berlin')
			p.pos++
			p.quoted()
			p.expect(')')
		}
	case "Enum8", "Enum16":
		t.Kind = Enum8
		lo, hi := int64(-128), int64(127)
		if name == "Enum16" {
			t.Kind, lo, hi = Enum16, -32768, 32767
		}
		p.expect('(')
		for p.err == nil {
			n := p.quoted()
			p.expect('=')
			v := p.int()
			if p.err == nil && (v < lo || v > hi) {
				p.fail("%s value %d out of range", name, v)
			}
			t.Enum = append(t.Enum, EnumValue{Name: n, Value: int16(v)})
			if !p.peek(',') {
				break
			}
			p.pos++
		}
		p.expect(')')
	default:
		k, ok := simple[name]
		if !ok {
			p.fail("%s is not supported by the guest ABI", name)
			return nil
		}
		t.Kind = k
	}
	if p.err != nil {
		return nil
	}
	t.Text = strings.TrimSpace(p.s[start:p.pos])
	return t
}
