package main

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
)

// sample is one observation during an arm, every sampleInterval.
type sample struct {
	T      float64 `json:"t"`      // seconds since the arm started
	Landed int64   `json:"landed"` // rows in the target table
	CPU    float64 `json:"cpu"`    // CPU seconds of the system under test so far
	CHCPU  float64 `json:"ch_cpu"` // of clickhouse-server
	KCPU   float64 `json:"kafka_cpu"`
	RSSKB  int64   `json:"rss_kb"` // resident set of the system under test's process, when it has its own
}

const sampleInterval = 200 * time.Millisecond

// watch samples table until expected rows have landed and the pipeline
// has quiesced (the same count for quietFor and, when done is not nil,
// done reports true), or until nothing lands for stallFor. pid is the
// process whose CPU counts as the system under test (sluice, or
// clickhouse-server for the Kafka-engine arm).
type watchSpec struct {
	table    string
	expected int64
	pid      int
	ownRSS   bool                           // pid is sluice: sample its RSS
	done     func(ctx context.Context) bool // e.g. nothing left to commit
	alive    func() error                   // the system under test is still running
	progress func(s sample, expected int64) // optional
	start    time.Time
	quietFor time.Duration
	stallFor time.Duration
}

type watchResult struct {
	samples  []sample
	complete bool // every expected row landed
	tDone    float64
	// chThreads is the server's CPU from the start to the sample where
	// every row had landed, by thread name (threadsBetween).
	chThreads map[string]float64
}

func (e *env) watch(ctx context.Context, w watchSpec) (watchResult, error) {
	var r watchResult
	cpu0, _ := cpuSeconds(w.pid)
	ch0, _ := cpuSeconds(e.chPID)
	chThreads0, _ := testinfra.ThreadCPUTimes(e.chPID)
	k0, _ := cpuSeconds(e.kafkaPID)
	lastChange, lastLanded := time.Now(), int64(-1)
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		n, err := e.landed(ctx, w.table)
		if err != nil {
			return r, err
		}
		s := sample{T: time.Since(w.start).Seconds(), Landed: n}
		c, _ := cpuSeconds(w.pid)
		s.CPU = c - cpu0
		c, _ = cpuSeconds(e.chPID)
		s.CHCPU = c - ch0
		c, _ = cpuSeconds(e.kafkaPID)
		s.KCPU = c - k0
		if w.ownRSS {
			s.RSSKB, _ = statusKB(w.pid, "VmRSS")
		}
		r.samples = append(r.samples, s)
		if n >= w.expected && !r.complete {
			r.complete, r.tDone = true, s.T
			if t, err := testinfra.ThreadCPUTimes(e.chPID); err == nil && chThreads0 != nil {
				r.chThreads = threadsBetween(chThreads0, t, s.CHCPU)
			}
		}
		if n != lastLanded {
			lastLanded, lastChange = n, time.Now()
		}
		if w.progress != nil && time.Since(lastLog) > 5*time.Second {
			w.progress(s, w.expected)
			lastLog = time.Now()
		}
		quiet := time.Since(lastChange)
		if r.complete && quiet >= w.quietFor && (w.done == nil || w.done(ctx)) {
			return r, nil
		}
		if !r.complete && quiet >= w.stallFor {
			return r, fmt.Errorf("%d of %d rows landed; nothing more for %s", n, w.expected, w.stallFor)
		}
		if w.alive != nil {
			if err := w.alive(); err != nil {
				return r, err
			}
		}
	}
}

// at returns the first sample at or past rows landed.
func at(samples []sample, rows int64) (sample, bool) {
	for _, s := range samples {
		if s.Landed >= rows {
			return s, true
		}
	}
	return sample{}, false
}
