package wasmhost

import (
	"context"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
)

// watchTick is how often the watchdog looks at the calls in progress: a
// call is interrupted at most this long after its deadline or its
// context's end.
const watchTick = 10 * time.Millisecond

// interruptCause says why the watchdog interrupted a call.
type interruptCause uint8

const (
	causeNone interruptCause = iota
	causeDeadline
	causeContext
)

// callWatch is an instance's part of the watchdog: the call in progress,
// if any. Arming and disarming it costs two uncontended locks and a clock
// read, with no timer, goroutine or allocation per call.
type callWatch struct {
	interrupt api.MutableGlobal // nil for an uninstrumented module
	budget    api.MutableGlobal // set to 1 so that the guest checks interrupt at once
	wake      chan struct{}     // buffered 1: ends a guest's sleep

	// journal records the call in the process's call journal, for the
	// stuck-call watcher outside the process (see journal.go).
	journal journalEntry

	mu     sync.Mutex
	armed  bool
	start  time.Time       // of the call
	ended  time.Time       // when the last call ended
	due    time.Time       // Limits.Deadline from the call's start
	ctx    context.Context // the call's context, while armed
	cause  interruptCause
	wakeBy time.Time // when a sleep must end: due, or the context's deadline if earlier
}

// arm starts watching a call of at most d under ctx.
func (w *callWatch) arm(ctx context.Context, d time.Duration) {
	if w.interrupt == nil {
		if w.journal.slot != nil {
			w.journal.begin(time.Now())
		}
		return
	}
	now := time.Now()
	w.journal.begin(now)
	due := now.Add(d)
	wakeBy := due
	if dl, ok := ctx.Deadline(); ok && dl.Before(due) {
		wakeBy = dl
	}
	if ctx.Done() == nil {
		ctx = nil // never ends: nothing to check
	}
	w.mu.Lock()
	w.armed, w.start, w.due, w.wakeBy, w.ctx, w.cause = true, now, due, wakeBy, ctx, causeNone
	w.mu.Unlock()
}

// interrupted reports whether the watchdog interrupted the call in
// progress: host functions stop their work then.
func (w *callWatch) interrupted() bool {
	if w.interrupt == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause != causeNone
}

// elapsed is how long the last call took (from arm to disarm).
func (w *callWatch) elapsed() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended.Sub(w.start)
}

// disarm stops watching and returns why the call was interrupted, if it
// was. When the call ended well although the interrupt fired, the global is
// cleared so that the next call starts clean.
func (w *callWatch) disarm(ok bool) interruptCause {
	w.journal.end()
	if w.interrupt == nil {
		return causeNone
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.ctx = false, nil
	cause := w.cause
	if cause != causeNone {
		w.ended = time.Now() // only a failed call's length is reported
	}
	if cause != causeNone && ok {
		w.interrupt.Set(0)
		w.cause = causeNone
		select {
		case <-w.wake:
		default:
		}
		return causeNone
	}
	return cause
}

// check interrupts the call if it is past its deadline or its context has
// ended. The watchdog goroutine calls it. The guest sees the interrupt at
// its next loop iteration or call (see package instrument); the watchdog
// can run while the guest spins because the guest yields to the Go
// scheduler every instrument.Budget iterations.
func (w *callWatch) check(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.cause != causeNone {
		return
	}
	switch {
	case w.ctx != nil && w.ctx.Err() != nil:
		w.cause = causeContext
	case !now.Before(w.due):
		w.cause = causeDeadline
	default:
		return
	}
	w.interrupt.Set(1)
	w.budget.Set(1)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watchdog is a Runtime's goroutine that interrupts guest code running past
// its deadline: every watchTick it checks each live instance's call. It
// starts with the first instance and ends with Runtime.Close.
type watchdog struct {
	mu      sync.Mutex
	calls   map[*callWatch]struct{}
	started bool
	stop    chan struct{}
	done    chan struct{}
}

func (d *watchdog) add(w *callWatch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.calls == nil {
		d.calls = map[*callWatch]struct{}{}
	}
	d.calls[w] = struct{}{}
	if !d.started {
		d.started = true
		d.stop, d.done = make(chan struct{}), make(chan struct{})
		go d.run()
	}
}

func (d *watchdog) remove(w *callWatch) {
	d.mu.Lock()
	delete(d.calls, w)
	d.mu.Unlock()
}

func (d *watchdog) run() {
	defer close(d.done)
	t := time.NewTicker(watchTick)
	defer t.Stop()
	var calls []*callWatch
	for {
		select {
		case <-d.stop:
			return
		case now := <-t.C:
			d.mu.Lock()
			calls = calls[:0]
			for w := range d.calls {
				calls = append(calls, w)
			}
			d.mu.Unlock()
			for _, w := range calls {
				w.check(now)
			}
			clear(calls)
		}
	}
}

// close stops the goroutine and waits for it.
func (d *watchdog) close() {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if started {
		close(d.stop)
		<-d.done
	}
}

// nanosleep is the instance's WASI sleep (poll_oneoff with a clock): it
// sleeps at most until the call's deadline and wakes when the watchdog
// fires, so that a sleeping guest reaches its next interrupt check in time.
func (in *Instance) nanosleep(ns int64) {
	w := &in.watch
	d := time.Duration(ns)
	if w.interrupt == nil {
		time.Sleep(min(d, in.lim.Deadline))
		return
	}
	w.mu.Lock()
	rem, cause := time.Until(w.wakeBy), w.cause
	w.mu.Unlock()
	if cause != causeNone {
		return
	}
	d = min(d, rem)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.wake:
	}
}
