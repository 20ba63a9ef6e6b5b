package tenancy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	adminToken  = "root-token"
	acmeToken   = "acme-token"
	globexToken = "globex-token"
)

// testTenants: acme has two pipelines, globex one.
var testTenants = map[string][]string{"acme": {"logs", "metrics"}, "globex": {"events"}}

// allowedTables are the tables each pipeline may write.
var allowedTables = map[string][]string{"acme/logs": {"acme_logs"}, "acme/metrics": {"acme_metrics"}, "globex/events": {"globex_events"}}

// fakeValidator reads a fake module's claims from its text: "abi=N" for
// its ABI version, "table=NAME" for each table it wants; a sample line
// "bad" fails the dry run.
type fakeValidator struct{}

func (fakeValidator) CheckUpload(_ context.Context, _, _ string, wasm []byte) error {
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return errors.New("not a WebAssembly binary (no \\0asm magic)")
	}
	if bytes.Contains(wasm, []byte("abi=7")) {
		return errors.New("built for guest ABI version 7; this host supports [1]")
	}
	return nil
}

func (fakeValidator) CheckActivation(_ context.Context, tenant, pipeline string, wasm, sample []byte) error {
	for _, f := range strings.Fields(string(wasm)) {
		if table, ok := strings.CutPrefix(f, "table="); ok && !slices.Contains(allowedTables[tenant+"/"+pipeline], table) {
			return fmt.Errorf("the module refused init: it wants table %s, and pipeline %s may write only %v", table, pipeline, allowedTables[tenant+"/"+pipeline])
		}
	}
	if bytes.Contains(sample, []byte("bad")) {
		return errors.New("sample line 1: error: bad record")
	}
	return nil
}

// fakeActivator records what the engine would run, per pipeline.
type fakeActivator struct {
	mu      sync.Mutex
	calls   []string // tenant/pipeline=sha
	running map[string]string
	fail    error
	failN   int // fail only the failN-th call (1-based); 0: every call while fail is set
}

func (a *fakeActivator) Activate(_ context.Context, tenant, pipeline string, v Version, wasm []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, tenant+"/"+pipeline+"="+v.SHA256)
	if a.fail != nil && (a.failN == 0 || a.failN == len(a.calls)) {
		return a.fail
	}
	if shaOf(wasm) != v.SHA256 {
		return fmt.Errorf("the binary does not match version %s", v.SHA256)
	}
	if a.running == nil {
		a.running = map[string]string{}
	}
	a.running[tenant+"/"+pipeline] = v.SHA256
	return nil
}

func (a *fakeActivator) runningSHA(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running[key]
}

func (a *fakeActivator) callCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// testAPI is the API over a real HTTP server, with its store, engine and
// audit log.
type testAPI struct {
	t       *testing.T
	url     string
	handler http.Handler
	store   *Store
	engine  *fakeActivator

	auditMu sync.Mutex
	audit   bytes.Buffer
}

func (a *testAPI) Write(p []byte) (int, error) {
	a.auditMu.Lock()
	defer a.auditMu.Unlock()
	return a.audit.Write(p)
}

func newTestAPI(t *testing.T, tweak func(*ServerOptions)) *testAPI {
	t.Helper()
	auth, err := NewAuth([]string{HashToken(adminToken)}, map[string][]string{
		"acme": {HashToken(acmeToken)}, "globex": {HashToken(globexToken)}})
	if err != nil {
		t.Fatal(err)
	}
	api := &testAPI{t: t, store: openT(t, t.TempDir()), engine: &fakeActivator{}}
	opts := ServerOptions{Store: api.store, Auth: auth, Tenants: testTenants, Validator: fakeValidator{},
		Activator: api.engine, Audit: slog.New(slog.NewJSONHandler(api, nil)), MaxModuleBytes: 1 << 10, MaxSampleBytes: 64}
	if tweak != nil {
		tweak(&opts)
	}
	h, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	api.url, api.handler = srv.URL, h
	return api
}

// response is a decoded API answer.
type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (r response) errText() string { s, _ := r.body["error"].(string); return s }

func (a *testAPI) do(method, path, token string, body io.Reader) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			a.t.Fatalf("%s %s: body %q is not JSON: %v", method, path, raw, err)
		}
	}
	return r
}

func (a *testAPI) upload(token, tenant, pipeline string, wasm []byte) response {
	a.t.Helper()
	return a.do("POST", "/v1/tenants/"+tenant+"/pipelines/"+pipeline+"/modules", token, bytes.NewReader(wasm))
}

