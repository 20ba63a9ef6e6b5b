package engine

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in engine/testdata")

// flowRecorder counts the pause and resume calls a flowControl makes.
type flowRecorder struct {
	mu              sync.Mutex
	pauses, resumes int
	last            string // "pause" or "resume"
	doubled         bool   // the same call twice in a row
}

func (r *flowRecorder) call(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == what {
		r.doubled = true
	}
	r.last = what
	if what == "pause" {
		r.pauses++
	} else {
		r.resumes++
	}
}

func newTestFlow(high, low int64, queueFull func() bool) (*flowControl, *flowRecorder) {
	r := &flowRecorder{}
	f := &flowControl{high: high, low: low, queueFull: queueFull,
		pause: func() { r.call("pause") }, resume: func() { r.call("resume") }}
	return f, r
}

// flowStep changes the bytes in flight by add and the sink's queue to
// full, runs check and says what it must do: "pause", "resume" or ""
// (nothing), and whether fetching is paused after it.
type flowStep struct {
	add    int64
	full   bool
	want   string
	paused bool
}

// TestFlowControlSteps: fetching pauses once the bytes in flight reach the
// high mark or the sink's queue is full, stays paused between the marks,
// and resumes only at or below the low mark with room in the queue. A
// check that changes nothing calls neither pause nor resume.
func TestFlowControlSteps(t *testing.T) {
	tests := []struct {
		name    string
		noQueue bool // no queueFull function
		steps   []flowStep
	}{
		{"pauses at the high mark, not below", false, []flowStep{
			{add: 999, want: "", paused: false},
			{add: 1, want: "pause", paused: true},
		}},
		{"stays paused between the marks", false, []flowStep{
			{add: 1200, want: "pause", paused: true},
			{add: -600, want: "", paused: true},
			{add: -99, want: "", paused: true}, // 501
			{add: -1, want: "resume", paused: false},
		}},
		{"between the marks, not paused, it does not pause", false, []flowStep{
			{add: 700, want: "", paused: false},
			{add: -300, want: "", paused: false},
		}},
		{"a full queue pauses below the budget", false, []flowStep{
			{add: 10, full: true, want: "pause", paused: true},
			{add: 0, full: true, want: "", paused: true},
			{add: 0, full: false, want: "resume", paused: false},
		}},
		{"a full queue keeps it paused under the low mark", false, []flowStep{
			{add: 1000, want: "pause", paused: true},
			{add: -1000, full: true, want: "", paused: true},
			{add: 0, full: false, want: "resume", paused: false},
		}},
		{"room in the queue does not resume above the low mark", false, []flowStep{
			{add: 2000, full: true, want: "pause", paused: true},
			{add: -1000, full: false, want: "", paused: true},
			{add: -500, full: false, want: "resume", paused: false},
		}},
		{"checks that change nothing call nothing", false, []flowStep{
			{add: 1000, want: "pause", paused: true},
			{add: 0, want: "", paused: true},
			{add: 5000, want: "", paused: true},
			{add: -6000, want: "resume", paused: false},
			{add: 0, want: "", paused: false},
		}},
		{"pause and resume again", false, []flowStep{
			{add: 1000, want: "pause", paused: true},
			{add: -500, want: "resume", paused: false},
			{add: 500, want: "pause", paused: true},
			{add: -1000, want: "resume", paused: false},
		}},
		{"without a queue, only the budget counts", true, []flowStep{
			{add: 999, want: "", paused: false},
			{add: 1, want: "pause", paused: true},
			{add: -500, want: "resume", paused: false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			full := false
			queueFull := func() bool { return full }
			if tc.noQueue {
				queueFull = nil
			}
			f, rec := newTestFlow(1000, 500, queueFull)
			for i, s := range tc.steps {
				full = s.full
				f.add(s.add)
				pauses, resumes := rec.pauses, rec.resumes
				f.check()
				did := ""
				switch {
				case rec.pauses > pauses:
					did = "pause"
				case rec.resumes > resumes:
					did = "resume"
				}
				if did != s.want || f.isPaused() != s.paused {
					t.Errorf("step %d (%+d bytes to %d, queue full %v): did %q, paused %v; want %q, paused %v",
						i, s.add, f.inflight.Load(), s.full, did, f.isPaused(), s.want, s.paused)
				}
			}
			if got, want := f.pauses.Load(), int64(rec.pauses); got != want {
				t.Errorf("pauses counter %d, want the %d pause calls", got, want)
			}
			if got, want := f.resumes.Load(), int64(rec.resumes); got != want {
				t.Errorf("resumes counter %d, want the %d resume calls", got, want)
			}
		})
	}
}

// TestFlowPeak: the peak is the most bytes ever in flight at once; bytes
// leaving never lower it.
func TestFlowPeak(t *testing.T) {
	f, _ := newTestFlow(1000, 500, nil)
	for i, s := range []struct{ add, inflight, peak int64 }{
		{100, 100, 100}, {50, 150, 150}, {-120, 30, 150}, {10, 40, 150}, {200, 240, 240}, {-240, 0, 240},
	} {
		f.add(s.add)
		if f.inflight.Load() != s.inflight || f.peak.Load() != s.peak {
			t.Errorf("step %d (%+d): in flight %d, peak %d; want %d, %d", i, s.add, f.inflight.Load(), f.peak.Load(), s.inflight, s.peak)
		}
	}
}

// TestFlowConcurrentChecks: the poll loop checks while workers and the
// sink move bytes in and out of flight; pause and resume strictly
// alternate, starting with a pause, and once every byte is out a check
// resumes (run with -race).
func TestFlowConcurrentChecks(t *testing.T) {
	f, rec := newTestFlow(1000, 500, nil)
	f.add(1000) // a backlog that pauses at once
	f.check()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				n := int64(150 + 50*g + i%101) // 4 goroutines cross both marks
				f.add(n)
				f.check()
				f.add(-n)
				f.check()
			}
		}()
	}
	wg.Wait()
	f.add(-1000)
	f.check()
	if rec.doubled {
		t.Error("pause or resume called twice in a row")
	}
	if rec.pauses == 0 || rec.pauses != rec.resumes || f.isPaused() || f.inflight.Load() != 0 {
		t.Errorf("%d pauses, %d resumes, paused %v, %d bytes in flight; want as many resumes as pauses (at least one), not paused, 0 bytes",
			rec.pauses, rec.resumes, f.isPaused(), f.inflight.Load())
	}
}

