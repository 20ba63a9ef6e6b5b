// Package clickhouse is sluice's ClickHouse sink: it discovers a table's
// schema from the server, decodes module output (RowBinary) straight into
// columnar blocks, queues sealed chunks in bounded per-shard queues, and
// inserts them over the native protocol (ch-go) or HTTP ("FORMAT Native").
// With routing shards it reads the Distributed table's cluster and sharding
// key, puts each row in the part of the shard the Distributed table would
// choose, and inserts each part straight into that shard's local table.
//
// Concurrency: a Block is owned by one goroutine (a partition worker) until
// it is sent in a Chunk; Sink methods are safe for concurrent use. Run owns
// every shard worker (inserts_per_shard per shard queue) and every retrier
// of parked inserts, and returns only after all of them have stopped.
// Shutdown: Close makes waiting Sends return ErrClosed (the queues are never
// closed, so a racing Send cannot panic), each worker finishes its insert
// and drains its queue, and Run returns nil once every queued part is
// inserted and its chunk acked.
//
// Delivery: a chunk's acks are told Done once, after every part of it is
// inserted; a failed insert is retried unchanged (same rows, same
// deduplication token where the server takes one), on the replicas of the
// same shard only, until it succeeds; one that fails permanently
// (*PermanentError) is parked with its rows and retried every
// permanent_retry_interval, so a broken table holds back only its own
// pipeline and loses nothing.
package clickhouse
