package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/stuckcall"
	"github.com/sluicehq/sluice/wasmhost"
)

// StuckCallConfig configures the catching of module calls that their
// deadline did not stop (docs/operations.md, "Stuck module calls"; the
// design is docs/adr/0007-stuck-call-detection.md).
type StuckCallConfig struct {
	// Watch runs the stuck-call watcher: sluice run starts a small child
	// process that reads the call journal and kills the process when a
	// module call runs Grace past its deadline, or when the process makes
	// no progress for Grace with a call in progress, while burning CPU (a
	// guest the interrupt cannot reach blocks the Go runtime's
	// stop-the-world, and every goroutine with it). The next start quarantines the module version it names.
	// "on" (default) or "off". It needs Linux; elsewhere it is off.
	Watch string `yaml:"watch"`
	// Grace is how long past its deadline a module call may run, and how
	// long the process may make no progress with a call in progress, before
	// the watcher kills it. Default 10s.
	Grace time.Duration `yaml:"grace"`
	// Dir keeps the call journals (journals/, one per process) and the
	// records of stuck calls (stuck-calls/), which the next start reads.
	// Processes may share it, but not across module stores. Default:
	// admin.store_dir with tenants, else the user's cache directory +
	// /sluice/state, else the system's temporary directory +
	// /sluice-state.
	Dir string `yaml:"dir"`
}

// Watching reports whether the watcher runs.
func (c StuckCallConfig) Watching() bool { return c.Watch != "off" }

// JournalDir holds the call journals, one per process, so that several
// may share Dir.
func (c StuckCallConfig) JournalDir() string { return filepath.Join(c.Dir, "journals") }

// JournalPath is where the process pid keeps its call journal.
func (c StuckCallConfig) JournalPath(pid int) string {
	return filepath.Join(c.JournalDir(), fmt.Sprintf("%d.journal", pid))
}

func (c *Config) validateStuckCalls() error {
	s := &c.StuckCalls
	switch s.Watch {
	case "":
		s.Watch = "on"
	case "on", "off":
	default:
		return fmt.Errorf("stuck_calls.watch: %q is not on or off", s.Watch)
	}
	if s.Grace == 0 {
		s.Grace = 10 * time.Second
	}
	if s.Grace < 0 {
		return fmt.Errorf("stuck_calls.grace must be positive")
	}
	switch {
	case s.Dir != "":
		s.Dir = filepath.Clean(s.Dir)
	case len(c.Tenants) > 0:
		s.Dir = c.Admin.StoreDir
	default:
		if dir, err := os.UserCacheDir(); err == nil {
			s.Dir = filepath.Join(dir, "sluice", "state")
		} else {
			s.Dir = filepath.Join(os.TempDir(), "sluice-state")
		}
	}
	return nil
}

// WithCallJournal records every module call of the pipeline, its checks
// of uploads and activations included, in j, for the stuck-call watcher.
// Default: none.
func WithCallJournal(j *wasmhost.CallJournal) Option {
	return func(o *options) { o.journal = j }
}

