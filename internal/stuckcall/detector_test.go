package stuckcall

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wasmhost"
)

const (
	step  = int64(100 * time.Millisecond) // the watcher's poll
	sec   = int64(time.Second)
	shaA  = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	shaB  = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	shaC  = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	grace = 2 * time.Second
)

// proc simulates the watched process for a Detector, a step at a time.
type proc struct {
	t       *testing.T
	d       *Detector
	now     int64
	cpu     time.Duration
	beat    int64
	calls   []wasmhost.JournalCall
	unrec   int64
	verdict *Verdict
	at      int64 // when the verdict came
}

func newProc(t *testing.T, d *Detector) *proc {
	return &proc{t: t, d: d, now: 1000 * sec, beat: 1000 * sec}
}

// call starts a call of module m (sha) with deadline dl now.
func (p *proc) call(slot int, m, sha string, dl time.Duration) {
	p.calls = append(p.calls, wasmhost.JournalCall{Slot: slot, Module: m, SHA256: sha, Start: p.now, Deadline: dl})
}

// end ends the call in slot.
func (p *proc) end(slot int) {
	for i, c := range p.calls {
		if c.Slot == slot {
			p.calls = append(p.calls[:i], p.calls[i+1:]...)
			return
		}
	}
}

// run advances n steps: beating (a running process), burning cpu CPU per
// step, stopped or not; it returns the first verdict.
func (p *proc) run(n int, beating bool, cpu float64, stopped bool) *Verdict {
	for range n {
		p.now += step
		if beating {
			p.beat = p.now
		}
		p.cpu += time.Duration(cpu * float64(step))
		snap := &wasmhost.JournalSnapshot{PID: 7, MonoBase: 0, WallBase: 0, Heartbeat: p.beat,
			Calls: append([]wasmhost.JournalCall(nil), p.calls...), Unrecorded: p.unrec}
		v := p.d.Observe(Observation{Now: p.now, Stopped: stopped, CPU: p.cpu, Journal: snap})
		if v != nil && p.verdict == nil {
			p.verdict, p.at = v, p.now
			return v
		}
	}
	return nil
}

func culprits(v *Verdict) string {
	var s []string
	for _, c := range v.Versions() {
		s = append(s, c.Module)
	}
	return strings.Join(s, ",")
}

// TestDetectorHealthy: calls that end within their deadline, a process
// that beats, stops (SIGSTOP) or stalls without burning CPU: never a
// verdict, however long.
func TestDetectorHealthy(t *testing.T) {
	p := newProc(t, &Detector{Grace: grace})
	for i := range 100 {
		p.call(i%3, "a/p", shaA, time.Second)
		if v := p.run(5, true, 0.5, false); v != nil {
			t.Fatalf("verdict for healthy calls: %+v", v)
		}
		p.end(i % 3)
	}
	p.call(0, "a/p", shaA, time.Second)
	if v := p.run(600, false, 0, true); v != nil {
		t.Fatalf("verdict for a process stopped for a minute: %+v", v)
	}
	if v := p.run(600, false, 0, false); v != nil {
		t.Fatalf("verdict for a stalled process that burns no CPU: %+v", v)
	}
	p.run(1, true, 0, false)
	p.end(0)
	if v := p.run(100, true, 1, false); v != nil {
		t.Fatalf("verdict after the stall: %+v", v)
	}
}

// TestDetectorProvenCall: a call past its deadline in a process that
// still beats is blamed alone, once Grace past the deadline, and not
// before; the calls in progress beside it are not.
func TestDetectorProvenCall(t *testing.T) {
	p := newProc(t, &Detector{Grace: grace})
	start := p.now
	p.call(0, "a/p", shaA, time.Second)
	for range 30 {
		p.call(1, "b/q", shaB, time.Second) // B's calls come and go
		if v := p.run(1, true, 1, false); v != nil {
			t.Fatalf("verdict after %v: %+v", time.Duration(p.now-start), v)
		}
		p.end(1)
	}
	p.call(1, "b/q", shaB, time.Second)
	v := p.run(100, true, 1, false)
	if v == nil {
		t.Fatal("no verdict")
	}
	if got := time.Duration(p.at - start); got <= time.Second+grace || got > time.Second+grace+time.Duration(step) {
		t.Errorf("verdict after %v, want just past 1s + %v", got, grace)
	}
	if culprits(v) != "a/p" || len(v.Suspects) != 0 || v.Culprits[0].SHA256 != shaA {
		t.Errorf("verdict %+v, want culprit a/p alone", v)
	}
	if !strings.Contains(v.Reason, "past its 1s deadline") {
		t.Errorf("reason %q", v.Reason)
	}
}

