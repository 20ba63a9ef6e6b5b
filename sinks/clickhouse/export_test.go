package clickhouse

import "time"

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
