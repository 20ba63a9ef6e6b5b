package testinfra

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// InstallHint is the advice attached to every "not installed" error.
const InstallHint = "run `go tool -modfile=tools/go.mod task deps` (or scripts/deps.sh) to install ClickHouse 18.16, ClickHouse 26.9 (chdb-core) and the Kafka jars"

// ErrNotInstalled is wrapped by the errors StartClickHouse and StartKafka
// return when a program or the Kafka jars are missing.
var ErrNotInstalled = errors.New("testinfra: required software not installed")

func notInstalled(format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s", ErrNotInstalled, fmt.Sprintf(format, args...), InstallHint)
}

// process is one running server started by this package.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result; read only after done is closed
}

// startProcess starts argv in its own process group with stdout and stderr
// appended to logPath. The child gets SIGKILL when this process dies.
func startProcess(name, dir, logPath string, env []string, argv ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own copy
	fmt.Fprintf(logf, "=== %s: starting %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = nil
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("testinfra: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process group.
func (p *process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs. It reports whether
// SIGKILL was needed, and an error only if even SIGKILL did not end it.
func (p *process) stop(grace time.Duration) (killed bool, err error) {
	if p.exited() {
		return false, nil
	}
	p.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return false, nil
	case <-t.C:
	}
	return true, p.kill()
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() error {
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("testinfra: %s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// pid is the process id, 0 for no process or one that has exited.
func (p *process) pid() int {
	if p == nil || p.exited() {
		return 0
	}
	return p.cmd.Process.Pid
}

// CPUTime is the CPU time (user and system, all threads) process pid has
// used so far, from /proc/<pid>/stat (Linux).
func CPUTime(pid int) (time.Duration, error) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	_, d, err := parseStat(path, b)
	return d, err
}

// ThreadCPU is one thread's name (its comm: ClickHouse names its threads
// by pool, e.g. TCPHandler, BackgrProcPool) and the CPU time it has used.
type ThreadCPU struct {
	Name string
	CPU  time.Duration
}

// ThreadCPUTimes is the CPU time each live thread of process pid has used
// so far, by thread id, from /proc/<pid>/task/*/stat. A thread that exits
// between the listing and the read is left out.
func ThreadCPUTimes(pid int) (map[int]ThreadCPU, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[int]ThreadCPU, len(ents))
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		path := dir + "/" + e.Name() + "/stat"
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		if name, d, err := parseStat(path, b); err == nil {
			out[tid] = ThreadCPU{Name: name, CPU: d}
		}
	}
	return out, nil
}

// parseStat reads the command name and the CPU time (utime + stime) of a
// /proc stat file. The name, in parentheses, may hold spaces: fields count
// from after its closing parenthesis. utime and stime are fields 14 and
// 15, in clock ticks (USER_HZ, 100 on every Linux architecture Go
// supports).
func parseStat(path string, b []byte) (string, time.Duration, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 {
		return "", 0, fmt.Errorf("%s: %d fields", path, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, fmt.Errorf("%s: utime %q stime %q", path, f[11], f[12])
	}
	const userHZ = 100
	return string(b[open+1 : end]), time.Duration(ut+st) * (time.Second / userHZ), nil
}

// exitStatus describes how the exited process ended.
func (p *process) exitStatus() string {
	if p.err == nil {
		return "exited with status 0"
	}
	return p.err.Error()
}

// tailFile returns up to the last n lines (at most 16 KiB) of path, or "" if it
// cannot be read.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const maxBytes = 16 << 10
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		_, _ = f.Seek(st.Size()-maxBytes, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	b = bytes.TrimRight(b, "\n")
	lines := strings.Split(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tails formats the tails of several log files for an error message.
func tails(n int, paths ...string) string {
	var sb strings.Builder
	for _, p := range paths {
		t := tailFile(p, n)
		if strings.TrimSpace(t) == "" {
			continue
		}
		fmt.Fprintf(&sb, "\n--- tail of %s ---\n%s", p, t)
	}
	if sb.Len() == 0 {
		return "\n(no log output)"
	}
	return sb.String()
}

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 a moment
// ago. Use it to fix a server's ports before starting it, e.g. to write a
// cluster definition naming several servers.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testinfra: pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// fillPorts replaces zero entries of ports with free ports.
func fillPorts(ports ...*int) error {
	need := 0
	for _, p := range ports {
		if *p == 0 {
			need++
		}
	}
	if need == 0 {
		return nil
	}
	free, err := FreePorts(need)
	if err != nil {
		return err
	}
	for _, p := range ports {
		if *p == 0 {
			*p, free = free[0], free[1:]
		}
	}
	return nil
}

// sleep waits d, or less if done or ctxDone is closed first.
func sleep(d time.Duration, done, ctxDone <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-done:
	case <-ctxDone:
	}
}
