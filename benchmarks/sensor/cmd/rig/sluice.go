package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// buildSluice builds the sluice binary as `go tool -modfile=tools/go.mod task build` does
// (static, CGO_ENABLED=0).
func buildSluice(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/sluice")
	cmd.Dir = wasmbuild.RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build sluice: %v\n%s", err, out)
	}
	return bin, nil
}

// pipeline is one sluice run's configuration.
type pipeline struct {
	name      string // also the consumer group
	brokers   string
	topic     string
	dlq       string
	module    string // .wasm path
	table     string
	params    map[string]string // module parameters beside table
	chAddr    string
	cacheDir  string
	extraYAML string // merged into the arm's config (config), e.g. knobs under clickhouse:
}

func (p pipeline) yaml() string {
	return fmt.Sprintf(`kafka:
  brokers: [%s]
  group: %s
  topics: [%s]
  commit_interval: 500ms
module:
  path: %s
  tables: [%s]
  params: {table: %s%s}
  cache_dir: %s
dead_letter:
  topic: %s
clickhouse:
  addr: %s
observability:
  listen: 127.0.0.1:0
`, p.brokers, p.name, p.topic, p.module, p.table, p.table, p.moreParams(), p.cacheDir, p.dlq, p.chAddr)
}

// config is the arm's configuration with extraYAML merged in: its
// mappings merge key by key into the arm's (so that
// 'clickhouse: {insert_linger: 1s}' keeps the address), any other value
// replaces the arm's.
func (p pipeline) config() ([]byte, error) {
	var base, extra map[string]any
	if err := yaml.Unmarshal([]byte(p.yaml()), &base); err != nil {
		return nil, fmt.Errorf("the arm's sluice config: %w", err)
	}
	if err := yaml.Unmarshal([]byte(p.extraYAML), &extra); err != nil {
		return nil, fmt.Errorf("-sluice-yaml %q: %w", p.extraYAML, err)
	}
	return yaml.Marshal(mergeYAML(base, extra))
}

func mergeYAML(dst, src map[string]any) map[string]any {
	for k, v := range src {
		d, dok := dst[k].(map[string]any)
		s, sok := v.(map[string]any)
		if dok && sok {
			dst[k] = mergeYAML(d, s)
		} else {
			dst[k] = v
		}
	}
	return dst
}

// moreParams renders params after table, sorted.
func (p pipeline) moreParams() string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p.params)) {
		fmt.Fprintf(&b, ", %s: %s", k, p.params[k])
	}
	return b.String()
}

// sluiceProc is a running sluice binary.
type sluiceProc struct {
	cmd     *exec.Cmd
	log     string
	started time.Time
	done    chan error
}

func startSluice(bin, dir string, p pipeline) (*sluiceProc, error) {
	cfg := filepath.Join(dir, p.name+".yaml")
	b, err := p.config()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(cfg, b, 0o644); err != nil {
		return nil, err
	}
	s := &sluiceProc{log: filepath.Join(dir, p.name+".log"), done: make(chan error, 1)}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "run", "-config", cfg, "-log-level", "warn")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.started = time.Now()
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		err := s.cmd.Wait()
		logf.Close()
		s.done <- err
	}()
	return s, nil
}

func (s *sluiceProc) pid() int { return s.cmd.Process.Pid }

// exited reports whether the process has ended (with its error).
func (s *sluiceProc) exited() (bool, error) {
	select {
	case err := <-s.done:
		s.done <- err
		return true, err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits for the drain, then kills.
func (s *sluiceProc) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(45 * time.Second):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("sluice did not stop within 45s of SIGTERM")
	}
}

func (s *sluiceProc) logTail(n int) string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
