package sluice

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// ABIVersion is the guest ABI version this SDK implements (guest-sdk/ABI.md).
const ABIVersion = 1

// Param is one module parameter from the pipeline config.
type Param struct {
	Key, Value string
}

// Config is what the host hands the module at init: its parameters and the
// schema of every target table. It stays valid for the life of the instance
// (the SDK copies it out of the init payload).
type Config struct {
	Params []Param
	Tables []*Table
}

// Param returns the value of the module parameter name.
func (c *Config) Param(name string) (string, bool) {
	for _, p := range c.Params {
		if p.Key == name {
			return p.Value, true
		}
	}
	return "", false
}

// Table returns the target table called name, or an error naming the tables
// the pipeline does have. Return that error from Init to refuse the config.
func (c *Config) Table(name string) (*Table, error) {
	for _, t := range c.Tables {
		if t.Name == name {
			return t, nil
		}
	}
	names := make([]string, len(c.Tables))
	for i, t := range c.Tables {
		names[i] = fmt.Sprintf("%q", t.Name)
	}
	have := "none"
	if len(names) > 0 {
		have = strings.Join(names, ", ")
	}
	return nil, fmt.Errorf("sluice: the pipeline has no target table %q (tables: %s)", name, have)
}

// Table is a target table: the columns a row must carry, in order.
type Table struct {
	Name    string
	Index   int // position in Config.Tables: the table index in output rows
	Columns []Column

	cfg       *Config
	flat      []uint8 // FlatRow's layout of Columns (flatLayout)
	flatCol   []int   // the column of each slot of flat
	flatFixed int     // the most bytes of a row's fixed-width values (flatLayout)
}

// Column is one column of a target table, or, built with Col, one column a
// module expects.
type Column struct {
	Name string
	Type string // as ClickHouse spells it, e.g. "LowCardinality(String)"

	t   *chtype.Type // nil: a type the SDK cannot write (see err)
	err error
}

// Col describes a column for Table.Expect.
func Col(name, typ string) Column { return Column{Name: name, Type: typ} }

// Supported reports whether the SDK can write values of the column's type;
// the error says why not.
func (c Column) Supported() error { return c.err }

// EnumValue returns the number of the enum value called name, for a column
// of type Enum8/Enum16 (or an Array/Nullable of one), as an int16: what
// Row.Enum16 takes. For an Enum8, Enum8Value returns what Row.Enum8 takes.
func (c Column) EnumValue(name string) (int16, bool) {
	for t := c.t; t != nil; t = t.Elem {
		for _, e := range t.Enum {
			if e.Name == name {
				return e.Value, true
			}
		}
	}
	return 0, false
}

// Enum8Value returns the number of the enum value called name as Row.Enum8
// takes it, for a column of type Enum8 (or an Array/Nullable of one). It
// reports false when there is no such value, or when the enum is an
// Enum16, whose values Row.Enum16 takes (EnumValue).
func (c Column) Enum8Value(name string) (int8, bool) {
	for t := c.t; t != nil; t = t.Elem {
		if t.Kind == chtype.Enum16 {
			return 0, false
		}
		for _, e := range t.Enum {
			if e.Name == name {
				return int8(e.Value), true // an Enum8's values are int8 (chtype.Parse checks them)
			}
		}
	}
	return 0, false
}

// Expect checks that the table has exactly the given columns, in this order,
// with these types, and that the SDK can write every one of them. Types are
// compared as written, ignoring white space outside quotes: String and
// LowCardinality(String) differ, DateTime and DateTime('UTC') differ.
// The error lists every difference; return it from Init to refuse the schema.
func (t *Table) Expect(cols ...Column) error {
	var problems []string
	n := max(len(cols), len(t.Columns))
	for i := 0; i < n; i++ {
		switch {
		case i >= len(t.Columns):
			problems = append(problems, fmt.Sprintf("missing column #%d %s %s", i+1, cols[i].Name, cols[i].Type))
		case i >= len(cols):
			problems = append(problems, fmt.Sprintf("unexpected column #%d %s %s", i+1, t.Columns[i].Name, t.Columns[i].Type))
		case cols[i].Name != t.Columns[i].Name || chtype.Canonical(cols[i].Type) != chtype.Canonical(t.Columns[i].Type):
			problems = append(problems, fmt.Sprintf("column #%d is %s %s, want %s %s",
				i+1, t.Columns[i].Name, t.Columns[i].Type, cols[i].Name, cols[i].Type))
		case t.Columns[i].err != nil:
			problems = append(problems, fmt.Sprintf("column #%d %s: %v", i+1, t.Columns[i].Name, t.Columns[i].err))
		}
	}
	if problems == nil {
		return nil
	}
	return fmt.Errorf("sluice: table %q does not have the columns this module writes: %s",
		t.Name, strings.Join(problems, "; "))
}

// decodeInit decodes the init payload. It copies every string, since the
// payload buffer is reused for the next call.
func decodeInit(p []byte) (*Config, error) {
	r := reader{p: p}
	cfg := &Config{}
	np := r.count(8, "nparams")
	for i := 0; i < np && r.err == nil; i++ {
		k := r.str("param key")
		v := r.str("param value")
		cfg.Params = append(cfg.Params, Param{Key: strings.Clone(k), Value: strings.Clone(v)})
	}
	nt := r.count(8, "ntables")
	for i := 0; i < nt && r.err == nil; i++ {
		t := &Table{Name: strings.Clone(r.str("table name")), Index: i, cfg: cfg}
		nc := r.count(8, "ncolumns")
		for j := 0; j < nc && r.err == nil; j++ {
			c := Column{Name: strings.Clone(r.str("column name")), Type: strings.Clone(r.str("column type"))}
			c.t, c.err = chtype.Parse(c.Type)
			t.Columns = append(t.Columns, c)
		}
		t.flat, t.flatCol, t.flatFixed = flatLayout(t.Columns)
		cfg.Tables = append(cfg.Tables, t)
	}
	if r.err == nil && r.off != len(p) {
		r.err = &decodeError{off: r.off, msg: strconv.Itoa(len(p)-r.off) + " trailing bytes"}
	}
	if r.err != nil {
		return nil, fmt.Errorf("sluice: malformed init payload: %w", r.err)
	}
	if len(cfg.Tables) > 1<<16 {
		return nil, fmt.Errorf("sluice: %d target tables: a table index is a u16", len(cfg.Tables))
	}
	return cfg, nil
}
