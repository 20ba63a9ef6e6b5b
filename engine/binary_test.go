package engine_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
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

// The binary, the process and the token hash the isolation suite still
// uses here; the fault and chaos suites are in package e2e.

var (
	buildOnce sync.Once
	sluiceBin string
	buildErr  error
)

func buildSluice(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluice-bin-")
		if err != nil {
			buildErr = err
			return
		}
		sluiceBin = filepath.Join(dir, "sluice")
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

// scenario holds the peak RSS sampled by proc.sampleRSS.
type scenario struct {
	t       *testing.T
	peakRSS atomic.Int64
}

// proc is a running sluice process.
type proc struct {
	s    *scenario
	name string
	cmd  *exec.Cmd
	log  string
	done chan error
}

// sampleRSS records the process's peak resident set (VmHWM) until it exits.
func (p *proc) sampleRSS() {
	status := fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)
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
					cur := p.s.peakRSS.Load()
					if kb*1024 <= cur || p.s.peakRSS.CompareAndSwap(cur, kb*1024) {
						break
					}
				}
			}
		}
		f.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

// term sends SIGTERM and requires a clean exit within 40s.
func (p *proc) term() {
	p.s.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			p.s.t.Fatalf("sluice %s exited with %v after SIGTERM", p.name, err)
		}
	case <-time.After(40 * time.Second):
		p.s.t.Fatalf("sluice %s did not drain within 40s", p.name)
	}
}

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}
