// Package clickhouse is sluice's ClickHouse sink: it discovers a table's
// schema from the server, decodes module output (RowBinary) straight into
// columnar blocks, seals blocks into chunks, queues chunks per shard in bounded
// queues and flushes them as large inserts.
//
// Concurrency: a Block is owned by one goroutine (a partition worker) until it
// is sealed into a Chunk; Sink methods are safe for concurrent use.
package clickhouse