func (a *testAPI) auditRecords() []map[string]any {
	a.auditMu.Lock()
	defer a.auditMu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(a.audit.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			a.t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// lastAudit is the last audit record; it fails the test if there is none.
func (a *testAPI) lastAudit() map[string]any {
	a.t.Helper()
	recs := a.auditRecords()
	if len(recs) == 0 {
		a.t.Fatal("no audit record")
	}
	return recs[len(recs)-1]
}

func expectStatus(t *testing.T, what string, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: status %d (%s), want %d", what, r.status, r.raw, want)
	}
}

// expectAudit checks fields of an audit record.
func expectAudit(t *testing.T, rec map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if fmt.Sprint(rec[k]) != fmt.Sprint(v) {
			t.Errorf("audit %s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
}

const logsModules = "/v1/tenants/acme/pipelines/logs/modules"

func TestAPIUnauthenticated(t *testing.T) {
	api := newTestAPI(t, nil)
	for _, tc := range []struct{ method, path, token string }{
		{"GET", "/v1/whoami", ""},
		{"GET", "/v1/whoami", "wrong-token"},
		{"POST", logsModules, "wrong-token"},
		{"GET", logsModules, HashToken(acmeToken)}, // the hash is not the token
		{"POST", logsModules + "/0123456789/activate", ""},
		{"DELETE", logsModules + "/0123456789", "wrong-token"},
		{"GET", "/v1/no-such-route", ""}, // nothing is revealed without a token
		{"PUT", logsModules, ""},
	} {
		r := api.do(tc.method, tc.path, tc.token, strings.NewReader("\x00asm"))
		expectStatus(t, tc.method+" "+tc.path, r, http.StatusUnauthorized)
		if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Errorf("%s %s: WWW-Authenticate %q", tc.method, tc.path, got)
		}
		if r.errText() != "missing or unknown bearer token" {
			t.Errorf("%s %s: error %q", tc.method, tc.path, r.errText())
		}
		expectAudit(t, api.lastAudit(), map[string]any{"actor": "anonymous", "outcome": "refused", "status": 401})
	}
	if n := len(api.auditRecords()); n != 8 {
		t.Fatalf("%d audit records, want one per refused request (8)", n)
	}
	api.auditMu.Lock()
	defer api.auditMu.Unlock()
	if strings.Contains(api.audit.String(), "wrong-token") {
		t.Fatal("the audit log holds a presented token")
	}
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Fatal("an unauthenticated upload was stored")
	}
}

func TestAPIOtherTenantIsForbidden(t *testing.T) {
	api := newTestAPI(t, nil)
	expectStatus(t, "globex uploads its own", api.upload(globexToken, "globex", "events", fakeWasm("g")), http.StatusCreated)
	gsha := shaOf(fakeWasm("g"))
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1/tenants/globex/pipelines/events/modules"},
		{"GET", "/v1/tenants/globex/pipelines/events/modules"},
		{"POST", "/v1/tenants/globex/pipelines/events/modules/" + gsha + "/activate"},
		{"POST", "/v1/tenants/globex/pipelines/events/rollback"},
		{"DELETE", "/v1/tenants/globex/pipelines/events/modules/" + gsha},
		{"GET", "/v1/tenants/nosuch/pipelines/x/modules"}, // 403, not 404: no probing for tenants
		{"GET", "/v1/tenants"},
	} {
		r := api.do(tc.method, tc.path, acmeToken, bytes.NewReader(fakeWasm("a")))
		expectStatus(t, "acme: "+tc.method+" "+tc.path, r, http.StatusForbidden)
		expectAudit(t, api.lastAudit(), map[string]any{"actor": "acme", "outcome": "refused", "status": 403,
			"token": HashToken(acmeToken)[:19]})
	}
	if st, _ := api.store.List("globex", "events"); len(st.Versions) != 1 || st.Active != "" {
		t.Fatalf("globex's pipeline changed: %+v", st)
	}
	if api.engine.callCount() != 0 {
		t.Fatal("the engine was asked to activate")
	}
	// The admin may act on every tenant.
	r := api.do("POST", "/v1/tenants/globex/pipelines/events/modules/"+gsha[:8]+"/activate", adminToken, nil)
	expectStatus(t, "admin activates globex's", r, http.StatusOK)
	expectAudit(t, api.lastAudit(), map[string]any{"actor": "admin", "tenant": "globex", "action": "activate", "outcome": "ok", "sha256": gsha})
}

