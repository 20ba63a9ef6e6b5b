package tenancy

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var quarantineAt = time.Date(2026, 3, 2, 9, 31, 0, 0, time.UTC)

func quarantineT(t *testing.T, s *Store, tenant, pipeline, sha string) QuarantineOutcome {
	t.Helper()
	out, err := s.Quarantine(tenant, pipeline, Quarantine{SHA256: sha, At: quarantineAt, Reason: "a call ran 12s past its 2s deadline", By: QuarantinedBy})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStoreQuarantineRestoresThePrevious: quarantining the active version
// restores the one before it (recorded as an activation), takes it off
// the rollback stack, survives a reopen, and is not done twice.
func TestStoreQuarantineRestoresThePrevious(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	v1, v2, v3 := putT(t, s, "acme", "logs", "v1"), putT(t, s, "acme", "logs", "v2"), putT(t, s, "acme", "logs", "v3")
	activateT(t, s, "acme", "logs", v1)
	activateT(t, s, "acme", "logs", v2)
	activateT(t, s, "acme", "logs", v3)
	if out := quarantineT(t, s, "acme", "logs", v3.SHA256); !out.WasActive || out.Restored != v2.SHA256 || out.Already {
		t.Fatalf("outcome %+v, want v2 restored", out)
	}
	check := func(s *Store) {
		t.Helper()
		st, err := s.List("acme", "logs")
		if err != nil {
			t.Fatal(err)
		}
		if st.Active != v2.SHA256 || len(st.RollbackStack) != 1 || st.RollbackStack[0] != v1.SHA256 {
			t.Fatalf("active %s, stack %v; want v2, [v1]", shortOr(st.Active), st.RollbackStack)
		}
		last := st.History[len(st.History)-1]
		if last.SHA256 != v2.SHA256 || last.Previous != v3.SHA256 || !last.Quarantine || last.By != QuarantinedBy || !last.At.Equal(quarantineAt) {
			t.Errorf("last activation %+v", last)
		}
		q, ok := s.QuarantineOf("acme", "logs", v3.SHA256)
		if !ok || q.Reason != "a call ran 12s past its 2s deadline" || !q.At.Equal(quarantineAt) {
			t.Errorf("QuarantineOf = %+v, %v", q, ok)
		}
		if all := s.Quarantines(); len(all) != 1 || all[0].Tenant != "acme" || all[0].Pipeline != "logs" || all[0].SHA256 != v3.SHA256 {
			t.Errorf("Quarantines = %+v", all)
		}
	}
	check(s)
	check(openT(t, dir))
	if out := quarantineT(t, s, "acme", "logs", v3.SHA256); !out.Already {
		t.Errorf("second quarantine: %+v, want Already", out)
	}
	// A rollback goes to v1, never to the quarantined v3.
	if to, _, err := s.Rollback("acme", "logs", "test"); err != nil || to.SHA256 != v1.SHA256 {
		t.Fatalf("rollback to %s, %v; want v1", shortOr(to.SHA256), err)
	}
	// An activation (the API lets only an admin) lifts it.
	activateT(t, s, "acme", "logs", v3)
	if _, ok := s.QuarantineOf("acme", "logs", v3.SHA256); ok {
		t.Error("the quarantine outlived the version's activation")
	}
}

// TestStoreQuarantineCases: without an earlier version the pipeline is
// left without one; an inactive version leaves the rollback stack; a
// binary the pipeline never listed (its upload check stuck) is kept as a
// quarantine alone, across a reopen and the version's deletion.
func TestStoreQuarantineCases(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir)
	only := putT(t, s, "acme", "logs", "only")
	activateT(t, s, "acme", "logs", only)
	if out := quarantineT(t, s, "acme", "logs", only.SHA256); !out.WasActive || out.Restored != "" {
		t.Fatalf("outcome %+v, want no version restored", out)
	}
	if _, ok := s.Active("acme", "logs"); ok {
		t.Fatal("a version is active after the only one was quarantined")
	}

	a, b := putT(t, s, "acme", "metrics", "a"), putT(t, s, "acme", "metrics", "b")
	activateT(t, s, "acme", "metrics", a)
	activateT(t, s, "acme", "metrics", b)
	if out := quarantineT(t, s, "acme", "metrics", a.SHA256); out.WasActive {
		t.Fatalf("outcome %+v for an inactive version", out)
	}
	if _, err := s.RollbackTarget("acme", "metrics"); !errors.Is(err, ErrNoRollback) {
		t.Fatalf("rollback target %v, want none", err)
	}

	never := shaOf(fakeWasm("never stored"))
	quarantineT(t, s, "globex", "events", never)
	if err := s.Delete("acme", "metrics", a.SHA256); err != nil {
		t.Fatal(err)
	}
	s2 := openT(t, dir)
	for _, k := range [][3]string{{"acme", "logs", only.SHA256}, {"acme", "metrics", a.SHA256}, {"globex", "events", never}} {
		if _, ok := s2.QuarantineOf(k[0], k[1], k[2]); !ok {
			t.Errorf("%s/%s: the quarantine of %s is lost", k[0], k[1], k[2][:8])
		}
	}
	if _, err := s.Quarantine("acme", "logs", Quarantine{SHA256: "abc"}); err == nil {
		t.Error("a quarantine of a malformed sha256 was taken")
	}
}

