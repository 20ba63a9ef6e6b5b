package clickhouse

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/sluicehq/sluice/internal/chtype"
)

// Column describes one column of a target table.
type Column struct {
	Name string
	Type string
	// DefaultKind is "", "DEFAULT", "MATERIALIZED" or "ALIAS".
	DefaultKind string
}

// Table is a target table's schema as discovered from the server, and
// where its rows go.
type Table struct {
	Database string
	Name     string
	// Columns are all of the table's columns, in table order.
	Columns []Column
	// Insert are the columns a row must carry, in order: the table's columns
	// minus MATERIALIZED and ALIAS ones, which the server computes.
	Insert []Column

	// target is the table inserts name: the table itself, or with routing
	// shards the Distributed table's local table.
	target *target
	// route picks a row's shard (routing shards); nil sends every row to
	// shards[0].
	route *route
	// shards are where a block's parts go, in part order.
	shards []*shard
	// lcKind is, per insert column, how Native encoding writes it (see
	// lowCardinalityKind); types are the insert columns' parsed types.
	lcKind []int
	types  []*chtype.Type

	// shapeMu guards shape: the buffer lengths of the fullest part of a
	// recently inserted block, which a fresh block reserves up front.
	shapeMu sync.Mutex
	shape   []int

	// version counts the table's schema changes seen by Rediscover, from
	// 0; the versions of a table share stats.
	version     int
	shardingKey string // routing shards
	// sortKey is the table's sorting key as block columns, nil when
	// sluice does not put its inserts in that order (sort_rows).
	sortKey *sortKey
	stats   *tableStats
	// plan inserts the version's blocks into the table it was discovered
	// as; plans replace it per shard once the table changed (see
	// insertPlan).
	plan *insertPlan
	// plans are, per shard, how this version's blocks are inserted into a
	// table whose schema changed since (see insertPlan); nil until then.
	plans sync.Map // *shard → *insertPlan
}

// tableStats are the counters of a table over all its versions.
type tableStats struct {
	insertedRows atomic.Int64
	deduplicated atomic.Int64 // blocks the server dropped as repeats
}

// Version counts the changes of the table's schema (or, with routing
// shards, of its cluster) that Rediscover saw: 0 as first discovered.
func (t *Table) Version() int { return t.version }

// sameAs says whether o has t's schema and, with routing shards, the same
// shards and sharding key.
func (t *Table) sameAs(o *Table) bool {
	return slices.Equal(t.Columns, o.Columns) && slices.Equal(t.shards, o.shards) &&
		t.shardingKey == o.shardingKey && t.target.insertSQL == o.target.insertSQL
}

// recordShape remembers the buffer lengths of b's fullest part.
func (t *Table) recordShape(b *Block) {
	var fullest *subBlock
	for _, p := range b.parts {
		if fullest == nil || p.rows > fullest.rows {
			fullest = p
		}
	}
	if fullest == nil || fullest.rows == 0 {
		return
	}
	t.shapeMu.Lock()
	defer t.shapeMu.Unlock()
	t.shape = t.shape[:0]
	for _, c := range fullest.cols {
		t.shape = c.shape(t.shape)
	}
}

// newReservedBlock is NewBlock with every part's buffers sized like the
// fullest part of a recent block, plus an eighth.
func (t *Table) newReservedBlock() *Block {
	b := t.NewBlock()
	t.shapeMu.Lock()
	shape := make([]int, len(t.shape))
	for i, n := range t.shape {
		shape[i] = n + n/8
	}
	t.shapeMu.Unlock()
	if len(shape) == 0 {
		return b
	}
	for _, p := range b.parts {
		rest := shape
		for _, c := range p.cols {
			rest = c.reserve(rest)
		}
	}
	return b
}

// target is the table an INSERT names, with its statements.
type target struct {
	database, table string
	columns         []string
	insertSQL       string // native: INSERT INTO … (…) VALUES
	httpQuery       string // HTTP: INSERT INTO … (…) FORMAT Native
}