func TestAPINotFound(t *testing.T) {
	api := newTestAPI(t, nil)
	for _, tc := range []struct{ token, method, path, want string }{
		{adminToken, "GET", "/v1/tenants/nosuch/pipelines/logs/modules", "no tenant nosuch"},
		{acmeToken, "GET", "/v1/tenants/acme/pipelines/nosuch/modules", "tenant acme has no pipeline nosuch"},
		{acmeToken, "POST", "/v1/tenants/acme/pipelines/events/modules", "tenant acme has no pipeline events"}, // globex's pipeline name
		{acmeToken, "POST", logsModules + "/0123456789abcdef/activate", "no such module version"},
		{acmeToken, "DELETE", logsModules + "/0123456789abcdef", "no such module version"},
		{acmeToken, "GET", "/v1/nothing", "no route GET /v1/nothing"},
	} {
		r := api.do(tc.method, tc.path, tc.token, nil)
		expectStatus(t, tc.method+" "+tc.path, r, http.StatusNotFound)
		if !strings.Contains(r.errText(), tc.want) {
			t.Errorf("%s %s: error %q, want %q", tc.method, tc.path, r.errText(), tc.want)
		}
	}
	r := api.do("POST", logsModules+"/xyz/activate", acmeToken, nil)
	expectStatus(t, "bad reference", r, http.StatusBadRequest)
}

func TestAPIMethodNotAllowed(t *testing.T) {
	api := newTestAPI(t, nil)
	r := api.do("PUT", logsModules, acmeToken, nil)
	expectStatus(t, "PUT modules", r, http.StatusMethodNotAllowed)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q, want GET and POST", allow)
	}
	if !strings.Contains(r.errText(), "PUT is not allowed") {
		t.Fatalf("error %q", r.errText())
	}
	expectStatus(t, "GET activate", api.do("GET", logsModules+"/01234567/activate", acmeToken, nil), http.StatusMethodNotAllowed)
}

func TestAPIUpload(t *testing.T) {
	api := newTestAPI(t, nil)
	wasm := fakeWasm("a table=acme_logs")
	r := api.do("POST", logsModules+"?note=first+try", acmeToken, bytes.NewReader(wasm))
	expectStatus(t, "first upload", r, http.StatusCreated)
	v := r.body["version"].(map[string]any)
	if v["sha256"] != shaOf(wasm) || v["size"] != float64(len(wasm)) || v["note"] != "first try" || r.body["created"] != true {
		t.Fatalf("upload response %s", r.raw)
	}
	if v["uploaded_by"] != "tenant acme ("+HashToken(acmeToken)[:19]+")" {
		t.Fatalf("uploaded_by %v", v["uploaded_by"])
	}
	expectAudit(t, api.lastAudit(), map[string]any{"msg": "audit", "level": "INFO", "action": "upload", "actor": "acme",
		"token": HashToken(acmeToken)[:19], "tenant": "acme", "pipeline": "logs", "sha256": shaOf(wasm), "outcome": "ok", "status": 201})
	if remote, _ := api.lastAudit()["remote"].(string); !strings.HasPrefix(remote, "127.0.0.1:") {
		t.Fatalf("audit remote %q", remote)
	}

	r = api.upload(acmeToken, "acme", "logs", wasm)
	expectStatus(t, "same upload", r, http.StatusOK)
	if r.body["created"] != false {
		t.Fatalf("second upload response %s", r.raw)
	}
	// The same binary in another pipeline is another version there.
	expectStatus(t, "other pipeline", api.upload(acmeToken, "acme", "metrics", wasm), http.StatusCreated)

	r = api.do("GET", logsModules, acmeToken, nil)
	expectStatus(t, "list", r, http.StatusOK)
	if vs := r.body["versions"].([]any); len(vs) != 1 || r.body["active"] != nil {
		t.Fatalf("list %s", r.raw)
	}
	expectStatus(t, "bad note", api.do("POST", logsModules+"?note=a%0Ab", acmeToken, bytes.NewReader(wasm)), http.StatusBadRequest)
}

