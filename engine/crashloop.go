package engine

import "time"

// crashLoopWindow is how far back the crash-loop policy counts: a failure
// or failed call exactly this old still counts.
const crashLoopWindow = time.Minute

// crashLoop is a partition worker's account of its module's recent
// failures, for the crash-loop policy (module.max_traps_per_minute): it
// decides when the partition cools down; the worker does the cooling. The
// zero value is ready. A worker owns its crashLoop: it is not safe for
// concurrent use.
type crashLoop struct {
	failures    []time.Time  // poison records and instances that would not start
	failedCalls []failedCall // every failed call, bisection's included
}

// failedCall is one call into the module that failed.
type failedCall struct {
	at   time.Time
	took time.Duration
}

// moduleFailed counts a failure of the module at now and returns the
// failures of the last minute; coolDown is true when they are more than
// maxFailures.
func (c *crashLoop) moduleFailed(now time.Time, maxFailures int) (failures int, coolDown bool) {
	c.failures = append(c.failures, now)
	for len(c.failures) > 0 && now.Sub(c.failures[0]) > crashLoopWindow {
		c.failures = c.failures[1:]
	}
	return len(c.failures), len(c.failures) > maxFailures
}

// callFailed counts a call that failed at now after took and returns the
// time the failed calls of the last minute took together; coolDown is true
// when that is more than maxFailures+1 calls that each ran to the
// deadline. Bisection makes several failed calls per poison record, which
// do not count as failures of their own; this bound is what stops a module
// that costs too much while failing (one that loops on every record, say).
func (c *crashLoop) callFailed(now time.Time, took time.Duration, maxFailures int, deadline time.Duration) (total time.Duration, coolDown bool) {
	c.failedCalls = append(c.failedCalls, failedCall{at: now, took: took})
	n := 0
	for _, f := range c.failedCalls {
		if now.Sub(f.at) <= crashLoopWindow {
			c.failedCalls[n] = f
			n++
			total += f.took
		}
	}
	c.failedCalls = c.failedCalls[:n]
	return total, total > time.Duration(maxFailures+1)*deadline
}

// reset forgets every failure and failed call: after a cool-down, and when
// the worker changes to another module version.
func (c *crashLoop) reset() {
	c.failures = c.failures[:0]
	c.failedCalls = c.failedCalls[:0]
}
