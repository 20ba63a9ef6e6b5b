package clickhouse

import (
	"fmt"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// Column describes one column of a target table.
type Column struct {
	Name string
	Type string
	// DefaultKind is "", "DEFAULT", "MATERIALIZED" or "ALIAS".
	DefaultKind string
}

// Table is a target table's schema as discovered from the server.
type Table struct {
	Database string
	Name     string
	// Columns are all of the table's columns, in table order.
	Columns []Column
	// Insert are the columns a row must carry, in order: the table's columns
	// minus MATERIALIZED and ALIAS ones, which the server computes.
	Insert []Column

	insertSQL string
}

// NewTable builds a Table from its columns, checking that sluice can encode
// every insertable one.
func NewTable(database, name string, cols []Column) (*Table, error) {
	t := &Table{Database: database, Name: name, Columns: cols}
	var names []string
	for _, c := range cols {
		switch c.DefaultKind {
		case "MATERIALIZED", "ALIAS":
			continue
		}
		if _, err := newColumn(c.Type); err != nil {
			return nil, fmt.Errorf("table %s column %s: %w", t.FullName(), c.Name, err)
		}
		t.Insert = append(t.Insert, c)
		names = append(names, quoteIdent(c.Name))
	}
	if len(t.Insert) == 0 {
		return nil, fmt.Errorf("table %s has no insertable columns", t.FullName())
	}
	t.insertSQL = fmt.Sprintf("INSERT INTO %s.%s (%s) VALUES",
		quoteIdent(database), quoteIdent(name), strings.Join(names, ", "))
	return t, nil
}

// FullName is database.table.
func (t *Table) FullName() string { return t.Database + "." + t.Name }

// NewBlock returns an empty columnar block for the table.
func (t *Table) NewBlock() *Block {
	b := &Block{table: t, cols: make([]column, len(t.Insert))}
	for i, c := range t.Insert {
		col, err := newColumn(c.Type)
		if err != nil {
			// NewTable checked every type.
			panic(err)
		}
		b.cols[i] = col
	}
	return b
}

func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "`", "\\`") + "`"
}

// RowError says which column of a RowBinary row failed to decode.
type RowError struct {
	Table  string
	Column string
	Type   string
	Err    error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("row for %s: column %s %s: %v", e.Table, e.Column, e.Type, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// Block is the columnar buffer of one table's rows, filled from RowBinary.
// A Block is owned by one goroutine.
type Block struct {
	table *Table
	cols  []column
	rows  int
}

// Table is the block's table.
func (b *Block) Table() *Table { return b.table }

// Rows is the number of complete rows in the block.
func (b *Block) Rows() int { return b.rows }

// Size is the block's encoded size in bytes, approximately.
func (b *Block) Size() int {
	n := 0
	for _, c := range b.cols {
		n += c.size()
	}
	return n
}

// AppendRow decodes one RowBinary row into the block. On error the block is
// left as it was.
func (b *Block) AppendRow(row []byte) error {
	pos := 0
	for i, c := range b.cols {
		n, err := c.decode(row[pos:])
		if err != nil {
			b.Truncate(b.rows)
			col := b.table.Insert[i]
			return &RowError{Table: b.table.FullName(), Column: col.Name, Type: col.Type, Err: err}
		}
		pos += n
	}
	if pos != len(row) {
		b.Truncate(b.rows)
		return &RowError{Table: b.table.FullName(), Column: "(end of row)",
			Err: fmt.Errorf("%d bytes past the last column", len(row)-pos)}
	}
	b.rows++
	return nil
}

// Truncate drops rows past n.
func (b *Block) Truncate(n int) {
	for _, c := range b.cols {
		if c.Rows() > n {
			c.truncate(n)
		}
	}
	b.rows = n
}

// Reset empties the block, keeping its buffers.
func (b *Block) Reset() { b.Truncate(0) }

// input is the block as ch-go input columns.
func (b *Block) input() proto.Input {
	in := make(proto.Input, len(b.cols))
	for i, c := range b.cols {
		in[i] = proto.InputColumn{Name: b.table.Insert[i].Name, Data: c}
	}
	return in
}

// EncodeNative appends the block in ClickHouse's Native format (the body of
// an HTTP "INSERT … FORMAT Native") to buf.
func (b *Block) EncodeNative(buf *proto.Buffer) error {
	blk := proto.Block{Columns: len(b.cols), Rows: b.rows}
	return blk.EncodeRawBlock(buf, 0, b.input())
}