func TestAPIUploadTooLarge(t *testing.T) {
	api := newTestAPI(t, nil)
	big := fakeWasm(strings.Repeat("x", 2<<10))

	r := api.upload(acmeToken, "acme", "logs", big) // with Content-Length
	expectStatus(t, "oversized", r, http.StatusRequestEntityTooLarge)
	if !strings.Contains(r.errText(), fmt.Sprintf("module of %d bytes is over the limit of 1024 bytes", len(big))) {
		t.Fatalf("error %q", r.errText())
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "upload", "outcome": "refused", "status": 413, "actor": "acme"})

	// Streamed, with no Content-Length: refused once past the cap.
	r = api.do("POST", logsModules, acmeToken, io.MultiReader(bytes.NewReader(big))) // not a *bytes.Reader: chunked
	expectStatus(t, "oversized, chunked", r, http.StatusRequestEntityTooLarge)
	if !strings.Contains(r.errText(), "module is over the limit of 1024 bytes") {
		t.Fatalf("error %q", r.errText())
	}
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Fatal("an oversized module was stored")
	}

	// With a Content-Length over the cap the body is not read at all.
	h, _ := NewServer(ServerOptions{Store: api.store, Auth: mustAuth(t), Tenants: testTenants, Validator: fakeValidator{},
		Audit: slog.New(slog.DiscardHandler), MaxModuleBytes: 1 << 10})
	req := httptest.NewRequest("POST", logsModules, &explodingReader{t: t})
	req.ContentLength = 1 << 30
	req.Header.Set("Authorization", "Bearer "+acmeToken)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", rec.Code)
	}
}

type explodingReader struct{ t *testing.T }

func (e *explodingReader) Read([]byte) (int, error) {
	e.t.Error("the body of an upload over the cap was read")
	return 0, io.EOF
}

func mustAuth(t testing.TB) *Auth {
	a, err := NewAuth([]string{HashToken(adminToken)}, map[string][]string{"acme": {HashToken(acmeToken)}, "globex": {HashToken(globexToken)}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAPIUploadRefusedByValidator(t *testing.T) {
	api := newTestAPI(t, nil)
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), "not a WebAssembly binary"},
		{"wrong ABI", fakeWasm("abi=7"), "built for guest ABI version 7; this host supports [1]"},
		{"empty", nil, "empty body"},
	} {
		r := api.upload(acmeToken, "acme", "logs", tc.body)
		expectStatus(t, tc.name, r, http.StatusUnprocessableEntity)
		if !strings.Contains(r.errText(), tc.want) {
			t.Errorf("%s: error %q, want %q", tc.name, r.errText(), tc.want)
		}
		expectAudit(t, api.lastAudit(), map[string]any{"action": "upload", "outcome": "refused", "status": 422, "reason": r.errText(), "sha256": shaOf(tc.body)})
	}
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Fatal("a refused module was stored")
	}
}

