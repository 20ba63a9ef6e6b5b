package clickhouse

import (
	"context"
	"fmt"
	"time"
)

// InsertEvent describes one insert attempt, for tracing and metrics. It is
// only valid during the observer's call.
type InsertEvent struct {
	// Table is the table the INSERT named (database.table): with routing
	// shards, the local table of the Distributed one.
	Table string
	// Shard is the shard's name ("" for routing endpoint and distributed)
	// and Replica the server the attempt went to.
	Shard, Replica string
	// Rows and Bytes are what the insert carried (Bytes: the encoded
	// column data).
	Rows, Bytes int
	// Attempt counts attempts of this insert, from 1.
	Attempt    int
	Start, End time.Time
	// Err is why the attempt failed, nil if it succeeded.
	Err error
	// Deduplicated counts the blocks of the insert the server dropped as
	// repeats of blocks it had inserted before (the same
	// insert_deduplication_token within the table's window), as the
	// native protocol reports them; 0 over HTTP.
	Deduplicated int64
	// Segment is the exactly-once segment the insert carries, "" for none.
	Segment string

	parts []*part
}

// Acks calls fn for every ack of the chunks whose rows the insert carried
// (an ack of several chunks is given once per chunk), until fn returns
// false.
func (e *InsertEvent) Acks(fn func(Ack) bool) {
	var last *Chunk
	for _, p := range e.parts {
		if p.chunk == last {
			continue
		}
		last = p.chunk
		for _, a := range p.chunk.acks {
			if !fn(a) {
				return
			}
		}
	}
}

// OnInsert sets a function told about every insert attempt, on the shard
// worker's goroutine, after the attempt. Set it before Run.
func (s *Sink) OnInsert(fn func(*InsertEvent)) { s.onInsert = fn }

// ChunkTiming says when a chunk passed the sink's stage boundaries, for
// latency metrics. With routing shards a chunk is split into parts, one
// per shard, and Taken and Inserted are those of the part whose insert
// completed the chunk.
type ChunkTiming struct {
	// Sealed is when the chunk was handed to Send: its wait for room in
	// a full shard queue counts as time in the queue.
	Sealed time.Time
	// Taken is when an insert took the part off its shard queue.
	Taken time.Time
	// Inserted is when the server acknowledged the insert attempt that
	// succeeded; failed attempts, their backoff and time parked after a
	// permanent error lie between Taken and Inserted.
	Inserted time.Time
}

// OnChunkInserted sets a function told about every chunk with rows once
// all of them are inserted, on the shard worker's goroutine, just before
// the chunk's acks are released. Set it before Run.
func (s *Sink) OnChunkInserted(fn func(*Chunk, ChunkTiming)) { s.onChunk = fn }

// OnSchemaChange sets a function the sink calls with a table's name when an
// insert into it failed as if its schema had changed since its rows were
// encoded (a column dropped, a type changed): the caller can Rediscover it
// at once rather than at its next periodic check. fn is called from a shard
// worker and must not block. Set it before Run.
func (s *Sink) OnSchemaChange(fn func(table string)) { s.onSchemaChange = fn }

// TableStats are one table's counters.
type TableStats struct {
	// Name is database.table, as the pipeline named it (with routing
	// shards, the Distributed table).
	Name         string
	InsertedRows int64
	// DeduplicatedBlocks counts the blocks of successful inserts that the
	// server dropped as repeats of blocks it had (native protocol only):
	// retries and replays whose first insert had landed.
	DeduplicatedBlocks int64
}

// Ping checks that the configured server answers a query within timeout.
func (s *Sink) Ping(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := s.tr.query(ctx, s.endpoint, "SELECT toString(1)"); err != nil {
		return fmt.Errorf("clickhouse %s: %w", s.endpoint.addr, err)
	}
	return nil
}

// Failing reports the tables whose inserts are parked after a permanent
// error, else a shard whose last insert attempt failed, with the error; ""
// when nothing is parked and every shard's last attempt succeeded.
func (s *Sink) Failing() string {
	if msg := s.parkedFailing(); msg != "" {
		return msg
	}
	for _, sh := range s.shardList() {
		if msg := sh.failing.Load(); msg != nil {
			return *msg
		}
	}
	return ""
}

// ErrorCode is the ClickHouse error code Err carries (from either
// transport), 0 if none.
func (e *InsertEvent) ErrorCode() int {
	code, _ := errorCode(e.Err)
	return code
}