// TestDetectorFrozen: the process stops beating and burns CPU (a
// stop-the-world waiting on a spinning guest) before any call is past its
// deadline. With one version's calls in progress, that version is the
// culprit; with two, the verdict is undecided until a second freeze
// names the one in progress both times.
func TestDetectorFrozen(t *testing.T) {
	t.Run("one version", func(t *testing.T) {
		p := newProc(t, &Detector{Grace: grace})
		p.call(0, "a/p", shaA, 30*time.Second)
		p.call(1, "a/p", shaA, 30*time.Second)
		p.run(3, true, 1, false)
		freeze := p.now
		v := p.run(100, false, 0.3, false)
		if v == nil || culprits(v) != "a/p" || len(v.Culprits) != 2 {
			t.Fatalf("verdict %+v, want a/p's two calls", v)
		}
		if got := time.Duration(p.at - freeze); got <= grace || got > grace+2*time.Duration(step) {
			t.Errorf("verdict %v after the freeze, want just past %v", got, grace)
		}
	})
	t.Run("two versions, then again", func(t *testing.T) {
		p := newProc(t, &Detector{Grace: grace})
		p.call(0, "a/p", shaA, 30*time.Second)
		p.call(1, "b/q", shaB, 30*time.Second)
		p.run(2, true, 1, false)
		v := p.run(100, false, 1, false)
		if v == nil || len(v.Culprits) != 0 || len(v.Suspects) != 2 || !strings.Contains(v.Reason, "no culprit can be named yet") {
			t.Fatalf("verdict %+v, want undecided with two suspects", v)
		}
		// The restarted process freezes again with A's call and C's.
		v.DetectedAt = time.Unix(1000, 0)
		q := newProc(t, &Detector{Grace: grace, Previous: []Verdict{*v}})
		q.call(0, "c/r", shaC, 30*time.Second)
		q.call(1, "a/p", shaA, 30*time.Second)
		w := q.run(100, false, 1, false)
		if w == nil || culprits(w) != "a/p" || len(w.Suspects) != 0 {
			t.Fatalf("second verdict %+v, want a/p", w)
		}
	})
	t.Run("proven beside victims", func(t *testing.T) {
		p := newProc(t, &Detector{Grace: 5 * time.Second, Proof: time.Second})
		p.call(0, "a/p", shaA, time.Second)
		if v := p.run(25, true, 1, false); v != nil { // past its deadline by 1.5s while beating
			t.Fatalf("verdict before Grace: %+v", v)
		}
		p.call(1, "b/q", shaB, time.Second)
		v := p.run(100, false, 1, false)
		if v == nil || culprits(v) != "a/p" {
			t.Fatalf("verdict %+v, want a/p alone", v)
		}
	})
	t.Run("no call", func(t *testing.T) {
		// No guest holds a process with no call in progress: whatever
		// stalls it (an overloaded machine, a runtime thrashing at its
		// memory limit) is not for the watcher to end.
		p := newProc(t, &Detector{Grace: grace})
		if v := p.run(600, false, 1, false); v != nil {
			t.Fatalf("verdict %+v for a process with no call in progress", v)
		}
	})
	t.Run("calls come and go", func(t *testing.T) {
		// A process whose heartbeat stalls but whose calls still start
		// and end is starved, not frozen.
		p := newProc(t, &Detector{Grace: grace})
		for i := range 100 {
			p.call(i%4, "b/q", shaB, 30*time.Second)
			if v := p.run(1, false, 1, false); v != nil {
				t.Fatalf("verdict %+v while calls start and end", v)
			}
			p.end(i % 4)
		}
		p.call(0, "b/q", shaB, 30*time.Second)
		last := p.now
		v := p.run(100, false, 1, false)
		if v == nil || culprits(v) != "b/q" {
			t.Fatalf("verdict %+v once the calls stopped changing", v)
		}
		if got := time.Duration(p.at - last); got <= grace || got > grace+2*time.Duration(step) {
			t.Errorf("verdict %v after the last change, want just past %v", got, grace)
		}
	})
	t.Run("unrecorded instances", func(t *testing.T) {
		p := newProc(t, &Detector{Grace: grace})
		p.unrec = 1
		p.call(0, "a/p", shaA, 30*time.Second)
		v := p.run(100, false, 1, false)
		if v == nil || len(v.Culprits) != 0 || len(v.Suspects) != 1 || !strings.Contains(v.Reason, "could not record") {
			t.Fatalf("verdict %+v, want a kill naming no culprit", v)
		}
	})
}

