package main

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/sluicehq/sluice/internal/chsql"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// parseCreateTable reads enough of a CREATE TABLE statement to give the
// table's name and columns: names, types and default kinds. A Nested(a T,
// b U) column n becomes n.a Array(T) and n.b Array(U), as ClickHouse stores
// it. Indexes, constraints and projections are skipped.
func parseCreateTable(ddl string) (string, []clickhouse.Column, error) {
	ddl = stripComments(ddl)
	s := &ddlScanner{s: ddl}
	for _, kw := range []string{"CREATE", "TABLE"} {
		if !s.keyword(kw) {
			return "", nil, fmt.Errorf("%q: want CREATE TABLE", abbreviate(ddl))
		}
	}
	if s.keyword("IF") {
		if !s.keyword("NOT") || !s.keyword("EXISTS") {
			return "", nil, fmt.Errorf("%q: want IF NOT EXISTS", abbreviate(ddl))
		}
	}
	name := s.ident()
	if s.peek() == '.' { // database.table: the table is the second part
		s.pos++
		name = s.ident()
	}
	if name == "" {
		return "", nil, fmt.Errorf("%q: no table name", abbreviate(ddl))
	}
	if s.peek() != '(' {
		return "", nil, fmt.Errorf("table %s: want a column list in parentheses", name)
	}
	body, ok := s.balanced()
	if !ok {
		return "", nil, fmt.Errorf("table %s: unbalanced parentheses or quotes", name)
	}
	var cols []clickhouse.Column
	for _, def := range chsql.SplitTopLevel(body[1 : len(body)-1]) {
		c := &ddlScanner{s: def}
		switch strings.ToUpper(c.word()) {
		case "INDEX", "CONSTRAINT", "PROJECTION", "PRIMARY":
			continue
		}
		c = &ddlScanner{s: def}
		colName := c.ident()
		if colName == "" {
			return "", nil, fmt.Errorf("table %s: no column name in %q", name, def)
		}
		typ, ok := c.typeExpr()
		if !ok || typ == "" {
			return "", nil, fmt.Errorf("table %s column %s: no type", name, colName)
		}
		kind := ""
		switch k := strings.ToUpper(c.word()); k {
		case "DEFAULT", "MATERIALIZED", "ALIAS", "EPHEMERAL":
			kind = k
		}
		if inner, ok := strings.CutPrefix(typ, "Nested("); ok {
			for _, field := range chsql.SplitTopLevel(strings.TrimSuffix(inner, ")")) {
				f := &ddlScanner{s: field}
				fname := f.ident()
				ftyp, ok := f.typeExpr()
				if fname == "" || !ok || ftyp == "" {
					return "", nil, fmt.Errorf("table %s column %s: bad Nested field %q", name, colName, field)
				}
				cols = append(cols, clickhouse.Column{Name: colName + "." + fname, Type: "Array(" + ftyp + ")", DefaultKind: kind})
			}
			continue
		}
		cols = append(cols, clickhouse.Column{Name: colName, Type: typ, DefaultKind: kind})
	}
	if len(cols) == 0 {
		return "", nil, fmt.Errorf("table %s has no columns", name)
	}
	return name, cols, nil
}

// stripComments removes -- and /* */ comments outside quotes.
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '`' || c == '"':
			end := chsql.QuoteEnd(s, i)
			if end < 0 {
				end = len(s)
			}
			b.WriteString(s[i:end])
			i = end - 1
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += 2 + end + 1
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func abbreviate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ddlScanner reads the parts of a CREATE TABLE statement parseCreateTable
// needs.
type ddlScanner struct {
	s   string
	pos int
}

func (d *ddlScanner) skipSpace() {
	for d.pos < len(d.s) && unicode.IsSpace(rune(d.s[d.pos])) {
		d.pos++
	}
}

func (d *ddlScanner) peek() byte {
	d.skipSpace()
	if d.pos < len(d.s) {
		return d.s[d.pos]
	}
	return 0
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// word reads a bare word.
func (d *ddlScanner) word() string {
	d.skipSpace()
	start := d.pos
	for d.pos < len(d.s) && isIdentByte(d.s[d.pos]) {
		d.pos++
	}
	return d.s[start:d.pos]
}

// keyword reads kw, case-insensitively, if it comes next.
func (d *ddlScanner) keyword(kw string) bool {
	save := d.pos
	if strings.EqualFold(d.word(), kw) {
		return true
	}
	d.pos = save
	return false
}

// ident reads a bare, `backquoted` or "double-quoted" identifier.
func (d *ddlScanner) ident() string {
	switch d.peek() {
	case '`', '"':
		text, end := chsql.Unquote(d.s, d.pos)
		if end < 0 {
			d.pos = len(d.s)
			return ""
		}
		d.pos = end
		return text
	}
	return d.word()
}

// balanced reads from an opening parenthesis to its closing one, skipping
// quoted strings and identifiers.
func (d *ddlScanner) balanced() (string, bool) {
	end := chsql.ClosingParen(d.s, d.pos)
	if end < 0 {
		return "", false
	}
	start := d.pos
	d.pos = end + 1
	return d.s[start:d.pos], true
}

// typeExpr reads a type: a name and, if a parenthesis follows, its
// balanced arguments; it returns the type as ClickHouse spells it (one
// space after each comma, spaces around =, none elsewhere but between
// words).
func (d *ddlScanner) typeExpr() (string, bool) {
	name := d.word()
	if name == "" {
		return "", false
	}
	if d.peek() != '(' {
		return name, true
	}
	args, ok := d.balanced()
	if !ok {
		return "", false
	}
	return name + normalizeType(args), true
}

// normalizeType respells a type's argument list as ClickHouse does.
func normalizeType(s string) string {
	var b strings.Builder
	lastWord := false // the last byte written ends a word
	pendingSpace := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '`' || c == '"':
			end := chsql.QuoteEnd(s, i)
			if end < 0 {
				end = len(s)
			}
			if pendingSpace && lastWord {
				b.WriteByte(' ')
			}
			b.WriteString(s[i:end])
			i = end - 1
			lastWord, pendingSpace = true, false
		case unicode.IsSpace(rune(c)):
			pendingSpace = true
		case c == ',':
			b.WriteString(", ")
			lastWord, pendingSpace = false, false
		case c == '=':
			b.WriteString(" = ")
			lastWord, pendingSpace = false, false
		default:
			if pendingSpace && lastWord && isIdentByte(c) {
				b.WriteByte(' ')
			}
			b.WriteByte(c)
			lastWord, pendingSpace = isIdentByte(c), false
		}
	}
	return strings.ReplaceAll(strings.ReplaceAll(b.String(), ",  ", ", "), "=  ", "= ")
}
