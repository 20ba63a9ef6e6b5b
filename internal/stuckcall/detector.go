package stuckcall

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/wasmhost"
)

// Observation is one look at the watched process.
type Observation struct {
	// Now is CLOCK_MONOTONIC (wasmhost.MonotonicNow), the journal's clock.
	Now int64
	// Stopped is set while the process is stopped (SIGSTOP, a debugger):
	// time it spends stopped counts against no call.
	Stopped bool
	// CPU is the process's CPU time so far (user and system).
	CPU time.Duration
	// Journal is what its call journal holds.
	Journal *wasmhost.JournalSnapshot
}

// Detector decides when a process is stuck and whom to blame. The zero
// value is not usable: set Grace.
//
// A call is stuck once it has run Grace past its deadline: the deadline's
// own watchdog, inside the process, interrupts a call at its deadline, so
// a call still running then is one the interrupt cannot reach. But the
// guest spinning in it also blocks the Go runtime's next stop-the-world,
// which stops every goroutine, the heartbeat and every other call in
// progress included; from then on those calls age as well without being
// at fault. So the Detector blames a call only on evidence that holds in
// a frozen process:
//
//   - proven: the call was past its deadline for Proof while the heartbeat
//     beat without a gap (the interrupt had its chance and failed);
//   - the only module: the process froze for Grace while burning CPU (no
//     heartbeat, and no call started or ended: a stop-the-world waiting on
//     a spinning guest; a stalled or starved process burns none, or still
//     ends and starts calls) and every call in progress was of one module
//     version: only a guest can block a stop-the-world;
//   - repeated: the process froze again with several versions' calls in
//     progress, and exactly one of them was also in progress at each of
//     the latest freezes whose verdicts were left undecided (Previous).
//
// Whatever the evidence, it kills a process frozen so with a call in
// progress (nothing else would end it), or one with a proven call Grace
// past its deadline; without a culprit, the verdict lists the suspects
// and quarantines nothing. A process frozen with no call in progress is
// left alone: no guest holds it.
type Detector struct {
	// Grace is how long past its deadline a call, and how long without a
	// heartbeat a process burning CPU, may go before the process is killed.
	Grace time.Duration
	// Proof is how far past its deadline a call must have been, with the
	// heartbeat still beating, to be blamed alone. Default min(Grace, 2s):
	// a call the interrupt reaches ends within a few milliseconds of it.
	Proof time.Duration
	// MinSpin is the share of a CPU the process must burn, from its last
	// heartbeat on, to count as frozen by a spinning guest rather than
	// stalled. Default 0.02 (a spinning thread on a machine 50 times
	// oversubscribed still burns that).
	MinSpin float64
	// Previous are earlier verdicts left undecided (suspects, no
	// culprit), newest first.
	Previous []Verdict

	started bool
	lastNow int64
	// lastStopped: the process was stopped at the last observation.
	lastStopped bool
	// stopped are the intervals of CLOCK_MONOTONIC the process spent
	// stopped (as far as the observations tell).
	stopped []interval
	// beat is the last heartbeat seen, when it was seen and the CPU then.
	beat     int64
	beatSeen int64
	beatCPU  time.Duration
	// aliveSince is the first heartbeat of the current run of beats
	// without a gap of beatGap.
	aliveSince int64
	// inProgress is a digest of the calls in progress; callsSeen is when
	// it last changed and callsCPU the CPU then: a call that starts or ends
	// is progress, as a heartbeat is.
	inProgress uint64
	callsSeen  int64
	callsCPU   time.Duration
}

// beatGap is the longest gap between two heartbeats (as the watcher sees
// them; the process beats every wasmhost.HeartbeatInterval) within one
// run of beats.
const beatGap = int64(time.Second)

type interval struct{ from, to int64 }

func (d *Detector) proof() time.Duration {
	if d.Proof > 0 {
		return d.Proof
	}
	return min(d.Grace, 2*time.Second)
}

func (d *Detector) minSpin() float64 {
	if d.MinSpin > 0 {
		return d.MinSpin
	}
	return 0.02
}

// ran is how long the process ran (was not stopped) from a to b.
func (d *Detector) ran(a, b int64) time.Duration {
	if b <= a {
		return 0
	}
	span := b - a
	for _, iv := range d.stopped {
		lo, hi := max(iv.from, a), min(iv.to, b)
		if hi > lo {
			span -= hi - lo
		}
	}
	return time.Duration(span)
}

