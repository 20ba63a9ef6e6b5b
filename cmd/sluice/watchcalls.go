package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/stuckcall"
	"github.com/sluicehq/sluice/wasmhost"
)

// The stuck-call watcher (docs/adr/0007-stuck-call-detection.md): sluice
// run records its module calls in a call journal and starts
// `sluice watch-calls`, a child process that reads the journal and kills
// sluice run when a call its deadline did not stop holds the process,
// leaving a verdict for the next start, which quarantines the version.
// The watcher shares nothing with sluice run but the journal's pages, so
// that a guest spinning where the Go runtime cannot preempt it, which
// stops every goroutine of sluice run at the next stop-the-world, cannot
// stop the watcher.

// watchPoll is how often the watcher looks.
const watchPoll = 100 * time.Millisecond

// clockTicks is the unit of utime and stime in /proc/<pid>/stat
// (USER_HZ, 100 on every Linux architecture).
const clockTicks = 100

// cmdWatchCalls is the watcher: `sluice watch-calls -journal J -dir D
// -grace G -pid P`, started by sluice run (P). It exits when P exits or
// closes its journal, and after killing P.
func cmdWatchCalls(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("watch-calls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	journal := fs.String("journal", "", "the call journal of the process to watch")
	dir := fs.String("dir", "", "where verdicts are kept (stuck_calls.dir)")
	grace := fs.Duration("grace", 10*time.Second, "stuck_calls.grace")
	pid := fs.Int("pid", 0, "the process to watch: the watcher's parent")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *journal == "" || *dir == "" || *pid <= 0 || *grace <= 0 {
		fmt.Fprintln(stderr, "sluice watch-calls: -journal, -dir, -pid and -grace are required (sluice run starts it)")
		return 2
	}
	// The process group's SIGINT or SIGTERM is for sluice run, which
	// drains, and may get stuck draining: the watcher stays until it ends.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("log", "stuck-call watcher")
	r, err := wasmhost.OpenJournalReader(*journal)
	if err != nil {
		log.Error("cannot read the call journal; stuck calls go unwatched", "err", err)
		return 1
	}
	defer r.Close()
	earlier, err := stuckcall.Read(*dir)
	if err != nil {
		log.Warn("earlier stuck-call records unreadable; judging without them", "err", err)
	}
	w := &callWatcher{pid: *pid, dir: *dir, log: log, reader: r, stat: procStat,
		detector: stuckcall.Detector{Grace: *grace, Previous: stuckcall.Undecided(earlier, time.Now())}}
	w.run(context.Background(), time.Tick(watchPoll))
	return 0
}

// callWatcher watches one process.
type callWatcher struct {
	pid    int
	dir    string
	log    *slog.Logger
	reader interface {
		Snapshot(*wasmhost.JournalSnapshot) error
	}
	stat func(pid int) (stopped bool, cpu time.Duration, err error)
	kill func(pid int) error // default SIGKILL
	// orphaned reports whether the watched process is gone (default: the
	// watcher's parent is no longer it).
	orphaned func() bool
	detector stuckcall.Detector
	snap     wasmhost.JournalSnapshot
}

// run looks at every tick until the process is gone, has closed its
// journal, or is killed.
func (w *callWatcher) run(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if !w.look() {
			return
		}
	}
}