// applyStuckCalls acts on what the stuck-call watcher left in
// stuck_calls.dir before this start: with tenants, each version it named
// is quarantined (the version before it restored) and its record
// removed; without, a start whose module.path is a version it named is
// refused until the operator acts. Records that name no culprit are
// logged and kept a day, for the watcher to compare the next freeze with.
func (p *Pipeline) applyStuckCalls(moduleSHA string) error {
	dir := p.cfg.StuckCalls.Dir
	verdicts, err := stuckcall.Read(dir)
	if err != nil {
		return fmt.Errorf("stuck_calls.dir: %w", err)
	}
	audit := p.log.With("log", "audit")
	for _, v := range verdicts {
		if len(v.Culprits) == 0 {
			if time.Since(v.DetectedAt) > 24*time.Hour {
				_ = stuckcall.Remove(v)
				continue
			}
			p.log.Error("the process was killed for a stuck module call, and no culprit could be named yet (a second freeze with one of them in progress names it)",
				"killed_at", v.DetectedAt, "pid", v.PID, "reason", v.Reason, "suspects", describeCalls(v.Suspects), "record", v.Path)
			continue
		}
		if p.store == nil {
			for _, c := range v.Versions() {
				if c.SHA256 == moduleSHA {
					return fmt.Errorf("module.path %s (sha256 %s) is quarantined: %s (killed at %s, pid %d); fix the module, or remove %s to run this binary again",
						p.cfg.Module.Path, moduleSHA, v.Reason, v.DetectedAt.Format(time.RFC3339), v.PID, v.Path)
				}
			}
			continue // about another binary: kept, should it come back
		}
		for _, c := range v.Versions() {
			tenant, pipeline, ok := strings.Cut(c.Module, "/")
			if !ok || !p.cfg.hasTenantPipeline(tenant, pipeline) {
				p.log.Warn("a stuck-call record names a module no tenant pipeline runs; nothing to quarantine",
					"module", c.Module, "sha256", c.SHA256, "record", v.Path)
				continue
			}
			q := tenancy.Quarantine{SHA256: c.SHA256, At: v.DetectedAt, Reason: v.Reason, By: tenancy.QuarantinedBy}
			out, err := p.store.Quarantine(tenant, pipeline, q)
			if err != nil {
				return fmt.Errorf("stuck_calls: quarantine tenant %s pipeline %s version %s: %w", tenant, pipeline, c.SHA256, err)
			}
			if out.Already {
				continue
			}
			tenancy.AuditQuarantine(audit, tenant, pipeline, q, out)
			restored := out.Restored
			switch {
			case !out.WasActive:
				restored = "(it was not active)"
			case restored == "":
				restored = "none: the pipeline waits for an activation"
			}
			p.log.Error("module version quarantined: a call of it could not be interrupted and the process was killed; an admin's activation runs it again",
				"tenant", tenant, "pipeline", pipeline, "sha256", c.SHA256, "deadline", c.Deadline.String(), "ran", c.Ran.String(),
				"killed_at", v.DetectedAt, "restored", restored, "reason", v.Reason)
		}
		if err := stuckcall.Remove(v); err != nil {
			return fmt.Errorf("stuck_calls.dir: %w", err)
		}
	}
	return nil
}

func describeCalls(cs []stuckcall.Call) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (sha256 %s, ran %v of %v)", c.Module, c.SHA256, c.Ran, c.Deadline)
	}
	return b.String()
}

// hasTenantPipeline reports whether the config has the tenant pipeline.
func (c *Config) hasTenantPipeline(tenant, pipeline string) bool {
	for _, t := range c.Tenants {
		for _, pl := range t.Pipelines {
			if t.ID == tenant && pl.Name == pipeline {
				return true
			}
		}
	}
	return false
}

// quarantinedFile reports whether a tenant pipeline's configured module
// file is quarantined, and logs it: the pipeline then waits for an
// activation.
func (p *Pipeline) quarantinedFile(r *route, wasm []byte, from string) bool {
	if p.store == nil {
		return false
	}
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	q, ok := p.store.QuarantineOf(r.tenant, r.pipeline, sha)
	if ok {
		p.log.Error("the pipeline's configured module is quarantined; the pipeline waits for an activation", "tenant", r.tenant,
			"pipeline", r.pipeline, "from", from, "sha256", sha, "quarantined_at", q.At, "reason", q.Reason)
	}
	return ok
}

var descQuarantined = prometheus.NewDesc("sluice_module_quarantined",
	"1 for each module version quarantined because a call of it could not be interrupted (only an admin's activation runs it again).",
	[]string{"tenant", "pipeline", "sha256"}, nil)

// quarantineCollector exports the store's quarantines.
type quarantineCollector struct{ store *tenancy.Store }

func (c quarantineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descQuarantined }

func (c quarantineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range c.store.Quarantines() {
		ch <- prometheus.MustNewConstMetric(descQuarantined, prometheus.GaugeValue, 1, q.Tenant, q.Pipeline, q.SHA256)
	}
}
