package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The process supervisor: the binary built once per test binary, and one
// type for a running `sluice run`, whatever the suite does to it.

var (
	buildOnce sync.Once
	binDir    string
	sluiceBin string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// sluiceBinary builds cmd/sluice (CGO_ENABLED=0, as released) the first
// time a test asks for it and returns its path; a failed build fails t.
func sluiceBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "sluice-bin-"); buildErr != nil {
			return
		}
		sluiceBin = filepath.Join(binDir, "sluice")
		cmd := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
		cmd.Dir = wasmbuild.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build sluice: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return sluiceBin
}

// sluiceProc is one `sluice run -config <path>` process. Its output is
// appended to a log file (a restart under the same log continues it), and
// its peak resident set is sampled until it exits.
type sluiceProc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan struct{} // closed once the process has ended and been reaped
	waitErr error         // how it ended; set before exited is closed
	peakRSS atomic.Int64
}

// startProc starts bin on the config at cfgPath, its output appended to
// logPath. nice runs it at a lower CPU priority (nice 10), as a member on
// another host would not take the measured process's CPU; nice execs the
// binary, so the PID, and the RSS sampled, is sluice's. The process gets
// SIGKILL if the test process dies.
func startProc(bin, name, cfgPath, logPath string, nice bool) (*sluiceProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	argv := []string{bin, "run", "-config", cfgPath}
	if nice {
		argv = append([]string{"nice", "-n", "10"}, argv...)
	}
	p := &sluiceProc{name: name, log: logPath, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p.started = time.Now()
	go func() {
		p.waitErr = p.cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	go p.sampleRSS()
	return p, nil
}

// runSluice writes cfg to dir/<name>.yaml and starts sluice on it, its
// output in dir/<name>.log. When t ends the process is killed if it still
// runs, and its log tail is logged if t failed.
func runSluice(t *testing.T, bin, dir, name string, cfg *sluiceConfig, nice bool) *sluiceProc {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	writeConfig(t, path, cfg)
	p, err := startProc(bin, name, path, filepath.Join(dir, name+".log"), nice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if gone, _ := p.Exited(); !gone {
			p.Kill9()
		}
		if t.Failed() {
			t.Logf("sluice %s log tail:\n%s", name, p.LogTail(40))
		}
	})
	return p
}

// PID is the process's id.
func (p *sluiceProc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *sluiceProc) Exited() (bool, error) {
	select {
	case <-p.exited:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Kill9 sends SIGKILL and waits for the process to end.
func (p *sluiceProc) Kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Term sends SIGTERM and waits at most d for the process to end; it
// reports whether it did.
func (p *sluiceProc) Term(d time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// Drain sends SIGTERM and requires a clean exit within 40 s.
func (p *sluiceProc) Drain(t *testing.T) {
	t.Helper()
	if !p.Term(40 * time.Second) {
		t.Fatalf("sluice %s did not drain within 40s", p.name)
	}
	if p.waitErr != nil {
		t.Fatalf("sluice %s exited with %v after SIGTERM", p.name, p.waitErr)
	}
}

// Freeze stops the process (SIGSTOP) where it stands; Thaw resumes it.
func (p *sluiceProc) Freeze() error { return p.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process (SIGCONT).
func (p *sluiceProc) Thaw() error { return p.cmd.Process.Signal(syscall.SIGCONT) }

// PeakRSS is the largest resident set (VmHWM) sampled, in bytes.
func (p *sluiceProc) PeakRSS() int64 { return p.peakRSS.Load() }

// Log is everything the log file holds.
func (p *sluiceProc) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// LogTail is the last n lines of the log file.
func (p *sluiceProc) LogTail(n int) string { return logTail(p.log, n) }

// sampleRSS records the process's peak resident set (VmHWM) every 50 ms
// until it exits.
func (p *sluiceProc) sampleRSS() {
	status := fmt.Sprintf("/proc/%d/status", p.PID())
	for {
		f, err := os.Open(status)
		if err != nil {
			return
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				for {
					cur := p.peakRSS.Load()
					if kb*1024 <= cur || p.peakRSS.CompareAndSwap(cur, kb*1024) {
						break
					}
				}
			}
		}
		f.Close()
		select {
		case <-p.exited:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail is the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// warnTail is the last n WARN and ERROR lines of a sluice log.
func warnTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// scanLog finds a Go panic or fatal error and the last error line in a
// process's output.
func scanLog(path string) (panicLine, lastErr string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if panicLine == "" && (strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")) {
			panicLine = line
		}
		if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "sluice run: ") || strings.HasPrefix(line, "error: ") {
			lastErr = line
		}
	}
	if len(lastErr) > 400 {
		lastErr = lastErr[:400] + "…"
	}
	return panicLine, lastErr
}

func countInFile(path, s string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), s)
}