func TestAPIActivateRollbackDelete(t *testing.T) {
	api := newTestAPI(t, nil)
	a, b := fakeWasm("a table=acme_logs"), fakeWasm("b table=acme_logs")
	for _, w := range [][]byte{a, b} {
		expectStatus(t, "upload", api.upload(acmeToken, "acme", "logs", w), http.StatusCreated)
	}
	shaA, shaB := shaOf(a), shaOf(b)

	r := api.do("POST", logsModules+"/"+shaA[:8]+"/activate", acmeToken, nil)
	expectStatus(t, "activate a", r, http.StatusOK)
	if r.body["active"].(map[string]any)["sha256"] != shaA || r.body["previous"] != nil || r.body["changed"] != true {
		t.Fatalf("activate a: %s", r.raw)
	}
	r = api.do("POST", logsModules+"/"+shaB+"/activate", acmeToken, strings.NewReader(`{"value":"ok"}`))
	expectStatus(t, "activate b", r, http.StatusOK)
	if r.body["previous"].(map[string]any)["sha256"] != shaA {
		t.Fatalf("activate b: %s", r.raw)
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "activate", "sha256": shaB, "previous": shaA, "outcome": "ok"})
	if got := api.engine.runningSHA("acme/logs"); got != shaB {
		t.Fatalf("engine runs %s, want %s", got, shaB)
	}
	r = api.do("POST", logsModules+"/"+shaB+"/activate", acmeToken, nil)
	expectStatus(t, "activate b again", r, http.StatusOK)
	if r.body["changed"] != false || api.engine.callCount() != 2 {
		t.Fatalf("re-activating the active version: %s, %d engine calls", r.raw, api.engine.callCount())
	}

	r = api.do("DELETE", logsModules+"/"+shaB, acmeToken, nil)
	expectStatus(t, "delete active", r, http.StatusConflict)
	if !strings.Contains(r.errText(), "is active") {
		t.Fatalf("error %q", r.errText())
	}

	r = api.do("POST", "/v1/tenants/acme/pipelines/logs/rollback", acmeToken, nil)
	expectStatus(t, "rollback", r, http.StatusOK)
	if r.body["active"].(map[string]any)["sha256"] != shaA || r.body["previous"].(map[string]any)["sha256"] != shaB {
		t.Fatalf("rollback: %s", r.raw)
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "rollback", "sha256": shaA, "previous": shaB, "outcome": "ok"})
	if got := api.engine.runningSHA("acme/logs"); got != shaA {
		t.Fatalf("engine runs %s after rollback, want %s", got, shaA)
	}
	r = api.do("POST", "/v1/tenants/acme/pipelines/logs/rollback", acmeToken, nil)
	expectStatus(t, "second rollback", r, http.StatusConflict)
	if !strings.Contains(r.errText(), "no earlier active version") {
		t.Fatalf("error %q", r.errText())
	}

	r = api.do("DELETE", logsModules+"/"+shaB[:10], acmeToken, nil)
	expectStatus(t, "delete inactive", r, http.StatusNoContent)
	expectAudit(t, api.lastAudit(), map[string]any{"action": "delete", "sha256": shaB, "outcome": "ok", "status": 204})
	expectStatus(t, "delete again", api.do("DELETE", logsModules+"/"+shaB, acmeToken, nil), http.StatusNotFound)

	r = api.do("GET", logsModules, acmeToken, nil)
	if len(r.body["versions"].([]any)) != 1 || len(r.body["history"].([]any)) != 3 || r.body["active"].(map[string]any)["sha256"] != shaA {
		t.Fatalf("list: %s", r.raw)
	}
}

func TestAPIActivateRefusesForbiddenTable(t *testing.T) {
	api := newTestAPI(t, nil)
	good := fakeWasm("table=acme_logs")
	bad := fakeWasm("table=acme_logs table=globex_events")
	for _, w := range [][]byte{good, bad} {
		expectStatus(t, "upload", api.upload(acmeToken, "acme", "logs", w), http.StatusCreated)
	}
	expectStatus(t, "activate good", api.do("POST", logsModules+"/"+shaOf(good)+"/activate", acmeToken, nil), http.StatusOK)

	r := api.do("POST", logsModules+"/"+shaOf(bad)+"/activate", acmeToken, nil)
	expectStatus(t, "activate bad", r, http.StatusUnprocessableEntity)
	if want := "it wants table globex_events, and pipeline logs may write only [acme_logs]"; !strings.Contains(r.errText(), want) {
		t.Fatalf("error %q, want the reason %q", r.errText(), want)
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "activate", "outcome": "refused", "status": 422, "sha256": shaOf(bad)})
	if v, _ := api.store.Active("acme", "logs"); v.SHA256 != shaOf(good) {
		t.Fatalf("active %s after a refused activation, want the good one", v.SHA256)
	}
	if api.engine.callCount() != 1 || api.engine.runningSHA("acme/logs") != shaOf(good) {
		t.Fatal("the engine was handed the refused module")
	}

	// A failing dry run and an oversized sample are refused too.
	r = api.do("POST", logsModules+"/"+shaOf(good)[:8]+"/activate", acmeToken, strings.NewReader("bad\n"))
	expectStatus(t, "already active, sample ignored", r, http.StatusOK)
	other := fakeWasm("other table=acme_logs")
	expectStatus(t, "upload other", api.upload(acmeToken, "acme", "logs", other), http.StatusCreated)
	r = api.do("POST", logsModules+"/"+shaOf(other)+"/activate", acmeToken, strings.NewReader("bad\n"))
	expectStatus(t, "failing sample", r, http.StatusUnprocessableEntity)
	if !strings.Contains(r.errText(), "sample line 1") {
		t.Fatalf("error %q", r.errText())
	}
	r = api.do("POST", logsModules+"/"+shaOf(other)+"/activate", acmeToken, strings.NewReader(strings.Repeat("{}\n", 100)))
	expectStatus(t, "oversized sample", r, http.StatusRequestEntityTooLarge)
}

