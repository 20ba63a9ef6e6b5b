package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// chaosInstance is one sluice instance under supervision: while wanted, it
// is started again one second after every exit.
type chaosInstance struct {
	r         *chaosRun
	name      string
	cfgPath   string
	adminAddr string

	mu    sync.Mutex
	want  bool
	cur   *chaosProc
	runs  []chaosExit
	seq   int
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	begun bool
	// stopped: shutdown ran.
	stopped bool
}

// chaosProc is one process of an instance and what the harness did to it.
type chaosProc struct {
	*sluiceProc
	recorded chan struct{} // closed once its exit is in the instance's runs
	termAt   time.Time     // guarded by the instance's mu
	killed   bool          // guarded by the instance's mu
	hung     bool          // guarded by the instance's mu
}

// chaosExit is how one sluice process ended.
type chaosExit struct {
	instance string
	pid      int
	started  time.Time
	ended    time.Time
	code     int           // exit code; -1 when ended by a signal
	signal   string        // the signal, when ended by one
	cause    string        // what the harness did to it, "" if nothing
	drain    time.Duration // SIGTERM to exit, when the harness sent SIGTERM
	panic    string        // the first line of a Go panic or fatal error it printed
	lastErr  string        // its last error log line
	log      string
}

func (e chaosExit) String() string {
	s := fmt.Sprintf("exit %d", e.code)
	if e.signal != "" {
		s = "signal " + e.signal
	}
	if e.cause != "" {
		s += " (" + e.cause + ")"
	}
	if e.drain > 0 {
		s += fmt.Sprintf(" drain %.1fs", e.drain.Seconds())
	}
	return s
}

func (r *chaosRun) newInstance(name string) *chaosInstance {
	in := &chaosInstance{r: r, name: name, adminAddr: freeAddr(r.t),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	in.cfgPath = filepath.Join(r.dir, "sluice-"+name+".yaml")
	writeConfig(r.t, in.cfgPath, r.config(name, in.adminAddr))
	return in
}

// setWant starts supervising (want) or stops restarting the instance.
func (in *chaosInstance) setWant(want bool) {
	in.mu.Lock()
	in.want = want
	if !in.begun {
		in.begun = true
		go in.supervise()
	}
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *chaosInstance) supervise() {
	defer close(in.done)
	for {
		in.mu.Lock()
		want := in.want
		in.mu.Unlock()
		if !want {
			select {
			case <-in.wake:
				continue
			case <-in.stop:
				return
			}
		}
		p := in.startProc()
		if p != nil {
			<-p.recorded
		}
		// systemd's RestartSec=1.
		select {
		case <-in.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// startProc starts a process if the instance is wanted; nil if not.
func (in *chaosInstance) startProc() *chaosProc {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.want {
		return nil
	}
	in.seq++
	sp, err := startProc(in.r.env.bin, in.name, in.cfgPath, filepath.Join(in.r.dir, fmt.Sprintf("sluice-%s-%d.log", in.name, in.seq)), false)
	if err != nil {
		in.r.logf("%s: start: %v", in.name, err)
		return nil
	}
	p := &chaosProc{sluiceProc: sp, recorded: make(chan struct{})}
	in.cur = p
	in.r.logf("%s: started pid %d", in.name, p.PID())
	go func() {
		<-p.exited
		in.recordExit(p)
		close(p.recorded)
	}()
	return p
}

func (in *chaosInstance) recordExit(p *chaosProc) {
	e := chaosExit{instance: in.name, pid: p.PID(), started: p.started, ended: time.Now(), log: p.log}
	st := p.cmd.ProcessState
	e.code = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.signal = ws.Signal().String()
	}
	e.panic, e.lastErr = scanLog(p.log)
	in.mu.Lock()
	switch {
	case p.killed:
		e.cause = "kill -9 by the harness"
	case p.hung:
		e.cause = "SIGTERM by the harness, then kill -9: did not exit"
	case !p.termAt.IsZero():
		e.cause = "SIGTERM by the harness"
		e.drain = e.ended.Sub(p.termAt)
	}
	in.runs = append(in.runs, e)
	if in.cur == p {
		in.cur = nil
	}
	in.mu.Unlock()
	if !p.termAt.IsZero() && !p.hung {
		in.r.mu.Lock()
		in.r.drains = append(in.r.drains, e.drain)
		in.r.mu.Unlock()
	}
	msg := fmt.Sprintf("%s: pid %d ended: %s", in.name, e.pid, e)
	if e.panic != "" {
		msg += "; PANIC: " + e.panic
	} else if e.cause == "" && e.lastErr != "" {
		msg += "; last error: " + e.lastErr
	}
	in.r.logf("%s", msg)
}

func (in *chaosInstance) running() *chaosProc {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cur
}

// kill9 kills the running process, if any.
func (in *chaosInstance) kill9() bool {
	in.mu.Lock()
	p := in.cur
	if p != nil {
		p.killed = true
	}
	in.mu.Unlock()
	if p == nil {
		return false
	}
	p.Kill9()
	<-p.recorded
	return true
}

// term sends SIGTERM to the running process and waits for it to exit, at
// most shutdown_timeout + 20s, after which it is killed and reported hung.
func (in *chaosInstance) term() bool {
	in.mu.Lock()
	p := in.cur
	if p != nil {
		p.termAt = time.Now()
	}
	in.mu.Unlock()
	if p == nil {
		return false
	}
	if !p.Term(in.r.prof.shutdown + 20*time.Second) {
		in.mu.Lock()
		p.hung = true
		in.mu.Unlock()
		p.Kill9()
	}
	<-p.recorded
	return true
}

// shutdown stops supervising and drains the running process.
func (in *chaosInstance) shutdown() {
	in.mu.Lock()
	in.want = false
	begun, stopped := in.begun, in.stopped
	in.stopped = true
	in.mu.Unlock()
	if !begun || stopped {
		return
	}
	in.term()
	close(in.stop)
	<-in.done
	// A start racing the stop: end it too.
	in.term()
}

func (in *chaosInstance) exits() []chaosExit {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]chaosExit(nil), in.runs...)
}

// waitAdmin waits until the instance's admin API answers.
func (in *chaosInstance) waitAdmin(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get("http://" + in.adminAddr + "/v1/whoami")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("admin API of %s not up within %s: %v", in.name, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cli runs the sluice CLI against the instance's admin API as tenant acme.
func (in *chaosInstance) cli(args ...string) (string, error) {
	args = append(args, "-server", "http://"+in.adminAddr, "-tenant", "acme", "-pipeline", "events", "-timeout", "30s")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.r.env.bin, append([]string{"module"}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_TOKEN="+chaosAcmeToken)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// cliRetry repeats a CLI call until it succeeds or d passes: the API may be
// down while the process restarts, and init-fails-later refuses init half
// of the time.
func (in *chaosInstance) cliRetry(d time.Duration, args ...string) error {
	deadline := time.Now().Add(d)
	for attempt := 1; ; attempt++ {
		out, err := in.cli(args...)
		if err == nil {
			in.r.logf("%s: sluice module %s: ok after %d attempt(s): %s", in.name, args[0], attempt, firstLine(out))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice module %s on %s: %v: %s (after %d attempts)", strings.Join(args, " "), in.name, err, out, attempt)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
