package engine

import (
	"testing"
	"time"
)

// crashEvent is one event of a crash-loop test, at after the start: a
// failure of the module, a failed call that took took, or a reset (a
// cool-down ended, the module version changed); and what the policy
// answers: the failures or the failed-call time of the last minute, and
// whether the partition cools down.
type crashEvent struct {
	at   time.Duration
	kind string // "failure", "call" or "reset"
	took time.Duration

	failures int           // for "failure"
	total    time.Duration // for "call"
	cool     bool
}

// TestCrashLoopPolicy: a partition cools down once its module fails more
// than max_traps_per_minute times within a minute, or once its failed
// calls of the last minute took longer than max_traps_per_minute+1 calls
// that each ran to the deadline; failures older than a minute leave the
// count, and a reset forgets them all.
func TestCrashLoopPolicy(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name        string
		maxFailures int
		deadline    time.Duration
		events      []crashEvent
	}{
		{"budget exceeded by count", 2, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1},
			{at: 1 * s, kind: "failure", failures: 2},
			{at: 2 * s, kind: "failure", failures: 3, cool: true},
		}},
		{"no failure allowed", 0, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1, cool: true},
		}},
		{"failures slide out of the window", 2, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1},
			{at: 30 * s, kind: "failure", failures: 2},
			{at: 61 * s, kind: "failure", failures: 2}, // the first is 61 s old
			{at: 62 * s, kind: "failure", failures: 3, cool: true},
		}},
		{"a failure exactly a minute old still counts", 1, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1},
			{at: time.Minute, kind: "failure", failures: 2, cool: true},
		}},
		{"a failure just over a minute old does not", 1, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1},
			{at: time.Minute + time.Nanosecond, kind: "failure", failures: 1},
		}},
		{"budget exceeded by failed-call time", 2, s, []crashEvent{
			{at: 0, kind: "call", took: s, total: s},
			{at: 1 * s, kind: "call", took: s, total: 2 * s},
			{at: 2 * s, kind: "call", took: s, total: 3 * s}, // (2+1) × 1 s: at the budget, not over
			{at: 3 * s, kind: "call", took: time.Millisecond, total: 3*s + time.Millisecond, cool: true},
		}},
		{"one call longer than the budget", 0, 100 * time.Millisecond, []crashEvent{
			{at: 0, kind: "call", took: 101 * time.Millisecond, total: 101 * time.Millisecond, cool: true},
		}},
		{"failed calls slide out of the window", 1, s, []crashEvent{
			{at: 0, kind: "call", took: 1500 * time.Millisecond, total: 1500 * time.Millisecond},
			{at: 59 * s, kind: "call", took: 400 * time.Millisecond, total: 1900 * time.Millisecond},
			{at: 61 * s, kind: "call", took: 500 * time.Millisecond, total: 900 * time.Millisecond}, // the first left
			{at: 62 * s, kind: "call", took: 1200 * time.Millisecond, total: 2100 * time.Millisecond, cool: true},
		}},
		{"bisection's quick failed calls stay under the time budget", 20, s, []crashEvent{
			{at: 0, kind: "call", took: 2 * time.Millisecond, total: 2 * time.Millisecond},
			{at: 1 * s, kind: "call", took: 2 * time.Millisecond, total: 4 * time.Millisecond},
			{at: 2 * s, kind: "call", took: 2 * time.Millisecond, total: 6 * time.Millisecond},
		}},
		{"failures and failed-call time are counted apart", 1, s, []crashEvent{
			{at: 0, kind: "call", took: 1500 * time.Millisecond, total: 1500 * time.Millisecond},
			{at: 1 * s, kind: "failure", failures: 1},
			{at: 2 * s, kind: "call", took: 400 * time.Millisecond, total: 1900 * time.Millisecond},
			{at: 3 * s, kind: "failure", failures: 2, cool: true},
		}},
		{"reset after a cool-down", 1, s, []crashEvent{
			{at: 0, kind: "failure", failures: 1},
			{at: 1 * s, kind: "call", took: 1900 * time.Millisecond, total: 1900 * time.Millisecond},
			{at: 2 * s, kind: "failure", failures: 2, cool: true},
			{at: 32 * s, kind: "reset"},
			{at: 33 * s, kind: "failure", failures: 1},
			{at: 34 * s, kind: "call", took: 200 * time.Millisecond, total: 200 * time.Millisecond},
			{at: 35 * s, kind: "failure", failures: 2, cool: true},
		}},
	}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c crashLoop
			for i, e := range tc.events {
				now := start.Add(e.at)
				switch e.kind {
				case "failure":
					n, cool := c.moduleFailed(now, tc.maxFailures)
					if n != e.failures || cool != e.cool {
						t.Errorf("event %d (failure at %v): %d failures, cool down %v; want %d, %v", i, e.at, n, cool, e.failures, e.cool)
					}
				case "call":
					total, cool := c.callFailed(now, e.took, tc.maxFailures, tc.deadline)
					if total != e.total || cool != e.cool {
						t.Errorf("event %d (call of %v at %v): failed calls took %v, cool down %v; want %v, %v", i, e.took, e.at, total, cool, e.total, e.cool)
					}
				case "reset":
					c.reset()
				default:
					t.Fatalf("event %d: unknown kind %q", i, e.kind)
				}
			}
		})
	}
}

// TestCrashLoopKeepsOnlyTheWindow: a module that fails steadily for an
// hour keeps at most a minute of failures and calls, not an hour's.
func TestCrashLoopKeepsOnlyTheWindow(t *testing.T) {
	var c crashLoop
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range 3600 {
		now := start.Add(time.Duration(i) * time.Second)
		c.moduleFailed(now, 1<<30)
		c.callFailed(now, time.Millisecond, 1<<30, time.Second)
	}
	if len(c.failures) != 61 || len(c.failedCalls) != 61 {
		t.Errorf("kept %d failures and %d failed calls, want the 61 of the last minute (both ends count)", len(c.failures), len(c.failedCalls))
	}
}
