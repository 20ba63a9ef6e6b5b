package main

import (
	"bytes"
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/stuckcall"
	"github.com/sluicehq/sluice/wasmhost"
)

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		line    string
		stopped bool
		cpu     time.Duration
	}{
		{"4242 (sluice) S 1 4242 4242 0 -1 4194560 1 0 0 0 250 50 0 0 20 0 12 0 1 2 3", false, 3 * time.Second},
		{"4242 (a (b) c) T 1 4242 4242 0 -1 4194560 1 0 0 0 7 3 0 0 20 0 12 0 1 2 3", true, 100 * time.Millisecond},
		{"4242 (x) t 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0", true, 0},
		{"4242 (x) R 1 4242 4242 0 -1 4194560 1 0 0 0 100 0", false, time.Second},
	} {
		stopped, cpu, err := parseProcStat(tc.line)
		if err != nil || stopped != tc.stopped || cpu != tc.cpu {
			t.Errorf("%q: %v %v %v, want %v %v", tc.line, stopped, cpu, err, tc.stopped, tc.cpu)
		}
	}
	for _, bad := range []string{"", "4242 sluice S", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 x y"} {
		if _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, cpu, err := procStat(1); err != nil || cpu < 0 {
		t.Errorf("procStat(1): %v %v", cpu, err)
	}
}

// fakeProcess is what a callWatcher sees of a process: its journal, state
// and CPU, and whether it was killed.
type fakeProcess struct {
	mu      sync.Mutex
	snap    wasmhost.JournalSnapshot
	stopped bool
	cpu     time.Duration
	beating bool
	killed  int
}

func (f *fakeProcess) Snapshot(dst *wasmhost.JournalSnapshot) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beating {
		f.snap.Heartbeat = wasmhost.MonotonicNow()
	}
	calls := append(dst.Calls[:0], f.snap.Calls...)
	*dst = f.snap
	dst.Calls = calls
	return nil
}

func (f *fakeProcess) stat(int) (bool, time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cpu += 20 * time.Millisecond
	return f.stopped, f.cpu, nil
}

func (f *fakeProcess) kill(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = pid
	return nil
}

func newFakeWatch(t *testing.T, f *fakeProcess) (*callWatcher, *bytes.Buffer, string) {
	var logs bytes.Buffer
	dir := t.TempDir()
	now := wasmhost.MonotonicNow()
	f.snap = wasmhost.JournalSnapshot{PID: 77, MonoBase: now, WallBase: time.Now().UnixNano(), Heartbeat: now}
	w := &callWatcher{pid: 77, dir: dir, log: slog.New(slog.NewTextHandler(&logs, nil)), reader: f, stat: f.stat, kill: f.kill,
		orphaned: func() bool { return false }, detector: stuckcall.Detector{Grace: 200 * time.Millisecond}}
	return w, &logs, dir
}

// TestCallWatcherKillsAStuckCall: a call past its deadline and the grace
// in a process that keeps beating is named, its record kept, the process
// killed, and the log names the tenant, pipeline and sha256.
func TestCallWatcherKillsAStuckCall(t *testing.T) {
	f := &fakeProcess{beating: true}
	w, logs, dir := newFakeWatch(t, f)
	sha := strings.Repeat("ab", 32)
	f.snap.Calls = []wasmhost.JournalCall{{Module: "acme/logs", SHA256: sha, Start: wasmhost.MonotonicNow(), Deadline: 100 * time.Millisecond}}
	start := time.Now()
	for w.look() {
		time.Sleep(10 * time.Millisecond)
		if time.Since(start) > time.Minute {
			t.Fatal("the watcher never decided")
		}
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("killed after %v, before the deadline and grace (300ms) passed", took)
	}
	if f.killed != 77 {
		t.Fatalf("killed %d, want 77", f.killed)
	}
	vs, err := stuckcall.Read(dir)
	if err != nil || len(vs) != 1 || len(vs[0].Culprits) != 1 || vs[0].Culprits[0].SHA256 != sha || vs[0].PID != 77 {
		t.Fatalf("records %+v, %v", vs, err)
	}
	for _, want := range []string{`msg="stuck module call: killing the process; the next start quarantines the version"`, "tenant=acme", "pipeline=logs", "sha256=" + sha, "pid=77", "record=" + vs[0].Path} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
}

