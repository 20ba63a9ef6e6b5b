package clickhouse

import (
	"context"
	"time"
)

// What the package's external tests look into.

// InsertTable is the table inserts of t name (see insertTable).
func InsertTable(t *Table) string { return t.insertTable() }

// PartRows is the rows of each part of b (see partRows).
func PartRows(b *Block) []int { return b.partRows() }

// ParkedRows is the rows of t held after a permanent insert error (see
// parkedRows).
func ParkedRows(s *Sink, t *Table) int { return s.parkedRows(t) }

// SetBacklogGap sets how long, past insert_linger, a backlog insert waits
// for its next chunk (insert_linger by default). Call it before Run.
func SetBacklogGap(s *Sink, d time.Duration) { s.backlogGap = d }

// InsertParts sends the rows of blocks, a part each (their first), as one
// insert over a new connection to the table's first shard, with every part
// at hand: as an insert whose deduplication token covers its parts, or a
// retry, sends them (see blockJoiner). Over the native protocol it returns
// how many blocks the insert sent; over HTTP, -1.
func InsertParts(ctx context.Context, s *Sink, t *Table, blocks []*Block) (int, error) {
	return insertParts(ctx, s, t, blocks, nil)
}

// InsertPartsSorted is InsertParts with the rows in the table's key order
// (sort_rows: key), as a worker sends them.
func InsertPartsSorted(ctx context.Context, s *Sink, t *Table, blocks []*Block) (int, error) {
	return insertParts(ctx, s, t, blocks, &sortedEncoder{})
}

// sealedInsert is an insert of the blocks' first parts into t, all at hand.
func sealedInsert(t *Table, blocks []*Block) *openInsert {
	ins := &openInsert{t: t, sealed: true}
	for _, b := range blocks {
		ins.add(&part{sub: b.parts[0], chunk: &Chunk{block: b}})
	}
	return ins
}

func insertParts(ctx context.Context, s *Sink, t *Table, blocks []*Block, sorted *sortedEncoder) (int, error) {
	ins := sealedInsert(t, blocks)
	rep := t.shards[0].replicas[0]
	c, err := s.tr.open(ctx, rep)
	if err != nil {
		return 0, err
	}
	defer c.close()
	err = c.insert(ctx, t.planFor(t.shards[0]), &partSource{ins: ins, sorted: sorted}, insertSettings{})
	if nc, ok := c.(*nativeConn); ok {
		return nc.blocks, err
	}
	return -1, err
}

// Conn is one worker connection to a table's first replica, for tests that
// insert several times over one.
type Conn struct{ c conn }

// OpenConn opens a connection to t's first replica.
func OpenConn(ctx context.Context, s *Sink, t *Table) (*Conn, error) {
	c, err := s.tr.open(ctx, t.shards[0].replicas[0])
	if err != nil {
		return nil, err
	}
	return &Conn{c}, nil
}

// Insert inserts the blocks' rows into t as one INSERT over c.
func (c *Conn) Insert(ctx context.Context, t *Table, blocks []*Block) error {
	return c.c.insert(ctx, t.planFor(t.shards[0]), &partSource{ins: sealedInsert(t, blocks)}, insertSettings{})
}

// Close closes the connection.
func (c *Conn) Close() { c.c.close() }
