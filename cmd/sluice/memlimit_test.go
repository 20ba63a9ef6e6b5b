package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryLimitFollowsModules: the runtime's limit is memory_limit less
// the modules' memory, set only when it changes, never below half of
// memory_limit, with one warning each time the modules pass that half.
func TestMemoryLimitFollowsModules(t *testing.T) {
	const mib = 1 << 20
	var outside int64
	var set []int64
	var logs bytes.Buffer
	m := &memoryLimit{
		budget:  448 * mib,
		outside: func() int64 { return outside },
		set:     func(v int64) int64 { set = append(set, v); return 0 },
		log:     slog.New(slog.NewTextHandler(&logs, nil)),
	}
	steps := []struct {
		outside int64
		want    int64 // the limit after the update
	}{
		{0, 448 * mib},
		{0, 448 * mib},
		{80 * mib, 368 * mib},
		{80 * mib, 368 * mib},
		{300 * mib, 224 * mib}, // over half: the floor, and a warning
		{400 * mib, 224 * mib}, // still over: no second warning
		{100 * mib, 348 * mib},
		{224 * mib, 224 * mib}, // exactly half: not over
		{225 * mib, 224 * mib}, // over again: a second warning
		{0, 448 * mib},
	}
	for i, s := range steps {
		outside = s.outside
		m.update()
		if m.last != s.want {
			t.Fatalf("step %d: %d MiB outside the heap: limit %d MiB, want %d MiB", i, s.outside/mib, m.last/mib, s.want/mib)
		}
	}
	wantSet := []int64{448 * mib, 368 * mib, 224 * mib, 348 * mib, 224 * mib, 448 * mib}
	if !slices.Equal(set, wantSet) {
		t.Errorf("limits set %v, want %v (once per change)", set, wantSet)
	}
	if n := strings.Count(logs.String(), "over half of memory_limit"); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "modules_bytes=314572800") {
		t.Errorf("the warning does not give the modules' memory:\n%s", logs.String())
	}
}

// TestMemoryLimitRun: run updates the limit at each tick, as the modules'
// memory changes between ticks, and returns when its context ends.
func TestMemoryLimitRun(t *testing.T) {
	var outside atomic.Int64
	var mu sync.Mutex
	var set []int64
	m := &memoryLimit{
		budget:  1000,
		outside: outside.Load,
		set:     func(v int64) int64 { mu.Lock(); set = append(set, v); mu.Unlock(); return 0 },
		log:     slog.New(slog.DiscardHandler),
	}
	ctx, cancel := context.WithCancel(context.Background())
	tick := make(chan time.Time) // unbuffered: a send returns once run has taken the tick
	done := make(chan struct{})
	go func() { m.run(ctx, tick); close(done) }()
	send := func() {
		select {
		case tick <- time.Time{}:
		case <-done:
			t.Fatal("run returned before its context ended")
		}
	}
	for _, o := range []int64{100, 300, 300} {
		outside.Store(o)
		send()
		// Taken only once the update of the tick before is done, so the
		// next Store does not race it (an update that reads the same
		// value sets nothing).
		send()
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if want := []int64{900, 700}; !slices.Equal(set, want) {
		t.Errorf("limits set %v, want %v", set, want)
	}
}
