package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/stuckcall"
)

func shaHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func fakeModule(tag string) []byte { return []byte("\x00asm\x01\x00\x00\x00" + tag) }

func writeVerdict(t *testing.T, dir string, at time.Time, culprits, suspects []stuckcall.Call) stuckcall.Verdict {
	t.Helper()
	v := stuckcall.Verdict{DetectedAt: at, PID: 99, Reason: "a call ran 12s, past its 2s deadline", Culprits: culprits, Suspects: suspects}
	if err := stuckcall.Write(dir, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func stuck(module string, wasm []byte) stuckcall.Call {
	return stuckcall.Call{Module: module, SHA256: shaHex(wasm), Deadline: stuckcall.Duration(2 * time.Second), Ran: stuckcall.Duration(12 * time.Second)}
}

// TestApplyStuckCallsTenants: at startup, a version the watcher named is
// quarantined and the one before it restored, audited, and its record
// removed; a record naming a pipeline the config lacks is dropped; an
// undecided one is kept for the watcher (a day at most).
func TestApplyStuckCallsTenants(t *testing.T) {
	dir := t.TempDir()
	store, err := tenancy.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := fakeModule("v1"), fakeModule("v2")
	for _, w := range [][]byte{v1, v2} {
		v, _, err := store.Put("acme", "logs", w, "test", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.Activate("acme", "logs", v.SHA256, "test"); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Tenants: []TenantConfig{{ID: "acme", Pipelines: []TenantPipelineConfig{{Name: "logs"}}}},
		StuckCalls: StuckCallConfig{Dir: dir}}
	var logs bytes.Buffer
	p := &Pipeline{cfg: cfg, store: store, log: slog.New(slog.NewTextHandler(&logs, nil))}

	now := time.Now().UTC()
	named := writeVerdict(t, dir, now, []stuckcall.Call{stuck("acme/logs", v2), stuck("acme/logs", v2), stuck("gone/pipeline", v1)}, nil)
	undecided := writeVerdict(t, dir, now.Add(-time.Hour), nil, []stuckcall.Call{stuck("acme/logs", v1), stuck("b/q", v2)})
	stale := writeVerdict(t, dir, now.Add(-25*time.Hour), nil, []stuckcall.Call{stuck("acme/logs", v1)})

	if err := p.applyStuckCalls(""); err != nil {
		t.Fatal(err)
	}
	if a, ok := store.Active("acme", "logs"); !ok || a.SHA256 != shaHex(v1) {
		t.Errorf("active %v after the quarantine, want v1 restored", a.SHA256)
	}
	q, ok := store.QuarantineOf("acme", "logs", shaHex(v2))
	if !ok || q.Reason != named.Reason || !q.At.Equal(named.DetectedAt) || q.By != tenancy.QuarantinedBy {
		t.Errorf("quarantine %+v, %v", q, ok)
	}
	for path, want := range map[string]bool{named.Path: false, undecided.Path: true, stale.Path: false} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(path), err == nil, want)
		}
	}
	out := logs.String()
	for _, want := range []string{
		`msg=audit log=audit action=quarantine actor=sluice token="" tenant=acme pipeline=logs sha256=` + shaHex(v2),
		"restored=" + shaHex(v1),
		`msg="module version quarantined`,
		"no culprit could be named yet",
		`msg="a stuck-call record names a module no tenant pipeline runs; nothing to quarantine" module=gone/pipeline`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "action=quarantine"); n != 1 {
		t.Errorf("%d quarantine audit records, want 1 (the version was named twice)", n)
	}

	// The metric says so.
	reg := prometheus.NewRegistry()
	reg.MustRegister(quarantineCollector{store})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got = append(got, fmt.Sprintf("%s %s/%s %s %v", mf.GetName(), labels["tenant"], labels["pipeline"], labels["sha256"], m.GetGauge().GetValue()))
		}
	}
	if want := "sluice_module_quarantined acme/logs " + shaHex(v2) + " 1"; len(got) != 1 || got[0] != want {
		t.Errorf("metrics %q, want %q", got, want)
	}

	// Applied again (a crash before the record was removed): nothing more.
	writeVerdict(t, dir, now, []stuckcall.Call{stuck("acme/logs", v2)}, nil)
	logs.Reset()
	if err := p.applyStuckCalls(""); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "action=quarantine") {
		t.Error("a quarantine was applied twice")
	}
}

// TestApplyStuckCallsModulePath: without tenants, a start whose module
// is a version the watcher named is refused, naming the record to
// remove; another binary starts, and the record stays.
func TestApplyStuckCallsModulePath(t *testing.T) {
	dir := t.TempDir()
	bad, good := fakeModule("bad"), fakeModule("good")
	v := writeVerdict(t, dir, time.Now(), []stuckcall.Call{stuck("log-normalize", bad)}, nil)
	p := &Pipeline{cfg: Config{Module: ModuleConfig{Path: "/etc/sluice/m.wasm"}, StuckCalls: StuckCallConfig{Dir: dir}}, log: slog.New(slog.DiscardHandler)}
	err := p.applyStuckCalls(shaHex(bad))
	if err == nil {
		t.Fatal("a quarantined module.path started")
	}
	for _, want := range []string{"module.path /etc/sluice/m.wasm (sha256 " + shaHex(bad) + ") is quarantined", "past its 2s deadline", "remove " + v.Path} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := p.applyStuckCalls(shaHex(good)); err != nil {
		t.Fatalf("another binary: %v", err)
	}
	if _, err := os.Stat(v.Path); err != nil {
		t.Errorf("the record is gone: %v", err)
	}
}

// TestStuckCallConfig: defaults and refusals.
func TestStuckCallConfig(t *testing.T) {
	c := Config{Admin: AdminConfig{StoreDir: "/var/lib/sluice/modules"}, Tenants: []TenantConfig{{ID: "a"}}}
	if err := c.validateStuckCalls(); err != nil {
		t.Fatal(err)
	}
	if s := c.StuckCalls; s.Watch != "on" || s.Grace != 10*time.Second || s.Dir != "/var/lib/sluice/modules" || !s.Watching() ||
		s.JournalPath(7) != "/var/lib/sluice/modules/journals/7.journal" {
		t.Errorf("defaults with tenants: %+v", s)
	}
	c = Config{}
	if err := c.validateStuckCalls(); err != nil || c.StuckCalls.Dir == "" {
		t.Errorf("defaults without tenants: %+v, %v", c.StuckCalls, err)
	}
	for _, bad := range []StuckCallConfig{{Watch: "yes"}, {Grace: -time.Second}} {
		c := Config{StuckCalls: bad}
		if err := c.validateStuckCalls(); err == nil || !strings.Contains(err.Error(), "stuck_calls.") {
			t.Errorf("%+v: %v, want an error naming the key", bad, err)
		}
	}
}