// account records the stopped time since the last observation and the
// heartbeat.
func (d *Detector) account(o Observation) {
	if !d.started {
		d.started = true
		d.lastNow = o.Now
		d.beat, d.beatSeen, d.beatCPU = o.Journal.Heartbeat, o.Now, o.CPU
		d.aliveSince = o.Journal.Heartbeat
		d.inProgress, d.callsSeen, d.callsCPU = digest(o.Journal.Calls), o.Now, o.CPU
	}
	if dg := digest(o.Journal.Calls); dg != d.inProgress {
		d.inProgress, d.callsSeen, d.callsCPU = dg, o.Now, o.CPU
	}
	if (o.Stopped || d.lastStopped) && o.Now > d.lastNow {
		// Stopped at either end: count the whole gap as stopped, which
		// errs towards not killing.
		if n := len(d.stopped); n > 0 && d.stopped[n-1].to == d.lastNow {
			d.stopped[n-1].to = o.Now
		} else {
			d.stopped = append(d.stopped, interval{d.lastNow, o.Now})
		}
	}
	d.lastNow, d.lastStopped = o.Now, o.Stopped
	if hb := o.Journal.Heartbeat; hb != d.beat {
		if hb-d.beat > beatGap {
			d.aliveSince = hb // it resumes after a gap
		}
		d.beat, d.beatSeen, d.beatCPU = hb, o.Now, o.CPU
	}
	// Keep the intervals that can still overlap a call or the heartbeat.
	oldest := min(d.aliveSince, o.Now)
	for _, c := range o.Journal.Calls {
		oldest = min(oldest, c.Start)
	}
	k := 0
	for k < len(d.stopped) && d.stopped[k].to < oldest {
		k++
	}
	d.stopped = d.stopped[k:]
}

// Observe takes one look and returns a verdict when the process must be
// killed, nil otherwise. Call it every HeartbeatInterval or so.
func (d *Detector) Observe(o Observation) *Verdict {
	d.account(o)
	if o.Stopped {
		return nil
	}
	j := o.Journal
	var overdue, proven []wasmhost.JournalCall
	for _, c := range j.Calls {
		if d.ran(c.Start, o.Now) > c.Deadline+d.Grace {
			overdue = append(overdue, c)
		}
		// Proven: past its deadline, with the process beating all along,
		// for Proof. (Right after a stall the process beats again before
		// the interrupt has ended the calls the stall made overdue.)
		if due := c.Start + int64(c.Deadline); d.ran(max(due, d.aliveSince), d.beat) > d.proof() {
			proven = append(proven, c)
		}
	}
	// Frozen: no heartbeat and no call started or ended for Grace, with
	// a call in progress, while burning CPU since.
	stale := min(d.ran(j.Heartbeat, o.Now), d.ran(d.callsSeen, o.Now))
	since, cpu0 := d.beatSeen, d.beatCPU
	if d.callsSeen > since {
		since, cpu0 = d.callsSeen, d.callsCPU
	}
	spinning := false
	if window := d.ran(since, o.Now); window > 0 {
		spinning = float64(o.CPU-cpu0) >= d.minSpin()*float64(window)
	}
	frozen := stale > d.Grace && spinning && (len(j.Calls) > 0 || j.Unrecorded > 0)
	v := &Verdict{PID: j.PID}
	switch {
	case len(proven) > 0 && (len(overdue) > 0 || frozen):
		v.Culprits = d.calls(o, proven)
		c := v.Culprits[0]
		v.Reason = fmt.Sprintf("a call of module %s (sha256 %s) ran %v, past its %v deadline and the %v grace, and its deadline's interrupt did not stop it",
			c.Module, c.SHA256, c.Ran, c.Deadline, d.Grace)
	case frozen:
		v.Suspects = d.calls(o, j.Calls)
		why := fmt.Sprintf("the process made no progress for %v while burning CPU", stale.Round(time.Millisecond))
		switch keys := versions(v.Suspects); {
		case j.Unrecorded > 0:
			v.Reason = fmt.Sprintf("%s, with %d calls of %s in progress and %d instances the journal could not record: no culprit can be named",
				why, len(v.Suspects), strings.Join(keys, ", "), j.Unrecorded)
		case len(keys) == 1:
			v.Culprits, v.Suspects = v.Suspects, nil
			v.Reason = fmt.Sprintf("%s, with only module %s in progress: a call of it could not be interrupted", why, keys[0])
		default:
			if key, prev, ok := d.repeated(keys); ok {
				v.Culprits = keep(v.Suspects, key)
				v.Suspects = nil
				v.Reason = fmt.Sprintf("%s, with %s in progress; only %s was also in progress at each freeze since %s",
					why, strings.Join(keys, ", "), key, prev.DetectedAt.Format(time.RFC3339))
			} else {
				v.Reason = fmt.Sprintf("%s, with %s in progress: no culprit can be named yet (a second freeze with one of them in progress names it)",
					why, strings.Join(keys, ", "))
			}
		}
	default:
		return nil
	}
	v.DetectedAt = j.Wall(o.Now).UTC()
	return v
}

