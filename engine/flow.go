package engine

import (
	"sync"
	"sync/atomic"
)

// flowControl keeps the bytes between poll and commit under a budget: it
// pauses fetching when the budget is reached or the sink's queue is full, and
// resumes when in-flight bytes fall below the low mark and the queue has
// room. The poll loop never blocks on it.
type flowControl struct {
	high, low int64
	inflight  atomic.Int64
	peak      atomic.Int64

	queueFull func() bool
	pause     func()
	resume    func()

	mu      sync.Mutex
	paused  bool
	pauses  atomic.Int64
	resumes atomic.Int64
}

func (f *flowControl) add(n int64) {
	v := f.inflight.Add(n)
	for {
		p := f.peak.Load()
		if v <= p || f.peak.CompareAndSwap(p, v) {
			break
		}
	}
}

// check pauses or resumes fetching as the state demands.
func (f *flowControl) check() {
	in := f.inflight.Load()
	full := f.queueFull != nil && f.queueFull()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.paused && (in >= f.high || full):
		f.paused = true
		f.pauses.Add(1)
		f.pause()
	case f.paused && in <= f.low && !full:
		f.paused = false
		f.resumes.Add(1)
		f.resume()
	}
}

func (f *flowControl) isPaused() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paused
}

// checkFlow pauses or resumes each route's topics as its budget demands.
func (p *Pipeline) checkFlow() {
	for _, r := range p.routes {
		r.flow.check()
	}
}

// sumFlow adds up a flow control figure over the routes. A sum of peaks
// bounds the peak of the sum.
func (p *Pipeline) sumFlow(f func(*flowControl) int64) int64 {
	var n int64
	for _, r := range p.routes {
		n += f(r.flow)
	}
	return n
}
