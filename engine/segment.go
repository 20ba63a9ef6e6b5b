package engine

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// A partition worker's segments in exactly-once delivery. The open blocks
// hold one segment's rows. A new segment is closed as chunks are sealed
// at other times (chunk_bytes, chunk_linger, a stop, a change of module
// version or schema), and recorded before it is sent; a segment recorded
// before this worker owned the partition is rebuilt from exactly its
// recorded offsets and closed only at its recorded end.

// A segment's rows go into inserts of their own, which a shard worker
// never merges with others: a segment is therefore closed at the size and
// age an at-least-once insert reaches by merging chunks, not at a chunk's.
// It is closed when a table's block reaches segmentBytes (8 chunks, at most
// max_insert_bytes) or segmentLinger after its first row (chunk_linger plus
// insert_linger, the longest an at-least-once row waits before its insert
// starts).
func segmentBytes(c clickhouse.Config) int { return min(8*c.ChunkBytes, c.MaxInsertBytes) }

func segmentLinger(c clickhouse.Config) time.Duration { return c.ChunkLinger + c.InsertLinger }

// segmentBoundary prepares the worker for the record at off: it closes
// what must end before off, opens a segment if none is, and returns the
// offset the records of the next module call must stay below.
func (w *partitionWorker) segmentBoundary(ctx context.Context, off int64) (int64, error) {
	// Recorded segments that end at or before off and were never opened
	// here: their records are gone (retention, compaction) or were
	// committed; nothing of theirs can be rebuilt.
	for len(w.replay) > 0 && w.replay[0].end <= off && !w.segReplay {
		w.p.log.Warn("exactly-once: a recorded segment has no records left to replay", "partition", w.tp.String(),
			"start", w.replay[0].start, "end", w.replay[0].end, "next_offset", off)
		w.replay = w.replay[1:]
	}
	if w.segStart >= 0 {
		switch {
		case w.segReplay && off >= w.replay[0].end:
			// The replayed segment's last records are gone: close it
			// with what it has.
			if err := w.closeSegment(ctx); err != nil {
				return 0, err
			}
		case !w.segReplay && len(w.replay) > 0 && off >= w.replay[0].start:
			if err := w.closeSegment(ctx); err != nil {
				return 0, err
			}
		}
		// A segment closed above may have been the last of the replay.
		for len(w.replay) > 0 && w.replay[0].end <= off && !w.segReplay {
			w.replay = w.replay[1:]
		}
	}
	if w.segStart < 0 {
		if len(w.replay) > 0 && off >= w.replay[0].start {
			w.segStart, w.segReplay = w.replay[0].start, true
			if sha := w.mv.module.SHA256; sha != w.replay[0].sha {
				w.p.log.Warn("exactly-once: replaying a segment with another module version than the one that recorded it; "+
					"its rows land once, as this version makes them, unless the first insert had landed",
					"partition", w.tp.String(), "start", w.replay[0].start, "end", w.replay[0].end,
					"recorded_sha256", w.replay[0].sha, "sha256", sha)
			}
		} else {
			w.segStart, w.segReplay = off, false
		}
	}
	switch {
	case w.segReplay:
		return w.replay[0].end, nil
	case len(w.replay) > 0:
		return w.replay[0].start, nil
	}
	return math.MaxInt64, nil
}

// closeSegment seals the open blocks as the chunks of one segment: a new
// one is recorded first (when it has rows), a replayed one keeps its
// recorded offsets and module. A segment whose recording fails (the member
// was fenced, or ctx ended) is never sent: its blocks are dropped and its
// records stay uncommitted.
func (w *partitionWorker) closeSegment(ctx context.Context) error {
	if w.segStart < 0 {
		w.openedAt = time.Time{}
		return nil
	}
	seg := segment{start: w.segStart, end: w.lastOff + 1, sha: w.mv.module.SHA256}
	replayed := w.segReplay
	if replayed {
		seg = w.replay[0]
		w.replay = w.replay[1:]
	}
	w.segStart, w.segReplay = -1, false
	rows := 0
	for _, b := range w.blocks {
		rows += b.Rows()
	}
	if rows > 0 && !replayed {
		if err := w.p.record(ctx, w.tp, w.acks, seg, w.acks.batchFirst(seg.start)); err != nil {
			w.dropBlocks()
			if ctx.Err() == nil {
				w.p.log.Error("exactly-once: segment not recorded; its rows are dropped and its records stay uncommitted",
					"partition", w.tp.String(), "start", seg.start, "end", seg.end, "rows", rows, "err", err)
			}
			return fmt.Errorf("partition %s: %w", w.tp, err)
		}
	}
	if replayed {
		w.p.eo.replayed.Add(1)
	}
	id := seg.id(w.tp)
	for i := range w.blocks {
		if w.blocks[i].Rows() == 0 && len(w.holders[i]) == 0 {
			continue
		}
		if err := w.seal(ctx, i, id); err != nil {
			return err
		}
	}
	w.openedAt = time.Time{}
	return nil
}

// openBytesMax is the encoded size of the worker's largest open block.
func (w *partitionWorker) openBytesMax() int {
	n := 0
	for _, b := range w.blocks {
		n = max(n, b.Size())
	}
	return n
}

// dropBlocks empties the open blocks without sending them: the batches
// holding their rows are never released, so their offsets are never
// committed.
func (w *partitionWorker) dropBlocks() {
	for i := range w.blocks {
		w.reopen(i)
	}
	w.segStart, w.segReplay = -1, false
	w.openedAt = time.Time{}
}

// dropUnfinishedReplay gives up, as the worker stops, a replayed segment
// whose last records it has not transformed: the segment goes in whole or
// not at all, so its rows are dropped, and it stays recorded for the
// partition's next owner. The partition's batches are abandoned, so that a
// revoke does not wait for rows that will never be sent; what they hold
// stays uncommitted and is replayed, and inserts of earlier segments that
// land meanwhile are dropped as repeats by the next owner's.
func (w *partitionWorker) dropUnfinishedReplay() {
	if !w.segReplay {
		return
	}
	w.p.log.Info("exactly-once: stopping in the middle of a replayed segment; it stays recorded for the partition's next owner",
		"partition", w.tp.String(), "start", w.replay[0].start, "end", w.replay[0].end)
	w.dropBlocks()
	w.acks.abandon()
}
