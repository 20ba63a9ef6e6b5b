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
	Int128
	UInt128
	Int256
	UInt256
	Date32
	DateTime64
	Decimal32
	Decimal64
	Decimal128
	Decimal256
	Map
	Tuple
	numKinds
)

var kindNames = [numKinds]string{
	Invalid: "unsupported type", UInt8: "UInt8", UInt16: "UInt16", UInt32: "UInt32", UInt64: "UInt64",
	Int8: "Int8", Int16: "Int16", Int32: "Int32", Int64: "Int64", Float32: "Float32", Float64: "Float64",
	String: "String", FixedString: "FixedString", Date: "Date", DateTime: "DateTime", Bool: "Bool",
	UUID: "UUID", Enum8: "Enum8", Enum16: "Enum16", IPv4: "IPv4", IPv6: "IPv6",
	Nullable: "Nullable", Array: "Array",
	Int128: "Int128", UInt128: "UInt128", Int256: "Int256", UInt256: "UInt256",
	Date32: "Date32", DateTime64: "DateTime64",
	Decimal32: "Decimal32", Decimal64: "Decimal64", Decimal128: "Decimal128", Decimal256: "Decimal256",
	Map: "Map", Tuple: "Tuple",
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// MaxDepth is the deepest nesting of Array, Map, Tuple and Nullable a type
// may have.
const MaxDepth = 8

// EnumValue is one declared value of an Enum8 or Enum16.
type EnumValue struct {
	Name  string
	Value int16
}

// Type is a parsed column type.
type Type struct {
	Kind Kind
	// Size is N of FixedString(N), the precision P of a Decimal (9, 18,
	// 38 or 76 for Decimal32(S) … Decimal256(S)) and the byte width of
	// Int128/UInt128 (16) and Int256/UInt256 (32).
	Size int
	// Scale is S of a Decimal and the precision of DateTime64 (0…9).
	Scale int
	Elem  *Type       // Nullable(T), Array(T): T; Map(K, V): V
	Key   *Type       // Map(K, V): K
	Enum  []EnumValue // Enum8, Enum16: the declared values, in declaration order
	// Seq are the values a container holds, in the order they are
	// written, repeating: Array(T): [T]; Map(K, V): [K, V]; Tuple: its
	// elements. Names are a Tuple's element names ("" for none).
	Seq   []*Type
	Names []string
	Text  string // the type as written, e.g. "LowCardinality(String)"
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
// Types the ABI cannot carry (AggregateFunction, Variant, Dynamic, …) are
// an error. JSON is carried as its text: it parses as a String.
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
	"Float32": Float32, "Float64": Float64, "String": String, "JSON": String,
	"Date": Date, "Bool": Bool, "Boolean": Bool, "UUID": UUID, "IPv4": IPv4, "IPv6": IPv6,
	"Int128": Int128, "UInt128": UInt128, "Int256": Int256, "UInt256": UInt256, "Date32": Date32,
}

// bigWidth is the byte width of the wide integer kinds.
var bigWidth = map[Kind]int{Int128: 16, UInt128: 16, Int256: 32, UInt256: 32}

// decimals are the Decimal kinds by their fixed precision.
var decimals = map[string]struct {
	kind      Kind
	precision int
}{"Decimal32": {Decimal32, 9}, "Decimal64": {Decimal64, 18}, "Decimal128": {Decimal128, 38}, "Decimal256": {Decimal256, 76}}

// DecimalKind is the kind of Decimal(P, S) for precision p.
func DecimalKind(p int) Kind {
	switch {
	case p <= 9:
		return Decimal32
	case p <= 18:
		return Decimal64
	case p <= 38:
		return Decimal128
	}
	return Decimal256
}

// identAhead reports whether an identifier starts at the current position
// after white space, without consuming anything.
func (p *parser) identAhead() bool {
	save := p.pos
	p.ws()
	ok := p.pos < len(p.s)
	if ok {
		c := p.s[p.pos]
		ok = c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	p.pos = save
	return ok
}

// tupleElement parses "T" or "name T".
func (p *parser) tupleElement(depth int) (string, *Type) {
	p.ws()
	save := p.pos
	name := p.ident()
	if name != "" && p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t') && p.identAhead() {
		return name, p.typ(depth)
	}
	p.pos = save
	return "", p.typ(depth)
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
		if t.Kind == Array {
			t.Seq = []*Type{t.Elem}
		}
	case "Map":
		if depth >= MaxDepth {
			p.fail("nested deeper than %d", MaxDepth)
			return nil
		}
		t.Kind = Map
		p.expect('(')
		t.Key = p.typ(depth + 1)
		p.expect(',')
		t.Elem = p.typ(depth + 1)
		p.expect(')')
		t.Seq = []*Type{t.Key, t.Elem}
	case "Tuple":
		if depth >= MaxDepth {
			p.fail("nested deeper than %d", MaxDepth)
			return nil
		}
		t.Kind = Tuple
		p.expect('(')
		for p.err == nil {
			name, e := p.tupleElement(depth + 1)
			t.Names = append(t.Names, name)
			t.Seq = append(t.Seq, e)
			if !p.peek(',') {
				break
			}
			p.pos++
		}
		p.expect(')')
	case "DateTime64":
		t.Kind = DateTime64
		p.expect('(')
		n := p.int()
		if p.err == nil && (n < 0 || n > 9) {
			p.fail("DateTime64 precision %d out of range", n)
		}
		t.Scale = int(n)
		if p.peek(',') { // DateTime64(3, 'Europe/Berlin')
			p.pos++
			p.quoted()
		}
		p.expect(')')
	case "Decimal":
		p.expect('(')
		prec := p.int()
		p.expect(',')
		scale := p.int()
		p.expect(')')
		if p.err == nil && (prec < 1 || prec > 76 || scale < 0 || scale > prec) {
			p.fail("Decimal(%d, %d) out of range", prec, scale)
		}
		t.Kind, t.Size, t.Scale = DecimalKind(int(prec)), int(prec), int(scale)
	case "Decimal32", "Decimal64", "Decimal128", "Decimal256":
		d := decimals[name]
		p.expect('(')
		scale := p.int()
		p.expect(')')
		if p.err == nil && (scale < 0 || scale > int64(d.precision)) {
			p.fail("%s scale %d out of range", name, scale)
		}
		t.Kind, t.Size, t.Scale = d.kind, d.precision, int(scale)
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
		t.Size = bigWidth[k]
	}
	if p.err != nil {
		return nil
	}
	t.Text = strings.TrimSpace(p.s[start:p.pos])
	return t
}