// TestStoreRefusesInconsistentQuarantines: a hand-edited manifest whose
// active version or rollback target is quarantined, or with a quarantine
// listed twice, is refused at open, not repaired.
func TestStoreRefusesInconsistentQuarantines(t *testing.T) {
	sha := shaOf(fakeWasm("a"))
	version := fmt.Sprintf(`{"sha256":%q,"size":%d,"uploaded_at":"2026-01-02T03:04:05Z","uploaded_by":"x"}`, sha, len(fakeWasm("a")))
	q := fmt.Sprintf(`{"sha256":%q,"at":"2026-01-02T03:04:05Z","reason":"r","by":"b"}`, sha)
	for name, tc := range map[string]struct{ fields, want string }{
		"active":  {`"active":"` + sha + `","versions":[` + version + `],"quarantined":[` + q + `]`, "the active version"},
		"stack":   {`"versions":[` + version + `],"rollback_stack":["` + sha + `"],"quarantined":[` + q + `]`, "rollback_stack[0]"},
		"twice":   {`"versions":[` + version + `],"quarantined":[` + q + `,` + q + `]`, "listed twice"},
		"bad sha": {`"versions":[],"quarantined":[{"sha256":"x","at":"2026-01-02T03:04:05Z"}]`, "quarantined[0]"},
	} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "blobs", sha+".wasm"), fakeWasm("a"), 0o600); err != nil {
			t.Fatal(err)
		}
		m := `{"format":1,"pipelines":[{"tenant":"acme","pipeline":"logs",` + tc.fields + `}]}`
		if err := os.WriteFile(filepath.Join(dir, manifestName), []byte(m), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenStore(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: OpenStore: %v, want ErrCorrupt naming %q", name, err, tc.want)
		}
	}
}

// TestAPIQuarantine: the tenant sees the quarantine in its version list;
// its activation and its upload of the quarantined binary are refused
// with 409 and the reason; an admin's activation runs it and lifts the
// quarantine, audited.
func TestAPIQuarantine(t *testing.T) {
	api := newTestAPI(t, nil)
	good, bad := fakeWasm("good"), fakeWasm("bad")
	for _, w := range [][]byte{good, bad} {
		expectStatus(t, "upload", api.upload(acmeToken, "acme", "logs", w), http.StatusCreated)
	}
	out := quarantineT(t, api.store, "acme", "logs", shaOf(bad))
	if out.WasActive {
		t.Fatal("an inactive version was active")
	}
	list := api.do("GET", logsModules, acmeToken, nil)
	expectStatus(t, "list", list, http.StatusOK)
	qs, _ := list.body["quarantined"].([]any)
	if len(qs) != 1 {
		t.Fatalf("list: quarantined %v, want one", list.body["quarantined"])
	}
	q := qs[0].(map[string]any)
	if q["sha256"] != shaOf(bad) || q["reason"] != "a call ran 12s past its 2s deadline" || q["at"] != "2026-03-02T09:31:00Z" || q["by"] != QuarantinedBy {
		t.Errorf("quarantine listed as %v", q)
	}

	r := api.do("POST", logsModules+"/"+shaOf(bad)[:12]+"/activate", acmeToken, nil)
	expectStatus(t, "tenant activation", r, http.StatusConflict)
	if !strings.Contains(r.errText(), "an admin must activate it") || !strings.Contains(r.errText(), "12s past its 2s deadline") {
		t.Errorf("refusal %q", r.errText())
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "activate", "outcome": "refused", "status": 409, "sha256": shaOf(bad)})
	if n := api.engine.callCount(); n != 0 {
		t.Fatalf("the engine was asked to run a quarantined version (%d calls)", n)
	}
	// Deleted, then uploaded again by the tenant: refused.
	expectStatus(t, "delete", api.do("DELETE", logsModules+"/"+shaOf(bad), acmeToken, nil), http.StatusNoContent)
	r = api.upload(acmeToken, "acme", "logs", bad)
	expectStatus(t, "tenant upload", r, http.StatusConflict)
	if !strings.Contains(r.errText(), "quarantined") {
		t.Errorf("upload refusal %q", r.errText())
	}

	// An admin uploads and activates it: it runs, and the quarantine goes.
	expectStatus(t, "admin upload", api.upload(adminToken, "acme", "logs", bad), http.StatusCreated)
	r = api.do("POST", logsModules+"/"+shaOf(bad)+"/activate", adminToken, nil)
	expectStatus(t, "admin activation", r, http.StatusOK)
	if got := api.engine.runningSHA("acme/logs"); got != shaOf(bad) {
		t.Errorf("the engine runs %s, want the activated version", got)
	}
	if _, ok := api.store.QuarantineOf("acme", "logs", shaOf(bad)); ok {
		t.Error("the quarantine outlived the admin's activation")
	}
	var lifted bool
	for _, rec := range api.auditRecords() {
		if rec["action"] == "unquarantine" && rec["actor"] == "admin" && rec["sha256"] == shaOf(bad) {
			lifted = true
		}
	}
	if !lifted {
		t.Error("no audit record of the lifted quarantine")
	}
}

// TestAuditQuarantine: the engine's record of a quarantine is an audit
// record like the API's.
func TestAuditQuarantine(t *testing.T) {
	var buf bytes.Buffer
	log := newJSONLogger(&buf)
	AuditQuarantine(log, "acme", "logs", Quarantine{SHA256: strings.Repeat("a", 64), Reason: "stuck"}, QuarantineOutcome{WasActive: true, Restored: strings.Repeat("b", 64)})
	for _, want := range []string{`"msg":"audit"`, `"action":"quarantine"`, `"actor":"sluice"`, `"tenant":"acme"`, `"pipeline":"logs"`, `"reason":"stuck"`, `"restored":"bbbb`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("audit record %s lacks %s", buf.String(), want)
		}
	}
}

func newJSONLogger(w *bytes.Buffer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