// TestAcksAndFlowTrace runs one partition through a budget of 1000 bytes
// (low mark 500): batches are polled, the module's output inflates one,
// the sink's queue fills and drains, chunks land out of order, and the
// partition is revoked. Each line of testdata/acks_flow.golden is a step
// and what the watermark, the budget and fetching show after it; go test
// -run TestAcksAndFlowTrace -update ./engine rewrites it.
func TestAcksAndFlowTrace(t *testing.T) {
	full := false
	f, _ := newTestFlow(1000, 500, func() bool { return full })
	a := &partitionAcks{topic: "logs", partition: 0, budget: f}
	var batches []*batchAck
	var out bytes.Buffer
	step := func(what string, do func()) {
		do()
		f.check()
		wm := "-"
		if o, ok := a.watermark(); ok {
			wm = fmt.Sprint(o.Offset)
		}
		state := "fetching"
		if f.isPaused() {
			state = "paused"
		}
		fmt.Fprintf(&out, "%-44s watermark=%-3s inflight=%-4d batches=%d %s\n", what, wm, f.inflight.Load(), a.inflight.Load(), state)
	}
	poll := func(first, last, n int64) func() {
		return func() { batches = append(batches, a.track(first, eo(last), n)) }
	}
	step("poll 0-99 (300 B)", poll(0, 99, 300))
	step("poll 100-199 (300 B)", poll(100, 199, 300))
	step("batch 1's rows go into a chunk", func() { batches[1].hold() })
	step("batch 1's output is 200 B", func() { batches[1].addBytes(200) })
	step("poll 200-299 (300 B)", poll(200, 299, 300))
	step("worker done with batch 1", func() { batches[1].Done() })
	step("worker done with batch 2", func() { batches[2].Done() })
	step("worker done with batch 0", func() { batches[0].Done() })
	step("the sink's queue fills", func() { full = true })
	step("batch 1's chunk lands", func() { batches[1].Done() })
	step("the sink's queue has room", func() { full = false })
	step("poll 300-399 (400 B)", poll(300, 399, 400))
	step("poll 400-499 (400 B)", poll(400, 499, 400))
	step("batch 4's rows go into a chunk", func() { batches[4].hold() })
	step("worker done with batch 4", func() { batches[4].Done() })
	step("batch 3 fails: its hold is never released", func() {})
	step("revoke", a.abandon)
	step("batch 4's chunk lands after the revoke", func() { batches[4].Done() })

	path := filepath.Join("testdata", "acks_flow.golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestAcksAndFlowTrace -update ./engine writes it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("trace differs from %s (-update rewrites it):\ngot:\n%s\nwant:\n%s", path, out.Bytes(), want)
	}
}
