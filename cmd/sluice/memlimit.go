package main

import (
	"context"
	"log/slog"
	"time"
)

// Why follow the modules' memory? memory_limit is the process's budget,
// but the Go runtime's soft limit sees only the Go heap and the runtime's
// own memory. Each module instance's linear memory is a mapping of its own
// (wasmhost.MappedMemoryBytes), so with the whole budget as the runtime's
// limit the process settled at the budget plus every instance's memory:
// the Go module's full drain, eight instances of about 10 MiB each,
// peaked at 540 MiB with a limit of 448. So the runtime gets the budget
// less what the instances have mapped, checked every memoryLimitEvery.

// memoryLimitEvery is how often the runtime's limit follows the modules'
// memory. An instance grows in pages, mostly in its first calls; between
// two checks the heap can pass its share by what it allocated meanwhile,
// as it can pass any soft limit.
const memoryLimitEvery = 100 * time.Millisecond

// memoryLimit holds the Go runtime's soft memory limit at budget less the
// memory outside the Go heap, and never below half of budget: past that
// the collector would run all the time for the modules' sake, so it warns
// instead, once each time the modules' memory passes half of the budget.
type memoryLimit struct {
	budget  int64
	outside func() int64      // the bytes outside the Go heap
	set     func(int64) int64 // runtime/debug.SetMemoryLimit
	log     *slog.Logger
	last    int64 // the limit last set; 0 before the first update
	over    bool  // the modules' memory is over half of budget
}

// update sets the runtime's limit from the memory outside the heap now.
func (m *memoryLimit) update() {
	outside := m.outside()
	limit, floor := m.budget-outside, m.budget/2
	over := limit < floor
	if over {
		limit = floor
		if !m.over {
			m.log.Warn("the modules' linear memory is over half of memory_limit; the Go heap keeps the other half, so the process may pass memory_limit: raise memory_limit, or lower module.limits.memory_bytes or the partitions this process consumes",
				"modules_bytes", outside, "memory_limit", m.budget)
		}
	}
	m.over = over
	if limit != m.last {
		m.set(limit)
		m.last = limit
	}
}

// run updates the limit at every tick until ctx ends.
func (m *memoryLimit) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			m.update()
		}
	}
}