func TestAPIEngineRefusal(t *testing.T) {
	api := newTestAPI(t, nil)
	w := fakeWasm("a")
	expectStatus(t, "upload", api.upload(acmeToken, "acme", "logs", w), http.StatusCreated)

	api.engine.fail = errors.New("ClickHouse is unreachable")
	r := api.do("POST", logsModules+"/"+shaOf(w)+"/activate", acmeToken, nil)
	expectStatus(t, "engine down", r, http.StatusServiceUnavailable)
	if !strings.Contains(r.errText(), "the engine did not take the module: ClickHouse is unreachable") {
		t.Fatalf("error %q", r.errText())
	}
	expectAudit(t, api.lastAudit(), map[string]any{"outcome": "failed", "status": 503, "level": "ERROR"})

	api.engine.fail = fmt.Errorf("instantiate with the tenant's memory limit: %w", ErrModuleRejected)
	r = api.do("POST", logsModules+"/"+shaOf(w)+"/activate", acmeToken, nil)
	expectStatus(t, "engine refuses the module", r, http.StatusUnprocessableEntity)
	if _, ok := api.store.Active("acme", "logs"); ok {
		t.Fatal("the manifest recorded an activation the engine refused")
	}
}

// When the manifest cannot be written after the engine took the new
// version, the engine is switched back: both keep the old version.
func TestAPICommitFailureSwitchesEngineBack(t *testing.T) {
	api := newTestAPI(t, nil)
	a, b := fakeWasm("a"), fakeWasm("b")
	for _, w := range [][]byte{a, b} {
		expectStatus(t, "upload", api.upload(acmeToken, "acme", "logs", w), http.StatusCreated)
	}
	expectStatus(t, "activate a", api.do("POST", logsModules+"/"+shaOf(a)+"/activate", acmeToken, nil), http.StatusOK)

	api.store.mu.Lock()
	api.store.beforeRename = func() error { return errors.New("disk full") }
	api.store.mu.Unlock()
	r := api.do("POST", logsModules+"/"+shaOf(b)+"/activate", acmeToken, nil)
	expectStatus(t, "activate b, disk full", r, http.StatusInternalServerError)
	if !strings.Contains(r.errText(), "disk full") || !strings.Contains(r.errText(), "switched back to "+shaOf(a)) {
		t.Fatalf("error %q", r.errText())
	}
	if got := api.engine.runningSHA("acme/logs"); got != shaOf(a) {
		t.Fatalf("engine runs %s, want a again", got)
	}
	if v, _ := api.store.Active("acme", "logs"); v.SHA256 != shaOf(a) {
		t.Fatalf("manifest active %s, want a", v.SHA256)
	}
}

func TestAPIWhoamiAndTenants(t *testing.T) {
	api := newTestAPI(t, nil)
	r := api.do("GET", "/v1/whoami", acmeToken, nil)
	expectStatus(t, "whoami", r, http.StatusOK)
	if r.body["tenant"] != "acme" || r.body["admin"] != false || fmt.Sprint(r.body["pipelines"]) != "[logs metrics]" {
		t.Fatalf("whoami: %s", r.raw)
	}
	r = api.do("GET", "/v1/whoami", adminToken, nil)
	if r.body["admin"] != true || r.body["tenant"] != nil {
		t.Fatalf("admin whoami: %s", r.raw)
	}

	w := fakeWasm("g")
	expectStatus(t, "upload", api.upload(adminToken, "globex", "events", w), http.StatusCreated)
	expectStatus(t, "activate", api.do("POST", "/v1/tenants/globex/pipelines/events/modules/"+shaOf(w)+"/activate", adminToken, nil), http.StatusOK)
	r = api.do("GET", "/v1/tenants", adminToken, nil)
	expectStatus(t, "tenants", r, http.StatusOK)
	var got TenantsResponse
	if err := json.Unmarshal([]byte(r.raw), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tenants) != 2 || got.Tenants[0].ID != "acme" || len(got.Tenants[0].Pipelines) != 2 || got.Tenants[0].Pipelines[0].Active != nil {
		t.Fatalf("tenants: %s", r.raw)
	}
	if g := got.Tenants[1].Pipelines[0]; g.Name != "events" || g.Active == nil || g.Active.SHA256 != shaOf(w) || g.Versions != 1 {
		t.Fatalf("globex: %s", r.raw)
	}
	// Reads that succeed are not audited: only the two changes are.
	if n := len(api.auditRecords()); n != 2 {
		t.Fatalf("%d audit records, want 2", n)
	}
}