// TestDetectorStoppedTimeDoesNotCount: a process stopped (SIGSTOP) in the
// middle of a stuck call is judged on the time it ran: the verdict comes
// Grace past the deadline in running time, the stop added to it.
func TestDetectorStoppedTimeDoesNotCount(t *testing.T) {
	p := newProc(t, &Detector{Grace: grace})
	start := p.now
	p.call(0, "a/p", shaA, time.Second)
	p.run(5, true, 1, false)
	if v := p.run(300, false, 0, true); v != nil {
		t.Fatalf("verdict while stopped: %+v", v)
	}
	v := p.run(100, true, 1, false)
	if v == nil || culprits(v) != "a/p" {
		t.Fatalf("verdict %+v", v)
	}
	if ran := time.Duration(v.Culprits[0].Ran); ran <= time.Second+grace || ran > time.Second+grace+3*time.Duration(step) {
		t.Errorf("ran %v, want just past 1s + %v (the 30s stopped not counted; %v in all)", ran, grace, time.Duration(p.at-start))
	}
}

// TestDetectorModel drives the Detector with random processes: healthy
// tenants whose calls come and go, stops, stalls without CPU, and, in
// most runs, one version whose call never ends and freezes the process at
// a random moment (a garbage collection's stop-the-world). It checks
// that a process is killed only when a call is stuck, soon enough, and
// that a culprit named is always the stuck version; an undecided verdict
// is kept for the next process (restarted, the stuck version runs again),
// and the culprit must be named within a few restarts.
func TestDetectorModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("STUCKCALL_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	runs := 1000
	if testing.Short() {
		runs = 100
	}
	const lives = 40
	var processes, killed int
	restarts := map[int]int{} // processes it took to name the culprit → runs
	for run := range runs {
		stuck := rng.IntN(5) > 0
		var previous []Verdict
		for life := range lives {
			msg := fmt.Sprintf("seed %d run %d life %d", seed, run, life)
			processes++
			v := simulate(t, rng, msg, stuck, previous)
			if !stuck {
				break
			}
			killed++
			if len(v.Culprits) > 0 {
				restarts[life+1]++
				break
			}
			if life == lives-1 {
				t.Fatalf("%s: the culprit was not named after %d processes", msg, lives)
			}
			v.DetectedAt = time.Now()
			previous = append([]Verdict{*v}, previous...)
		}
	}
	t.Logf("seed %d: %d runs, %d processes, %d killed; processes it took to name the culprit: %v", seed, runs, processes, killed, restarts)
}