// calls describes the journal's calls for a verdict.
func (d *Detector) calls(o Observation, cs []wasmhost.JournalCall) []Call {
	out := make([]Call, 0, len(cs))
	for _, c := range cs {
		out = append(out, Call{Module: c.Module, SHA256: c.SHA256, Deadline: Duration(c.Deadline),
			StartedAt: o.Journal.Wall(c.Start).UTC(), Ran: Duration(d.ran(c.Start, o.Now).Round(time.Millisecond))})
	}
	sort.Slice(out, func(i, k int) bool { return out[i].StartedAt.Before(out[k].StartedAt) })
	return out
}

// key names a module version: its module name and sha256.
func (c Call) key() string { return c.Module + "@" + c.SHA256 }

// digest sums up the calls in progress (slot and start of each), so that
// a call that starts or ends changes it.
func digest(cs []wasmhost.JournalCall) uint64 {
	h := uint64(len(cs))
	for _, c := range cs {
		h = h*1099511628211 ^ uint64(c.Slot)
		h = h*1099511628211 ^ uint64(c.Start)
	}
	return h
}

// versions lists the distinct module versions of calls, sorted.
func versions(calls []Call) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range calls {
		if k := c.key(); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// keep returns the calls of one version.
func keep(calls []Call, key string) []Call {
	var out []Call
	for _, c := range calls {
		if c.key() == key {
			out = append(out, c)
		}
	}
	return out
}

// repeated narrows keys down with the earlier undecided verdicts, newest
// first: the stuck version was in progress at every one of these freezes,
// a version whose calls were merely parked there is seldom in progress at
// each. It stops at a verdict that shares none of the candidates (another
// culprit's), and names a version once one candidate remains.
func (d *Detector) repeated(keys []string) (string, Verdict, bool) {
	cand := map[string]bool{}
	for _, k := range keys {
		cand[k] = true
	}
	for _, prev := range d.Previous {
		if len(prev.Culprits) > 0 {
			continue
		}
		was := map[string]bool{}
		for _, c := range prev.Suspects {
			was[c.key()] = true
		}
		next := map[string]bool{}
		for k := range cand {
			if was[k] {
				next[k] = true
			}
		}
		if len(next) == 0 {
			break
		}
		cand = next
		if len(cand) == 1 {
			for k := range cand {
				return k, prev, true
			}
		}
	}
	return "", Verdict{}, false
}

// PostMortem judges the journal of a process that died without closing it
// and without a verdict (killed by something else: a liveness probe, the
// kernel's OOM killer, an operator): a call that had run Grace past its
// deadline by the process's last heartbeat was stuck while the process
// still ran, and is named. It returns nil when no call was.
func PostMortem(s *wasmhost.JournalSnapshot, grace time.Duration) *Verdict {
	var stuck []wasmhost.JournalCall
	for _, c := range s.Calls {
		if time.Duration(s.Heartbeat-c.Start) > c.Deadline+grace {
			stuck = append(stuck, c)
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	d := &Detector{Grace: grace}
	v := &Verdict{DetectedAt: s.Wall(s.Heartbeat).UTC(), PID: s.PID,
		Culprits: d.calls(Observation{Now: s.Heartbeat, Journal: s}, stuck)}
	c := v.Culprits[0]
	v.Reason = fmt.Sprintf("the process died with a call of module %s (sha256 %s) running %v, past its %v deadline and the %v grace, at its last heartbeat",
		c.Module, c.SHA256, c.Ran, c.Deadline, grace)
	return v
}
