//go:build unix

package wasmhost

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests of what a hostile module costs the host run the module in a child
// process (this test binary, re-executed) under an address-space limit, so
// that a host driven out of memory kills the child, not the test run, and
// so that the child's peak RSS is the module's cost alone.

const (
	childEnv      = "WASMHOST_TEST_CHILD"
	childASEnv    = "WASMHOST_TEST_CHILD_AS"
	childAddrLim  = 6 << 30 // the child's address-space limit
	childDeadline = 2 * time.Minute
)

// childScenarios are what a child can run: each returns what it saw, for
// the parent to check.
var childScenarios = map[string]func(ctx context.Context) (string, error){}

// childResult is what a child reported.
type childResult struct {
	result string // the scenario's answer
	peakMB float64
	exit   error
	output string // all it printed
}

// runChild runs a scenario in a child process and returns its report.
func runChild(t *testing.T, name string) childResult {
	t.Helper()
	if _, ok := childScenarios[name]; !ok {
		t.Fatalf("no child scenario %q", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), childDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+name, childASEnv+"="+strconv.Itoa(childAddrLim))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := childResult{exit: err, output: out.String()}
	sc := bufio.NewScanner(bytes.NewReader(out.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "CHILD-RESULT "); ok {
			res.result = v
		}
		if v, ok := strings.CutPrefix(line, "CHILD-PEAK-KB "); ok {
			kb, _ := strconv.ParseFloat(v, 64)
			res.peakMB = kb / 1024
		}
	}
	return res
}

// mustRunChild is runChild that fails the test unless the child ended well.
func mustRunChild(t *testing.T, name string) childResult {
	t.Helper()
	res := runChild(t, name)
	if res.exit != nil || res.peakMB == 0 {
		out := res.output
		if len(out) > 4000 {
			out = out[:4000] + "…"
		}
		t.Fatalf("child %s: %v (peak %.0f MB); it printed:\n%s", name, res.exit, res.peakMB, out)
	}
	return res
}

// runChildScenario is the child's side: it runs the scenario and prints
// its result and its peak RSS (VmHWM).
func runChildScenario(name string) int {
	if v, err := strconv.ParseUint(os.Getenv(childASEnv), 10, 64); err == nil {
		lim := &syscall.Rlimit{Cur: v, Max: v}
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, lim); err != nil {
			fmt.Println("setrlimit:", err)
			return 3
		}
	}
	f := childScenarios[name]
	if f == nil {
		fmt.Println("no scenario", name)
		return 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), childDeadline)
	defer cancel()
	res, err := f(ctx)
	if err != nil {
		fmt.Printf("CHILD-RESULT error: %v\n", err)
	} else {
		fmt.Printf("CHILD-RESULT %s\n", res)
	}
	fmt.Printf("CHILD-PEAK-KB %d\n", peakRSSKB())
	return 0
}

// peakRSSKB is the process's peak resident set size.
func peakRSSKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}