// look takes one look; false ends the watch.
func (w *callWatcher) look() bool {
	orphaned := w.orphaned
	if orphaned == nil {
		orphaned = func() bool { return os.Getppid() != w.pid }
	}
	if orphaned() {
		return false // sluice run is gone
	}
	stopped, cpu, err := w.stat(w.pid)
	if err != nil {
		return false
	}
	if err := w.reader.Snapshot(&w.snap); err != nil {
		w.log.Error("the call journal is unreadable; stuck calls go unwatched", "err", err)
		return false
	}
	if w.snap.Closed || w.snap.PID != w.pid {
		return false
	}
	v := w.detector.Observe(stuckcall.Observation{Now: wasmhost.MonotonicNow(), Stopped: stopped, CPU: cpu, Journal: &w.snap})
	if v == nil {
		return true
	}
	if err := stuckcall.Write(w.dir, v); err != nil {
		w.log.Error("cannot keep the stuck-call record; the next start will not quarantine the version", "err", err)
	}
	w.report(v)
	kill := w.kill
	if kill == nil {
		kill = func(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
	}
	if err := kill(w.pid); err != nil {
		w.log.Error("cannot kill the process", "pid", w.pid, "err", err)
	}
	return false
}

// report logs the verdict, naming each version and its tenant and
// pipeline.
func (w *callWatcher) report(v *stuckcall.Verdict) {
	if len(v.Culprits) == 0 {
		w.log.Error("killing the process: it is frozen and no module version can be named yet; it restarts without quarantining any",
			"pid", w.pid, "reason", v.Reason, "suspects", len(v.Suspects), "record", v.Path)
		return
	}
	for _, c := range v.Versions() {
		attrs := []any{"pid", w.pid}
		if tenant, pipeline, ok := strings.Cut(c.Module, "/"); ok {
			attrs = append(attrs, "tenant", tenant, "pipeline", pipeline)
		} else {
			attrs = append(attrs, "module", c.Module)
		}
		attrs = append(attrs, "sha256", c.SHA256, "deadline", c.Deadline.String(), "ran", c.Ran.String(), "reason", v.Reason, "record", v.Path)
		w.log.Error("stuck module call: killing the process; the next start quarantines the version", attrs...)
	}
}

// procStat reads a process's state and CPU time from /proc/<pid>/stat.
func procStat(pid int) (stopped bool, cpu time.Duration, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat parses /proc/<pid>/stat: the state is the field after the
// command (which may hold spaces and parentheses), utime and stime the
// 14th and 15th fields.
func parseProcStat(s string) (stopped bool, cpu time.Duration, err error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return false, 0, errors.New("/proc stat: no command")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return false, 0, errors.New("/proc stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return false, 0, fmt.Errorf("/proc stat: %w", err)
	}
	state := f[0]
	return state == "T" || state == "t", time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// stuckCallWatch is sluice run's side: its call journal and the watcher
// process it keeps running.
type stuckCallWatch struct {
	journal *wasmhost.CallJournal
	stop    func()
}

// startStuckCallWatch opens this process's call journal in
// stuck_calls.dir, turns what dead processes left there into verdicts,
// and starts the watcher. It returns a zero stuckCallWatch when
// stuck_calls.watch is off or the OS is not Linux.
func startStuckCallWatch(cfg engine.StuckCallConfig, log *slog.Logger, stderr io.Writer) (*stuckCallWatch, error) {
	if !cfg.Watching() {
		return &stuckCallWatch{stop: func() {}}, nil
	}
	if runtime.GOOS != "linux" {
		log.Warn("stuck_calls.watch needs Linux: module calls that their deadline cannot stop go unwatched")
		return &stuckCallWatch{stop: func() {}}, nil
	}
	jdir := cfg.JournalDir()
	if err := os.MkdirAll(jdir, 0o750); err != nil {
		return nil, fmt.Errorf("stuck_calls.dir: %w", err)
	}
	dead, err := wasmhost.ReclaimJournals(jdir)
	if err != nil {
		return nil, fmt.Errorf("stuck_calls.dir: %w", err)
	}
	judged, err := stuckcall.Read(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("stuck_calls.dir: %w", err)
	}
	for i := range dead {
		if judgedBefore(judged, &dead[i]) {
			continue // the watcher killed it, and said why
		}
		if v := stuckcall.PostMortem(&dead[i], cfg.Grace); v != nil {
			if err := stuckcall.Write(cfg.Dir, v); err != nil {
				return nil, fmt.Errorf("stuck_calls.dir: %w", err)
			}
			log.Error("a process that died without the stuck-call watcher's verdict had a stuck module call; the version is quarantined",
				"pid", v.PID, "reason", v.Reason, "record", v.Path)
		}
	}
	path := cfg.JournalPath(os.Getpid())
	j, err := wasmhost.OpenCallJournal(path)
	if err != nil {
		return nil, fmt.Errorf("stuck_calls.dir: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		j.Close()
		return nil, fmt.Errorf("stuck-call watcher: %w", err)
	}
	args := []string{"watch-calls", "-journal", path, "-dir", cfg.Dir, "-grace", cfg.Grace.String(), "-pid", strconv.Itoa(os.Getpid())}
	// The watcher writes to sluice run's stderr file itself: a copy made
	// by a goroutine of sluice run would freeze with it.
	out, ok := stderr.(*os.File)
	if !ok {
		out = os.Stderr
	}
	sup := &watcherSupervisor{log: log, start: func() (*exec.Cmd, error) {
		cmd := exec.Command(exe, args...)
		cmd.Stdout, cmd.Stderr = out, out
		// Its own process group: a terminal's ^C is for sluice run.
		// Pdeathsig: it dies with sluice run, however sluice run ends.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		return cmd, cmd.Start()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sup.run(ctx)
	}()
	return &stuckCallWatch{journal: j, stop: func() {
		cancel()
		<-done
		_ = j.Close()
	}}, nil
}

// judgedBefore reports whether a verdict was written about the process
// of a dead journal (the watcher's, which killed it).
func judgedBefore(vs []stuckcall.Verdict, s *wasmhost.JournalSnapshot) bool {
	for _, v := range vs {
		if v.PID == s.PID && !v.DetectedAt.Before(time.Unix(0, s.WallBase)) {
			return true
		}
	}
	return false
}

// watcherSupervisor keeps the watcher process running: one that exits
// while sluice run runs is started again, after a backoff that doubles
// from watcherBackoffMin to watcherBackoffMax, and starts over once a
// watcher has run for watcherStable, so that a watcher that cannot run
// is not a busy loop.
type watcherSupervisor struct {
	log   *slog.Logger
	start func() (*exec.Cmd, error)
	// sleep waits d or until ctx ends (default a timer); now is the clock
	// (default time.Now). Tests set both.
	sleep func(ctx context.Context, d time.Duration) bool
	now   func() time.Time
	// restarts counts the watchers started after the first.
	mu       sync.Mutex
	restarts int
}

const (
	watcherBackoffMin = 100 * time.Millisecond
	watcherBackoffMax = 30 * time.Second
	watcherStable     = time.Minute
)

// run starts the watcher, and again whenever it exits, until ctx ends;
// then it kills the one running and waits for it. The goroutine that
// starts the watcher keeps its OS thread: Pdeathsig fires when the thread
// that started the child exits, and the Go runtime may end a thread that
// a goroutine does not hold.
func (s *watcherSupervisor) run(ctx context.Context) {
	runtime.LockOSThread()
	sleep, now := s.sleep, s.now
	if sleep == nil {
		sleep = func(ctx context.Context, d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
				return true
			}
		}
	}
	if now == nil {
		now = time.Now
	}
	backoff := watcherBackoffMin
	for first := true; ; first = false {
		if !first {
			s.mu.Lock()
			s.restarts++
			s.mu.Unlock()
		}
		started := now()
		cmd, err := s.start()
		if err == nil {
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				<-exited
				return
			case err = <-exited:
				if err == nil {
					err = errors.New("exited")
				}
			}
		}
		if ctx.Err() != nil {
			return
		}
		if now().Sub(started) >= watcherStable {
			backoff = watcherBackoffMin
		}
		s.log.Error("the stuck-call watcher stopped; starting it again", "err", err, "in", backoff)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, watcherBackoffMax)
	}
}