func newTarget(database, table string, cols []Column) *target {
	t := &target{database: database, table: table}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		t.columns = append(t.columns, c.Name)
		quoted[i] = quoteIdent(c.Name)

	}
	into := fmt.Sprintf("INSERT INTO %s.%s (%s)", quoteIdent(database), quoteIdent(table), strings.Join(quoted, ", "))
	t.insertSQL = into + " VALUES"
	t.httpQuery = into + " FORMAT Native"
	return t
}

func (t *target) fullName() string { return t.database + "." + t.table }

// NewTable builds a Table from its columns, checking that sluice can encode
// every insertable one. Its rows are inserted into database.name as one part.
func NewTable(database, name string, cols []Column) (*Table, error) {
	t := &Table{Database: database, Name: name, Columns: cols, stats: &tableStats{}}
	for _, c := range cols {
		switch c.DefaultKind {
		case "MATERIALIZED", "ALIAS":
			continue
		}
		typ, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, fmt.Errorf("table %s column %s: %w", t.FullName(), c.Name, err)
		}
		t.Insert = append(t.Insert, c)
		t.types = append(t.types, typ)
		kind, _ := lowCardinalityKind(c.Type) // other LowCardinality types go as their inner type
		t.lcKind = append(t.lcKind, kind)
	}
	if len(t.Insert) == 0 {
		return nil, fmt.Errorf("table %s has no insertable columns", t.FullName())
	}
	t.target = newTarget(database, name, t.Insert)
	t.plan = identityPlan(t)
	t.shards = []*shard{nil}
	return t, nil
}

// FullName is database.table.
func (t *Table) FullName() string { return t.Database + "." + t.Name }

// Shards is the number of parts a block of the table is split into: the
// shards of its cluster with routing shards, else 1.
func (t *Table) Shards() int { return len(t.shards) }

// insertTable is the table inserts name, database.table: the table itself,
// or with routing shards its Distributed table's local table.
func (t *Table) insertTable() string { return t.target.fullName() }

// NewBlock returns an empty columnar block for the table.
func (t *Table) NewBlock() *Block {
	b := &Block{table: t, parts: make([]*subBlock, len(t.shards)), seed: rand.Uint64()}
	for i := range b.parts {
		b.parts[i] = t.newSubBlock()
	}
	if len(b.parts) > 1 {
		b.perPart = make([]int, len(b.parts))
	}
	return b
}

