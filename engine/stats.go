package engine

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// stats are the pipeline's counters.
type stats struct {
	recordsIn, rowsOut, recordsErrored, deadLettered, traps, instances atomic.Int64
	modulePauses                                                       atomic.Int64
}

// Stats is a snapshot of the pipeline's counters.
type Stats struct {
	RecordsIn, RowsOut, RecordsErrored, DeadLettered, Traps, Instances int64
	// ModulePauses counts cool-downs of partitions whose module kept
	// failing.
	ModulePauses                     int64
	InflightBytes, PeakInflightBytes int64
	Pauses, Resumes                  int64
	// Exactly-once delivery: segments recorded before their inserts,
	// segments of an earlier owner rebuilt, and commits refused because
	// this member had been fenced.
	SegmentsRecorded, SegmentsReplayed, CommitsFenced int64
	Sink                                              clickhouse.Stats
}

// Stats returns the pipeline's counters.
func (p *Pipeline) Stats() Stats {
	var recorded, replayed, fenced int64
	if p.eo != nil {
		recorded, replayed, fenced = p.eo.recorded.Load(), p.eo.replayed.Load(), p.eo.fenced.Load()
	}
	return Stats{
		SegmentsRecorded: recorded, SegmentsReplayed: replayed, CommitsFenced: fenced,
		RecordsIn: p.stats.recordsIn.Load(), RowsOut: p.stats.rowsOut.Load(),
		RecordsErrored: p.stats.recordsErrored.Load(),
		DeadLettered:   p.stats.deadLettered.Load(), Traps: p.stats.traps.Load(),
		Instances:         p.stats.instances.Load(),
		ModulePauses:      p.stats.modulePauses.Load(),
		InflightBytes:     p.sumFlow(func(f *flowControl) int64 { return f.inflight.Load() }),
		PeakInflightBytes: p.sumFlow(func(f *flowControl) int64 { return f.peak.Load() }),
		Pauses:            p.sumFlow(func(f *flowControl) int64 { return f.pauses.Load() }),
		Resumes:           p.sumFlow(func(f *flowControl) int64 { return f.resumes.Load() }),
		Sink:              p.sink.Stats(),
	}
}