// TestCallWatcherSparesAStoppedProcess: a process stopped (SIGSTOP) with a
// call in progress is not killed, however long it stays stopped; and the
// watch ends when the process closes its journal.
func TestCallWatcherSparesAStoppedProcess(t *testing.T) {
	f := &fakeProcess{stopped: true}
	w, _, _ := newFakeWatch(t, f)
	f.snap.Calls = []wasmhost.JournalCall{{Module: "m", SHA256: strings.Repeat("cd", 32), Start: wasmhost.MonotonicNow(), Deadline: time.Millisecond}}
	for range 50 {
		if !w.look() {
			t.Fatalf("the watch ended for a stopped process (killed %d)", f.killed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	f.snap.Closed = true
	f.mu.Unlock()
	if w.look() || f.killed != 0 {
		t.Fatalf("after the journal closed: watching on, or killed %d", f.killed)
	}
}

// TestWatcherSupervisorBacksOff: a watcher that keeps exiting is started
// again after a backoff that doubles up to its cap, and from the minimum
// again after one that ran a while; stopping kills the running one.
func TestWatcherSupervisorBacksOff(t *testing.T) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	var (
		mu     sync.Mutex
		clock  time.Time
		sleeps []time.Duration
		starts int
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &watcherSupervisor{log: slog.New(slog.DiscardHandler),
		start: func() (*exec.Cmd, error) {
			mu.Lock()
			starts++
			if starts == 12 {
				clock = clock.Add(2 * watcherStable) // this one ran a while
			}
			mu.Unlock()
			cmd := exec.Command(truePath)
			return cmd, cmd.Start()
		},
		now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		sleep: func(_ context.Context, d time.Duration) bool {
			mu.Lock()
			defer mu.Unlock()
			sleeps = append(sleeps, d)
			if len(sleeps) == 14 {
				cancel()
				return false
			}
			return true
		}}
	s.run(ctx)
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond, 25600 * time.Millisecond,
		30 * time.Second, 30 * time.Second, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if len(sleeps) != len(want) {
		t.Fatalf("backoffs %v, want %v", sleeps, want)
	}
	for i := range want {
		if sleeps[i] != want[i] {
			t.Fatalf("backoffs %v, want %v", sleeps, want)
		}
	}
	if s.restarts != 13 {
		t.Errorf("%d restarts, want 13", s.restarts)
	}

	// Stopping kills a running watcher and waits for it.
	sleepPath, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	var cmd *exec.Cmd
	ctx2, cancel2 := context.WithCancel(context.Background())
	started := make(chan struct{})
	s2 := &watcherSupervisor{log: slog.New(slog.DiscardHandler), start: func() (*exec.Cmd, error) {
		cmd = exec.Command(sleepPath, "60")
		err := cmd.Start()
		close(started)
		return cmd, err
	}}
	done := make(chan struct{})
	go func() { s2.run(ctx2); close(done) }()
	<-started
	t0 := time.Now()
	cancel2()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if cmd.ProcessState == nil || cmd.ProcessState.Success() {
		t.Errorf("the watcher was not killed: %v", cmd.ProcessState)
	}
	t.Logf("stopped in %v", time.Since(t0))
}

// TestJudgedBefore: the journal of a process the watcher killed is not
// judged again post mortem; one of an earlier process with the same pid
// is.
func TestJudgedBefore(t *testing.T) {
	opened := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	s := &wasmhost.JournalSnapshot{PID: 42, WallBase: opened.UnixNano()}
	for _, tc := range []struct {
		v    stuckcall.Verdict
		want bool
	}{
		{stuckcall.Verdict{PID: 42, DetectedAt: opened.Add(time.Minute)}, true},
		{stuckcall.Verdict{PID: 42, DetectedAt: opened.Add(-time.Hour)}, false}, // pid reused
		{stuckcall.Verdict{PID: 43, DetectedAt: opened.Add(time.Minute)}, false},
	} {
		if got := judgedBefore([]stuckcall.Verdict{tc.v}, s); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.v, got, tc.want)
		}
	}
}