func (t *Table) newSubBlock() *subBlock {
	s := &subBlock{cols: make([]column, len(t.types))}
	for i, typ := range t.types {
		s.cols[i] = columnOf(typ)
	}
	s.ops = rowOps(s.cols)
	return s
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
// With routing shards it holds one part per shard of the table's cluster
// and AppendRow puts each row into the part of the shard the Distributed
// table would choose. A Block is owned by one goroutine.
type Block struct {
	table *Table
	parts []*subBlock
	rows  int
	// partOf records each row's part, in append order, so that Truncate can
	// remove the last rows of a routed block (nil with one part).
	partOf  []uint16
	perPart []int  // Truncate's scratch
	seed    uint64 // rand() sharding state
}

// subBlock is the rows of a block that go to one shard.
type subBlock struct {
	cols []column
	ops  []rowOp // how appendRow decodes each column
	rows int
	lc   []lowCardinalityEncoder // Native encoders of LowCardinality columns, made on first use
}

// Table is the block's table.
func (b *Block) Table() *Table { return b.table }

// Rows is the number of complete rows in the block.
func (b *Block) Rows() int { return b.rows }

// partRows is the number of rows in each of the block's parts (one per
// shard with routing shards).
func (b *Block) partRows() []int {
	out := make([]int, len(b.parts))
	for i, p := range b.parts {
		out[i] = p.rows
	}
	return out
}

// Size is the block's encoded size in bytes, approximately.
func (b *Block) Size() int {
	n := 0
	for _, p := range b.parts {
		n += p.size()
	}
	return n
}

// AppendRow decodes one RowBinary row into the block (with routing shards,
// into its shard's part). On error the block is left as it was.
func (b *Block) AppendRow(row []byte) error {
	part := 0
	if r := b.table.route; r != nil {
		var err error
		if part, err = r.partOf(row, &b.seed); err != nil {
			return err
		}
	}
	if err := b.parts[part].appendRow(b.table, row); err != nil {
		return err
	}
	if b.perPart != nil {
		b.partOf = append(b.partOf, uint16(part))
	}
	b.rows++
	return nil
}

func (s *subBlock) appendRow(t *Table, row []byte) error {
	pos, i, err := s.decodeOps(row)
	if err != nil {
		s.truncate(s.rows)
		col := t.Insert[i]
		return &RowError{Table: t.FullName(), Column: col.Name, Type: col.Type, Err: err}
	}
	if pos != len(row) {
		s.truncate(s.rows)
		return &RowError{Table: t.FullName(), Column: "(end of row)",
			Err: fmt.Errorf("%d bytes past the last column", len(row)-pos)}
	}
	s.rows++
	return nil
}

// Truncate drops the rows appended after the first n.
func (b *Block) Truncate(n int) {
	if n >= b.rows {
		return
	}
	if n < 0 {
		n = 0
	}
	if b.perPart == nil {
		b.parts[0].truncate(n)
		b.rows = n
		return
	}
	clear(b.perPart)
	for _, p := range b.partOf[n:] {
		b.perPart[p]++
	}
	for i, p := range b.parts {
		if drop := b.perPart[i]; drop > 0 {
			p.truncate(p.rows - drop)
		}
	}
	b.partOf = b.partOf[:n]
	b.rows = n
}

// Reset empties the block, keeping its buffers.
func (b *Block) Reset() {
	for _, p := range b.parts {
		p.truncate(0)
	}
	b.partOf = b.partOf[:0]
	b.rows = 0
}

func (s *subBlock) truncate(n int) {
	for _, c := range s.cols {
		if c.Rows() > n {
			c.truncate(n)
		}
	}
	s.rows = n
}

func (s *subBlock) size() int {
	n := 0
	for _, c := range s.cols {
		n += c.size()
	}
	return n
}

// encodeNative appends the part as one block of the Native format, as
// plan inserts it.
func (s *subBlock) encodeNative(plan *insertPlan, buf *proto.Buffer) error {
	in := plan.input(s)
	for i := range in {
		in[i].Data = s.lowCardinality(plan, i, in[i].Data)
	}
	blk := proto.Block{Columns: len(in), Rows: s.rows}
	return blk.EncodeRawBlock(buf, 0, in)
}

// lowCardinality returns plan's i-th column of the part, data, as
// LowCardinality with its dictionary when the column is
// LowCardinality(String), LowCardinality(Nullable(String)) or an Array of
// either, else data.
func (s *subBlock) lowCardinality(plan *insertPlan, i int, data proto.ColInput) proto.ColInput {
	if plan.lcKind[i] == 0 {
		return data
	}
	if col, ok := data.(column); !ok || !lowCardinalityFits(col) {
		return data
	}
	if plan.conv[i] != nil {
		// A converted column is encoded once: no dictionary to keep.
		col := data.(column)
		lc := newLowCardinality(col)
		lc.bind(col)
		return lc
	}
	c := plan.cols[i]
	if s.lc == nil {
		s.lc = make([]lowCardinalityEncoder, len(s.cols))
	}
	if s.lc[c] == nil {
		s.lc[c] = newLowCardinality(s.cols[c])
	}
	s.lc[c].bind(s.cols[c])
	return s.lc[c]
}

// encodeNative appends the block in ClickHouse's Native format (the body of
// an HTTP "INSERT … FORMAT Native") to buf: one Native block, or with
// routing shards one per non-empty part in shard order.
func (b *Block) encodeNative(buf *proto.Buffer) error {
	if len(b.parts) == 1 {
		return b.parts[0].encodeNative(b.table.plan, buf)
	}
	for _, p := range b.parts {
		if p.rows == 0 {
			continue
		}
		if err := p.encodeNative(b.table.plan, buf); err != nil {
			return err
		}
	}
	return nil
}