// simulate runs one random process to its end (a verdict, or a minute
// past when a stuck call should have been caught) and checks the verdict.
func simulate(t *testing.T, rng *rand.Rand, msg string, stuck bool, previous []Verdict) *Verdict {
	t.Helper()
	d := &Detector{Grace: time.Duration(1+rng.IntN(10)) * time.Second, Previous: previous}
	p := newProc(t, d)
	stuckAt := p.now + rng.Int64N(20*sec)
	dl := time.Duration(1+rng.IntN(5)) * time.Second
	freezeAfter := rng.Int64N(int64(dl) + 5*sec) // a GC comes when it comes
	spin := 0.05 + rng.Float64()
	// stoppedAfter: time stopped since the stuck call started; lastResume:
	// the first beat after the last stop or stall.
	var frozenAt, stoppedAfter, lastResume int64
	type good struct {
		slot int
		end  int64
	}
	var goods []good
	for p.verdict == nil && p.now < stuckAt+int64(dl)+int64(d.Grace)+60*sec {
		spinning := stuck && p.now >= stuckAt
		if spinning && !containsSlot(p.calls, 99) {
			p.call(99, "bad/p", shaA, dl) // it never ends
			stuckAt = p.now               // if a stop or stall delayed it
		}
		frozen := spinning && p.now >= stuckAt+freezeAfter
		if frozen && frozenAt == 0 {
			frozenAt = p.now
		}
		switch r := rng.IntN(1000); {
		case !frozen && r < 3: // stopped for up to 20 s
			n := 1 + rng.IntN(200)
			if spinning {
				stoppedAfter += int64(n+1) * step // the step after a stop counts as stopped
			}
			p.run(n, false, 0, true)
			p.run(1, true, 0.5, false) // it runs again before anything else
			lastResume = p.now
			continue
		case !frozen && r < 6: // a stall: no CPU, no beat, for up to 20 s
			p.run(1+rng.IntN(200), false, 0, false)
			p.run(1, true, 0.5, false)
			lastResume = p.now
			continue
		}
		if !frozen {
			// Healthy calls start and end.
			for i := 0; i < len(goods); i++ {
				if goods[i].end <= p.now {
					p.end(goods[i].slot)
					goods = append(goods[:i], goods[i+1:]...)
					i--
				}
			}
			if slot := rng.IntN(50); len(goods) < 3 && rng.IntN(2) == 0 && !containsSlot(p.calls, slot) {
				mod, sha := "b/q", shaB
				if rng.IntN(2) == 0 {
					mod, sha = "c/r", shaC
				}
				p.call(slot, mod, sha, time.Second)
				goods = append(goods, good{slot: slot, end: p.now + rng.Int64N(int64(time.Second))})
			}
		}
		cpu := 0.5
		if frozen {
			cpu = spin
		}
		p.run(1, !frozen, cpu, false)
	}
	v := p.verdict
	if !stuck {
		if v != nil {
			t.Fatalf("%s: a process without a stuck call was killed: %+v", msg, v)
		}
		return nil
	}
	if v == nil {
		t.Fatalf("%s: the stuck call (deadline %v, grace %v) was never caught", msg, dl, d.Grace)
	}
	// Killed Grace past the deadline (in running time), once the process
	// has beaten Proof past the deadline or its last resume; or Grace past
	// a freeze that came before that proof; plus two steps to see it.
	provenAt := max(stuckAt+int64(dl)+stoppedAfter, lastResume) + int64(d.proof())
	bound := max(stuckAt+int64(dl)+int64(d.Grace)+stoppedAfter, provenAt)
	if frozenAt != 0 {
		if frozenAt-step > provenAt+step {
			bound = min(bound, frozenAt+int64(d.Grace))
		} else {
			bound = frozenAt + int64(d.Grace)
		}
	}
	if late := p.at - (bound + 2*step); late > 0 {
		t.Fatalf("%s: killed %v late (stuck at %v, deadline %v, grace %v, frozen at %v, stopped %v, resumed at %v): %+v", msg, time.Duration(late),
			time.Duration(stuckAt-1000*sec), dl, d.Grace, time.Duration(frozenAt-1000*sec), time.Duration(stoppedAfter), time.Duration(lastResume-1000*sec), v)
	}
	for _, c := range v.Culprits {
		if c.Module != "bad/p" {
			t.Fatalf("%s: culprit %s blamed beside or instead of bad/p: %+v", msg, c.Module, v)
		}
	}
	if len(v.Culprits) == 0 && !containsModule(v.Suspects, "bad/p") {
		t.Fatalf("%s: undecided verdict without bad/p among the suspects: %+v", msg, v)
	}
	return v
}

func containsSlot(cs []wasmhost.JournalCall, slot int) bool {
	for _, c := range cs {
		if c.Slot == slot {
			return true
		}
	}
	return false
}

func containsModule(cs []Call, m string) bool {
	for _, c := range cs {
		if c.Module == m {
			return true
		}
	}
	return false
}

// TestPostMortem: of the calls a dead process left in its journal, only
// those Grace past their deadline at its last heartbeat are named.
func TestPostMortem(t *testing.T) {
	s := &wasmhost.JournalSnapshot{PID: 3, Heartbeat: 100 * sec, Calls: []wasmhost.JournalCall{
		{Module: "a/p", SHA256: shaA, Start: 80 * sec, Deadline: 5 * time.Second},  // 15s past
		{Module: "b/q", SHA256: shaB, Start: 99 * sec, Deadline: 5 * time.Second},  // in time
		{Module: "c/r", SHA256: shaC, Start: 90 * sec, Deadline: 30 * time.Second}, // in time
	}}
	v := PostMortem(s, 10*time.Second)
	if v == nil || culprits(v) != "a/p" || v.PID != 3 || time.Duration(v.Culprits[0].Ran) != 20*time.Second {
		t.Fatalf("verdict %+v, want a/p, which ran 20s", v)
	}
	if v := PostMortem(s, 20*time.Second); v != nil {
		t.Errorf("with a 20s grace: %+v, want none", v)
	}
}
