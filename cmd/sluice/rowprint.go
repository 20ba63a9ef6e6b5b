package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/sluicehq/sluice/internal/chtype"
	"github.com/sluicehq/sluice/internal/chtype/chvalue"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// rowPrinter renders RowBinary rows of a table as JSON objects. Its
// buffer and encoder are reused from row to row.
type rowPrinter struct {
	table string
	names []string
	keys  []string // the names as JSON, `"name": `
	cols  []*chtype.Type
	buf   bytes.Buffer
	enc   *json.Encoder // writes to buf, without escaping <, > and & (not HTML)
}

func newRowPrinter(table string, cols []clickhouse.Column) (*rowPrinter, error) {
	p := &rowPrinter{table: table}
	p.enc = json.NewEncoder(&p.buf)
	p.enc.SetEscapeHTML(false)
	for _, c := range cols {
		t, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		p.buf.Reset()
		if err := p.encode(c.Name); err != nil {
			return nil, fmt.Errorf("column %s: %w", c.Name, err)
		}
		p.names = append(p.names, c.Name)
		p.keys = append(p.keys, p.buf.String()+": ")
		p.cols = append(p.cols, t)
	}
	return p, nil
}

// encode appends v to the buffer as JSON.
func (p *rowPrinter) encode(v any) error {
	if err := p.enc.Encode(v); err != nil {
		return err
	}
	p.buf.Truncate(p.buf.Len() - 1) // the newline Encode ends with
	return nil
}

// format renders one row as `table {"col": value, …}`.
func (p *rowPrinter) format(row []byte) (string, error) {
	p.buf.Reset()
	p.buf.WriteString(p.table)
	p.buf.WriteString(" {")
	rest := row
	for i, t := range p.cols {
		v, n, err := chvalue.Decode(t, rest)
		if err != nil {
			return "", fmt.Errorf("row for %s: column %s: %w", p.table, p.names[i], err)
		}
		rest = rest[n:]
		if i > 0 {
			p.buf.WriteString(", ")
		}
		p.buf.WriteString(p.keys[i])
		if err := p.encode(chvalue.JSON(t, v)); err != nil {
			return "", err
		}
	}
	if len(rest) != 0 {
		return "", fmt.Errorf("row for %s: %d bytes past the last column", p.table, len(rest))
	}
	p.buf.WriteString("}")
	return p.buf.String(), nil
}