func TestNewServerValidates(t *testing.T) {
	s := openT(t, t.TempDir())
	for _, tc := range []struct {
		opts ServerOptions
		want string
	}{
		{ServerOptions{Auth: mustAuth(t), Validator: fakeValidator{}}, "Store is required"},
		{ServerOptions{Store: s, Validator: fakeValidator{}}, "Auth is required"},
		{ServerOptions{Store: s, Auth: mustAuth(t)}, "Validator is required"},
		{ServerOptions{Store: s, Auth: mustAuth(t), Validator: fakeValidator{}, Tenants: map[string][]string{"acme": {"a b"}}}, `tenant acme pipeline "a b"`},
	} {
		if _, err := NewServer(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewServer error %v, want %q", err, tc.want)
		}
	}
}

// Concurrent uploads and activations of one pipeline leave the engine
// running exactly what the manifest says is active.
func TestAPIConcurrentChangesAgree(t *testing.T) {
	api := newTestAPI(t, nil)
	const clients, each = 6, 5
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One check per tenant runs at a time: a 429 says to retry
			// when it ends, as a client does.
			retry := func(call func() response) response {
				r := call()
				for r.status == http.StatusTooManyRequests {
					time.Sleep(5 * time.Millisecond)
					r = call()
				}
				return r
			}
			for i := range each {
				w := fakeWasm(fmt.Sprintf("c%d-%d", c, i))
				r := retry(func() response { return api.upload(acmeToken, "acme", "logs", w) })
				if r.status != http.StatusCreated {
					t.Errorf("upload: %d %s", r.status, r.raw)
					return
				}
				r = retry(func() response { return api.do("POST", logsModules+"/"+shaOf(w)+"/activate", acmeToken, nil) })
				if r.status != http.StatusOK {
					t.Errorf("activate: %d %s", r.status, r.raw)
				}
				if i%2 == 1 {
					if r := retry(func() response { return api.do("POST", "/v1/tenants/acme/pipelines/logs/rollback", acmeToken, nil) }); r.status != http.StatusOK && r.status != http.StatusConflict {
						t.Errorf("rollback: %d %s", r.status, r.raw)
					}
				}
			}
		}()
	}
	wg.Wait()
	v, ok := api.store.Active("acme", "logs")
	if !ok || api.engine.runningSHA("acme/logs") != v.SHA256 {
		t.Fatalf("the engine runs %s, the manifest says %s", api.engine.runningSHA("acme/logs"), v.SHA256)
	}
	st, _ := api.store.List("acme", "logs")
	if len(st.Versions) != clients*each {
		t.Fatalf("%d versions, want %d", len(st.Versions), clients*each)
	}
}

// A store that lists pipelines the config no longer has keeps them as
// they are, and the server warns about each at start, naming it.
func TestServerWarnsAboutUnconfiguredPipelines(t *testing.T) {
	store := openT(t, t.TempDir())
	for _, p := range []struct{ tenant, pipeline string }{{"acme", "logs"}, {"acme", "gone"}, {"initech", "tps"}, {"initech", "reports"}} {
		if _, _, err := store.Put(p.tenant, p.pipeline, fakeWasm(p.tenant+p.pipeline), "x", ""); err != nil {
			t.Fatal(err)
		}
	}
	api := newTestAPI(t, func(o *ServerOptions) { o.Store = store })
	var warned []string
	for _, rec := range api.auditRecords() {
		if rec["level"] == "WARN" {
			warned = append(warned, fmt.Sprintf("%v %v: %v", rec["tenant"], rec["pipelines"], rec["msg"]))
		}
	}
	want := []string{
		"acme [gone]: the module store lists a pipeline that is not configured; its versions are kept, not run and out of the API's reach until it is configured again",
		"initech [reports tps]: the module store lists a tenant that is not configured; its versions are kept, not run and out of the API's reach until it is configured again",
	}
	if !slices.Equal(warned, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warned, "\n"), strings.Join(want, "\n"))
	}
	if st, _ := store.List("initech", "tps"); len(st.Versions) != 1 {
		t.Errorf("initech/tps: %d versions kept, want 1", len(st.Versions))
	}
	if r := api.do("GET", "/v1/tenants/initech/pipelines/tps/modules", adminToken, nil); r.status != http.StatusNotFound {
		t.Errorf("an unconfigured tenant's pipeline through the API: %d, want 404", r.status)
	}
}
