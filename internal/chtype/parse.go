package chtype

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse parses a ClickHouse type name as system.columns spells it. Types
// that module output cannot carry (AggregateFunction, Variant, Dynamic, …)
// are an error.
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

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func (p *parser) ws() {
	for p.pos < len(p.s) && isSpace(p.s[p.pos]) {
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
	for p.pos < len(p.s) && (isIdentStart(p.s[p.pos]) || p.s[p.pos] >= '0' && p.s[p.pos] <= '9') {
		p.pos++
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

// quoted reads a name in quote characters q, undoing ClickHouse's
// escapes: a doubled quote, and \n \t \r \0 \b \f, \c for any other c.
func (p *parser) quoted(q byte) string {
	if !p.peek(q) {
		p.fail("expected a quoted name at offset %d", p.pos)
		return ""
	}
	p.pos++
	var b []byte
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		p.pos++
		switch {
		case c == q && p.pos < len(p.s) && p.s[p.pos] == q:
			p.pos++
		case c == q:
			return string(b)
		case c == '\\' && p.pos < len(p.s):
			c = p.s[p.pos]
			p.pos++
			if j := strings.IndexByte("ntr0bf", c); j >= 0 {
				c = "\n\t\r\x00\b\f"[j]
			}
		}
		b = append(b, c)
	}
	p.fail("unterminated quoted name")
	return ""
}

// skipArgs passes over a parenthesized argument list whose contents the
// model does not need (JSON's), minding quotes.
func (p *parser) skipArgs() {
	p.expect('(')
	for depth := 1; p.err == nil && depth > 0; {
		if p.pos == len(p.s) {
			p.fail("unbalanced parentheses")
			return
		}
		switch c := p.s[p.pos]; c {
		case '\'', '`', '"':
			p.quoted(c)
			continue
		case '(':
			depth++
		case ')':
			depth--
		}
		p.pos++
	}
}

var simple = map[string]Kind{
	"UInt8": UInt8, "UInt16": UInt16, "UInt32": UInt32, "UInt64": UInt64,
	"Int8": Int8, "Int16": Int16, "Int32": Int32, "Int64": Int64,
	"Float32": Float32, "Float64": Float64, "String": String,
	"Date": Date, "Bool": Bool, "Boolean": Bool, "UUID": UUID, "IPv4": IPv4, "IPv6": IPv6,
	"Int128": Int128, "UInt128": UInt128, "Int256": Int256, "UInt256": UInt256, "Date32": Date32,
}

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

// tupleElement parses "T", "name T" or "`name` T".
func (p *parser) tupleElement(depth int) (string, *Type) {
	p.ws()
	save := p.pos
	var name string
	if p.peek('`') {
		name = p.quoted('`')
	} else {
		name = p.ident()
	}
	if p.err == nil && name != "" && p.pos < len(p.s) && isSpace(p.s[p.pos]) {
		p.ws()
		if p.pos < len(p.s) && isIdentStart(p.s[p.pos]) {
			return name, p.typ(depth)
		}
	}
	p.pos = save
	return "", p.typ(depth)
}

// nest opens a container's argument list, refusing one nested too deep.
func (p *parser) nest(depth int) bool {
	if depth >= MaxDepth {
		p.fail("nested deeper than %d", MaxDepth)
		return false
	}
	p.expect('(')
	return p.err == nil
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
		t.LowCardinality = true
	case "Nullable", "Array":
		if !p.nest(depth) {
			return nil
		}
		t.Kind = Nullable
		if name == "Array" {
			t.Kind = Array
		}
		t.Elem = p.typ(depth + 1)
		p.expect(')')
		if t.Kind == Array {
			t.Seq = []*Type{t.Elem}
		}
	case "Map":
		if !p.nest(depth) {
			return nil
		}
		t.Kind = Map
		t.Key = p.typ(depth + 1)
		p.expect(',')
		t.Elem = p.typ(depth + 1)
		p.expect(')')
		t.Seq = []*Type{t.Key, t.Elem}
	case "Tuple":
		if !p.nest(depth) {
			return nil
		}
		t.Kind = Tuple
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
			t.TZ = p.quoted('\'')
		}
		p.expect(')')
	case "DateTime":
		t.Kind = DateTime
		if p.peek('(') { // DateTime('Europe/Berlin')
			p.pos++
			t.TZ = p.quoted('\'')
			p.expect(')')
		}
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
	case "Enum8", "Enum16":
		p.enum(t, name)
	case "JSON":
		// JSON(max_dynamic_paths = 8, a.b UInt32, SKIP c): the arguments
		// shape how the server stores the text, not what a module writes.
		t.Kind, t.JSON = String, true
		if p.peek('(') {
			p.skipArgs()
		}
	default:
		k, ok := simple[name]
		if !ok {
			p.fail("%s is not supported by the guest ABI", name)
			return nil
		}
		t.Kind = k
		switch k {
		case Int128, UInt128, Int256, UInt256:
			t.Size = kindInfo[k].width
		}
	}
	if p.err != nil {
		return nil
	}
	t.Text = strings.TrimSpace(p.s[start:p.pos])
	if !t.LowCardinality { // else the inner type's
		t.Bare = t.Text
		for _, e := range t.Seq {
			t.least += max(e.Width(), 1)
		}
	}
	return t
}

// enum parses the values of an Enum8 or Enum16.
func (p *parser) enum(t *Type, name string) {
	t.Kind = Enum8
	lo, hi := int64(-128), int64(127)
	if name == "Enum16" {
		t.Kind, lo, hi = Enum16, -32768, 32767
	}
	t.enumBits = make([]uint64, (hi-lo+1)/64)
	p.expect('(')
	for p.err == nil {
		n := p.quoted('\'')
		p.expect('=')
		v := p.int()
		if p.err == nil && (v < lo || v > hi) {
			p.fail("%s value %d out of range", name, v)
		}
		t.Enum = append(t.Enum, EnumValue{Name: n, Value: int16(v)})
		i := uint16(v)
		if t.Kind == Enum8 {
			i = uint16(uint8(v))
		}
		t.enumBits[i/64] |= 1 << (i % 64)
		if !p.peek(',') {
			break
		}
		p.pos++
	}
	p.expect(')')
}
