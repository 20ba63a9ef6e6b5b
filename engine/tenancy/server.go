package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/wasmhost"
)

// Validator checks modules for the API before they are stored or activated.
// The engine implements it. Both methods report a refusal as an error whose
// text the API returns, with status 422, to the tenant: say why, plainly.
type Validator interface {
	// CheckUpload inspects an uploaded binary: that it is WebAssembly,
	// targets a supported ABI version and imports nothing forbidden
	// (CheckWasm does this much).
	CheckUpload(ctx context.Context, tenant, pipeline string, wasm []byte) error
	// CheckActivation checks that the module can run the pipeline: it
	// compiles, initializes with the pipeline's allowed tables and their
	// live schemas (a module refuses init if it wants a table it is not
	// given), and, when sample is not empty, transforms the sample records
	// (JSON lines, as sluice module test -input reads them) into rows the
	// tables accept.
	CheckActivation(ctx context.Context, tenant, pipeline string, wasm, sample []byte) error
}

// Activator swaps a validated module into the running engine. The engine
// implements it.
type Activator interface {
	// Activate makes v (whose binary is wasm) the pipeline's running
	// module. It is called after Validator.CheckActivation and before the
	// manifest records the change; if it fails, the manifest is left as it
	// was. An error wrapping ErrRefused is the module's fault (the API
	// answers 422); any other the engine's (503).
	Activate(ctx context.Context, tenant, pipeline string, v Version, wasm []byte) error
}

// ErrRefused marks an Activator error caused by the module rather than
// the engine.
var ErrRefused = errors.New("module refused")

// ServerOptions configures the admin API handler. The zero value of each
// optional field takes its documented default.
type ServerOptions struct {
	// Store keeps the modules. Required.
	Store *Store
	// Auth identifies the callers. Required.
	Auth *Auth
	// Tenants maps each tenant to its pipelines' names. A tenant or
	// pipeline not listed is unknown to the API (404).
	Tenants map[string][]string
	// Validator checks uploads and activations. Required.
	Validator Validator
	// Activator swaps activated modules into the engine. Default: none, the
	// manifest alone records activations (the engine loads the active
	// versions when it starts).
	Activator Activator
	// Audit receives one record per change and per refused request.
	// Default slog.Default().
	Audit *slog.Logger
	// MaxModuleBytes caps an upload; a larger one is refused with 413
	// without being read. Default 32 MiB.
	MaxModuleBytes int64
	// MaxSampleBytes caps an activation's sample records. Default 4 MiB.
	MaxSampleBytes int64
	// MaxBodyMemory caps the request bodies (uploads and samples) held at
	// once, all requests together: a body is held as it arrives, whatever
	// Content-Length it declared, and a request that would pass the cap is
	// refused with 503 and Retry-After. Default 2 × MaxModuleBytes, and
	// 64 MiB at least.
	MaxBodyMemory int64
	// CheckTimeout bounds a module check (Validator.CheckUpload or
	// CheckActivation, which compile it), its wait for a turn included; a
	// check that runs out is answered with 503 and nothing is stored or
	// activated. It should be below the HTTP server's WriteTimeout, so that
	// the client gets the answer. Default 60s.
	CheckTimeout time.Duration
	// MaxConcurrentChecks bounds the module checks running at once, all
	// tenants together; a tenant has at most one at a time (another gets
	// 429). Default 1.
	MaxConcurrentChecks int
	// AuthFailureBurst and AuthFailureInterval limit wrong tokens per
	// client IP: after AuthFailureBurst failures, one more is allowed per
	// AuthFailureInterval, and a request from that IP is answered 429 (with
	// Retry-After) before its token is looked at. Defaults 10 and 1s.
	AuthFailureBurst    int
	AuthFailureInterval time.Duration
	// CacheDir is the engine's compilation cache (wasmhost.Config.CacheDir).
	// When set, the compiled code of modules the store no longer holds is
	// removed from it (wasmhost.PruneCache) when the server starts, after a
	// delete and after a refused upload. Default: none, nothing is pruned.
	CacheDir string
	// InUse reports whether the engine runs a module (by sha256) that the
	// store need not hold, such as one configured from a file: pruning
	// keeps its compiled code too, so a restart does not compile it again.
	// Default: none besides the store's.
	InUse func(sha256 string) bool
}

func (o *ServerOptions) setDefaults() error {
	switch {
	case o.Store == nil:
		return errors.New("tenancy server: Store is required")
	case o.Auth == nil:
		return errors.New("tenancy server: Auth is required")
	case o.Validator == nil:
		return errors.New("tenancy server: Validator is required")
	}
	for t, pipelines := range o.Tenants {
		if err := ValidName(t); err != nil {
			return fmt.Errorf("tenancy server: Tenants: tenant %q: %w", t, err)
		}
		for _, p := range pipelines {
			if err := ValidName(p); err != nil {
				return fmt.Errorf("tenancy server: Tenants: tenant %s pipeline %q: %w", t, p, err)
			}
		}
	}
	if o.Audit == nil {
		o.Audit = slog.Default()
	}
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = 32 << 20
	}
	if o.MaxSampleBytes <= 0 {
		o.MaxSampleBytes = 4 << 20
	}
	if o.MaxBodyMemory <= 0 {
		o.MaxBodyMemory = max(2*o.MaxModuleBytes, 64<<20)
	}
	if o.CheckTimeout <= 0 {
		o.CheckTimeout = 60 * time.Second
	}
	if o.MaxConcurrentChecks <= 0 {
		o.MaxConcurrentChecks = 1
	}
	if o.AuthFailureBurst <= 0 {
		o.AuthFailureBurst = 10
	}
	if o.AuthFailureInterval <= 0 {
		o.AuthFailureInterval = time.Second
	}
	return nil
}

// server is the admin API handler.
type server struct {
	opts      ServerOptions
	mux       *http.ServeMux
	pipelines map[string]map[string]bool // tenant → its pipelines

	locksMu sync.Mutex
	locks   map[pipelineKey]*sync.Mutex

	bodies   *byteBudget
	checks   chan struct{} // a token per running module check
	checkMu  sync.Mutex
	checking map[string]bool // tenants with a check running
	authFail *failureLimiter
}

// NewServer returns the admin API handler: JSON over HTTP, each request
// authenticated by an "Authorization: Bearer <token>" header. See
// docs/tenancy.md for the routes and status codes.
//
// Activation, rollback and deletion are serialized per pipeline. An
// activation resolves the version, runs Validator.CheckActivation, has the
// Activator swap the module in, and only then records it in the manifest;
// should that write fail, the Activator is asked to swap the previous
// version back. So after a success the manifest and the engine agree, and
// a restart loads what ran before it.
func NewServer(opts ServerOptions) (http.Handler, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	s := &server{opts: opts, mux: http.NewServeMux(), pipelines: map[string]map[string]bool{},
		locks: map[pipelineKey]*sync.Mutex{}, bodies: &byteBudget{limit: opts.MaxBodyMemory},
		checks: make(chan struct{}, opts.MaxConcurrentChecks), checking: map[string]bool{},
		authFail: newFailureLimiter(opts.AuthFailureBurst, opts.AuthFailureInterval)}
	for t, ps := range opts.Tenants {
		s.pipelines[t] = map[string]bool{}
		for _, p := range ps {
			s.pipelines[t][p] = true
		}
	}
	s.pruneCache()
	const pipe = "/v1/tenants/{tenant}/pipelines/{pipeline}"
	s.handle("GET /v1/whoami", "whoami", false, s.whoami)
	s.handle("GET /v1/tenants", "list-tenants", false, s.listTenants)
	s.handle("GET "+pipe+"/modules", "list", false, s.list)
	s.handle("POST "+pipe+"/modules", "upload", true, s.upload)
	s.handle("POST "+pipe+"/modules/{sha256}/activate", "activate", true, s.activate)
	s.handle("POST "+pipe+"/rollback", "rollback", true, s.rollback)
	s.handle("DELETE "+pipe+"/modules/{sha256}", "delete", true, s.delete)
	return s, nil
}

// ServeHTTP answers unrouted requests itself (401 before anything else,
// then 404 or 405 as JSON) and passes the rest to the routes.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	// The mux would redirect a path with "." or ".." segments or "//" to
	// its clean form, before any route authenticates: answer it here, after
	// authentication, with a 400 and no Location.
	if !canonicalPath(r.URL.Path) {
		ev := &auditEvent{action: "unrouted", remote: r.RemoteAddr, path: r.URL.Path}
		if s.authenticate(w, r, ev) {
			s.fail(w, r, ev, http.StatusBadRequest, fmt.Sprintf("path %s is not canonical (it has an empty, . or .. segment)", abbreviate(r.URL.Path, 200)))
		}
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	ev := &auditEvent{action: "unrouted", remote: r.RemoteAddr, path: r.URL.Path}
	if !s.authenticate(w, r, ev) {
		return
	}
	// The mux's own 404 or 405 handler, for its status and Allow header.
	capture := &statusCapture{header: w.Header()}
	h.ServeHTTP(capture, r)
	if capture.status == http.StatusMethodNotAllowed {
		s.fail(w, r, ev, http.StatusMethodNotAllowed, fmt.Sprintf("%s is not allowed on %s", r.Method, abbreviate(r.URL.Path, 200)))
		return
	}
	s.fail(w, r, ev, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, abbreviate(r.URL.Path, 200)))
}

// statusCapture keeps a handler's status and discards its body.
type statusCapture struct {
	header http.Header
	status int
}

func (c *statusCapture) Header() http.Header { return c.header }
func (c *statusCapture) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
}
func (c *statusCapture) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return len(b), nil
}

type routeFunc func(w http.ResponseWriter, r *http.Request, ev *auditEvent)

// handle registers an authenticated route. change marks the routes whose
// every outcome is audited; the others are audited only when refused.
func (s *server) handle(pattern, action string, change bool, fn routeFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		ev := &auditEvent{action: action, change: change, remote: r.RemoteAddr,
			tenant: r.PathValue("tenant"), pipeline: r.PathValue("pipeline"), sha: r.PathValue("sha256")}
		if s.authenticate(w, r, ev) {
			fn(w, r, ev)
		}
	})
}

// pruneCache removes the compiled code of the modules the store does not
// hold and the engine does not run from the engine's compilation cache.
func (s *server) pruneCache() {
	if s.opts.CacheDir == "" {
		return
	}
	keep := s.opts.Store.Stored
	if inUse := s.opts.InUse; inUse != nil {
		keep = func(sha string) bool { return s.opts.Store.Stored(sha) || inUse(sha) }
	}
	n, err := wasmhost.PruneCache(s.opts.CacheDir, keep)
	if err != nil {
		s.opts.Audit.Warn("pruning the compilation cache", "dir", s.opts.CacheDir, "err", err)
	}
	if n > 0 {
		s.opts.Audit.Info("pruned the compilation cache", "dir", s.opts.CacheDir, "files", n)
	}
}

// canonicalPath reports whether p is what path.Clean makes of it: rooted,
// without empty, "." or ".." segments.
func canonicalPath(p string) bool {
	return p == "/" || (strings.HasPrefix(p, "/") && path.Clean(p) == p)
}

// authenticate identifies the caller, or answers 401, or 429 if the
// client's IP has sent too many wrong tokens lately.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request, ev *auditEvent) bool {
	ip := clientIP(r)
	if wait := s.authFail.blocked(ip, time.Now()); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		s.fail(w, r, ev, http.StatusTooManyRequests, "too many requests with a wrong token from this address; retry later")
		return false
	}
	p, ok := s.opts.Auth.Identify(BearerToken(r))
	if !ok {
		s.authFail.failed(ip, time.Now())
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		s.fail(w, r, ev, http.StatusUnauthorized, "missing or unknown bearer token")
		return false
	}
	ev.principal = &p
	return true
}

// authorize checks that the caller may act on the path's pipeline and
// that it exists: 403 for another tenant's, 404 for an unknown one.
func (s *server) authorize(w http.ResponseWriter, r *http.Request, ev *auditEvent) bool {
	p := ev.principal
	if !p.Admin && p.Tenant != ev.tenant {
		s.fail(w, r, ev, http.StatusForbidden, fmt.Sprintf("tenant %s may not act on tenant %s", p.Tenant, abbreviate(ev.tenant, 80)))
		return false
	}
	pipelines, ok := s.pipelines[ev.tenant]
	if !ok {
		s.fail(w, r, ev, http.StatusNotFound, fmt.Sprintf("no tenant %s", abbreviate(ev.tenant, 80)))
		return false
	}
	if !pipelines[ev.pipeline] {
		s.fail(w, r, ev, http.StatusNotFound, fmt.Sprintf("tenant %s has no pipeline %s", ev.tenant, abbreviate(ev.pipeline, 80)))
		return false
	}
	return true
}

// lockPipeline serializes the changes of one pipeline's active version.
func (s *server) lockPipeline(tenant, pipeline string) func() {
	k := pipelineKey{tenant, pipeline}
	s.locksMu.Lock()
	mu := s.locks[k]
	if mu == nil {
		mu = &sync.Mutex{}
		s.locks[k] = mu
	}
	s.locksMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// WhoamiResponse is GET /v1/whoami.
type WhoamiResponse struct {
	Tenant string `json:"tenant,omitempty"`
	Admin  bool   `json:"admin"`
	// Token is the token's id (a prefix of its hash).
	Token string `json:"token"`
	// Pipelines are the tenant's, for a tenant's token.
	Pipelines []string `json:"pipelines,omitempty"`
}

func (s *server) whoami(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	p := ev.principal
	resp := WhoamiResponse{Tenant: p.Tenant, Admin: p.Admin, Token: p.TokenID}
	if !p.Admin {
		resp.Pipelines = sortedKeys(s.pipelines[p.Tenant])
	}
	writeJSON(w, http.StatusOK, resp)
}

// TenantSummary is one tenant in GET /v1/tenants.
type TenantSummary struct {
	ID        string            `json:"id"`
	Pipelines []PipelineSummary `json:"pipelines"`
}

// TenantsResponse is GET /v1/tenants.
type TenantsResponse struct {
	Tenants []TenantSummary `json:"tenants"`
}

// PipelineSummary is one pipeline in GET /v1/tenants.
type PipelineSummary struct {
	Name     string   `json:"name"`
	Active   *Version `json:"active"`
	Versions int      `json:"versions"`
}

func (s *server) listTenants(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !ev.principal.Admin {
		s.fail(w, r, ev, http.StatusForbidden, "listing tenants takes an admin token")
		return
	}
	out := TenantsResponse{Tenants: []TenantSummary{}}
	for _, t := range sortedKeys(s.pipelines) {
		ts := TenantSummary{ID: t, Pipelines: []PipelineSummary{}}
		for _, p := range sortedKeys(s.pipelines[t]) {
			st, err := s.opts.Store.List(t, p)
			if err != nil {
				s.fail(w, r, ev, http.StatusInternalServerError, err.Error())
				return
			}
			ps := PipelineSummary{Name: p, Versions: len(st.Versions)}
			if v, ok := st.Version(st.Active); ok {
				ps.Active = &v
			}
			ts.Pipelines = append(ts.Pipelines, ps)
		}
		out.Tenants = append(out.Tenants, ts)
	}
	writeJSON(w, http.StatusOK, out)
}

// ListResponse is GET …/modules: a pipeline's versions.
type ListResponse struct {
	Tenant   string       `json:"tenant"`
	Pipeline string       `json:"pipeline"`
	Active   *Version     `json:"active"`
	Versions []Version    `json:"versions"`
	History  []Activation `json:"history"`
	// RollbackStack: rollback returns to the last one.
	RollbackStack []string `json:"rollback_stack"`
}

func (s *server) list(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !s.authorize(w, r, ev) {
		return
	}
	st, err := s.opts.Store.List(ev.tenant, ev.pipeline)
	if err != nil {
		s.fail(w, r, ev, http.StatusInternalServerError, err.Error())
		return
	}
	resp := ListResponse{Tenant: ev.tenant, Pipeline: ev.pipeline, Versions: st.Versions,
		History: st.History, RollbackStack: st.RollbackStack}
	if v, ok := st.Version(st.Active); ok {
		resp.Active = &v
	}
	writeJSON(w, http.StatusOK, resp)
}

// UploadResponse is POST …/modules.
type UploadResponse struct {
	Version Version `json:"version"`
	// Created is false when the pipeline already had this binary.
	Created bool `json:"created"`
}

func (s *server) upload(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !s.authorize(w, r, ev) {
		return
	}
	note := r.URL.Query().Get("note")
	if err := checkNote(note); err != nil {
		s.fail(w, r, ev, http.StatusBadRequest, err.Error())
		return
	}
	wasm, release, ok := s.readBody(w, r, ev, s.opts.MaxModuleBytes, "module")
	if !ok {
		return
	}
	defer release()
	sum := sha256.Sum256(wasm)
	ev.sha = hex.EncodeToString(sum[:])
	if len(wasm) == 0 {
		s.fail(w, r, ev, http.StatusUnprocessableEntity, "empty body: send the .wasm binary as the request body")
		return
	}
	if !s.check(w, r, ev, func(ctx context.Context) error {
		return s.opts.Validator.CheckUpload(ctx, ev.tenant, ev.pipeline, wasm)
	}) {
		s.pruneCache() // the check may have compiled it
		return
	}
	v, created, err := s.opts.Store.Put(ev.tenant, ev.pipeline, wasm, ev.principal.String(), note)
	if err != nil {
		s.fail(w, r, ev, storeStatus(err), err.Error())
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, UploadResponse{Version: v, Created: created})
	s.record(r, ev, status, "")
}

// checkNote accepts a short single-line note.
func checkNote(note string) error {
	if len(note) > 256 {
		return fmt.Errorf("note: at most 256 bytes, got %d", len(note))
	}
	if !utf8.ValidString(note) || strings.IndexFunc(note, unicode.IsControl) >= 0 {
		return errors.New("note: want UTF-8 text without control characters")
	}
	return nil
}

// readBody reads a request body of at most limit bytes, or answers 413
// (at once when Content-Length says so, else as soon as the body passes
// limit),
// or 503 when the bodies held by all requests would pass MaxBodyMemory.
// The body is held as it arrives, never by its declared length. release
// gives its memory back to the budget.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, ev *auditEvent, limit int64, what string) (body []byte, release func(), ok bool) {
	if r.ContentLength > limit {
		s.fail(w, r, ev, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s of %d bytes is over the limit of %d bytes", what, r.ContentLength, limit))
		return nil, nil, false
	}
	var held int64
	release = func() { s.bodies.release(held) }
	src := http.MaxBytesReader(w, r.Body, limit)
	var buf []byte
	for {
		if len(buf) == cap(buf) {
			// Grow by doubling, reserving the growth first.
			grow := max(int64(cap(buf)), 512)
			if !s.bodies.acquire(grow) {
				release()
				w.Header().Set("Retry-After", "1")
				s.fail(w, r, ev, http.StatusServiceUnavailable, fmt.Sprintf("the server is receiving too many request bodies at once (limit %d bytes); retry later", s.opts.MaxBodyMemory))
				return nil, nil, false
			}
			held += grow
			buf = slices.Grow(buf, int(grow))
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, release, true
		}
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			release()
			s.fail(w, r, ev, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s is over the limit of %d bytes", what, limit))
			return nil, nil, false
		case err != nil:
			release()
			s.fail(w, r, ev, http.StatusBadRequest, fmt.Sprintf("reading the %s: %v", what, err))
			return nil, nil, false
		}
	}
}

// check runs a module check (which compiles the module) under
// CheckTimeout, at most MaxConcurrentChecks at once and one per tenant,
// or answers why not: 422 for a module the check refuses, 429 when the
// tenant has a check running, 503 when the time ran out, and nothing (the
// audit says "abandoned") when the client went away.
func (s *server) check(w http.ResponseWriter, r *http.Request, ev *auditEvent, run func(ctx context.Context) error) bool {
	s.checkMu.Lock()
	busy := s.checking[ev.tenant]
	if !busy {
		s.checking[ev.tenant] = true
	}
	s.checkMu.Unlock()
	if busy {
		w.Header().Set("Retry-After", "5")
		s.fail(w, r, ev, http.StatusTooManyRequests, fmt.Sprintf("tenant %s has a module check running; retry when it ends", ev.tenant))
		return false
	}
	defer func() {
		s.checkMu.Lock()
		delete(s.checking, ev.tenant)
		s.checkMu.Unlock()
	}()
	ctx, cancel := context.WithTimeoutCause(r.Context(), s.opts.CheckTimeout,
		fmt.Errorf("the module check did not end within %v", s.opts.CheckTimeout))
	defer cancel()
	start := time.Now()
	err := func() error {
		select {
		case s.checks <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		defer func() { <-s.checks }()
		return run(ctx)
	}()
	switch {
	case r.Context().Err() != nil:
		// The client hung up: it gets nothing, and nothing changes.
		s.record(r, ev, statusClientGone, fmt.Sprintf("the client went away during the module check, after %v; nothing was changed", time.Since(start).Round(time.Millisecond)))
		return false
	case ctx.Err() != nil:
		w.Header().Set("Retry-After", "60")
		s.fail(w, r, ev, http.StatusServiceUnavailable, fmt.Sprintf("%v (it was stopped after %v); nothing was changed", context.Cause(ctx), time.Since(start).Round(time.Millisecond)))
		return false
	case err != nil:
		s.fail(w, r, ev, http.StatusUnprocessableEntity, err.Error())
		return false
	}
	return true
}

// statusClientGone is the audit status of a request whose client went away
// before it was answered (nginx's 499): the client got no answer.
const statusClientGone = 499

// ActivateResponse is POST …/activate and …/rollback.
type ActivateResponse struct {
	Active   Version  `json:"active"`
	Previous *Version `json:"previous"`
	// Changed is false when the version was already active.
	Changed bool `json:"changed"`
}

func (s *server) activate(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !s.authorize(w, r, ev) {
		return
	}
	sample, release, ok := s.readBody(w, r, ev, s.opts.MaxSampleBytes, "sample")
	if !ok {
		return
	}
	defer release()
	defer s.lockPipeline(ev.tenant, ev.pipeline)()
	v, ok := s.resolve(w, r, ev)
	if !ok {
		return
	}
	prev, hadPrev := s.opts.Store.Active(ev.tenant, ev.pipeline)
	if hadPrev && prev.SHA256 == v.SHA256 {
		writeJSON(w, http.StatusOK, ActivateResponse{Active: v, Previous: &prev})
		s.record(r, ev, http.StatusOK, "already active")
		return
	}
	if !s.swapIn(w, r, ev, v, sample) {
		return
	}
	if _, _, err := s.opts.Store.Activate(ev.tenant, ev.pipeline, v.SHA256, ev.principal.String()); err != nil {
		s.failCommit(w, r, ev, err, prev, hadPrev)
		return
	}
	s.activated(w, r, ev, v, prev, hadPrev)
}

func (s *server) rollback(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !s.authorize(w, r, ev) {
		return
	}
	defer s.lockPipeline(ev.tenant, ev.pipeline)()
	target, err := s.opts.Store.RollbackTarget(ev.tenant, ev.pipeline)
	if err != nil {
		s.fail(w, r, ev, storeStatus(err), err.Error())
		return
	}
	ev.sha = target.SHA256
	prev, hadPrev := s.opts.Store.Active(ev.tenant, ev.pipeline)
	// The earlier version passed validation once, but the tables may have
	// changed since: check it again.
	if !s.swapIn(w, r, ev, target, nil) {
		return
	}
	to, _, err := s.opts.Store.Rollback(ev.tenant, ev.pipeline, ev.principal.String())
	if err != nil {
		s.failCommit(w, r, ev, err, prev, hadPrev)
		return
	}
	s.activated(w, r, ev, to, prev, hadPrev)
}

// activated answers a successful activation or rollback to v.
func (s *server) activated(w http.ResponseWriter, r *http.Request, ev *auditEvent, v, prev Version, hadPrev bool) {
	resp := ActivateResponse{Active: v, Changed: true}
	if hadPrev {
		resp.Previous = &prev
		ev.previous = prev.SHA256
	}
	writeJSON(w, http.StatusOK, resp)
	s.record(r, ev, http.StatusOK, "")
}

// swapIn validates v and has the engine run it, or answers why not.
func (s *server) swapIn(w http.ResponseWriter, r *http.Request, ev *auditEvent, v Version, sample []byte) bool {
	wasm, err := s.opts.Store.Blob(v.SHA256)
	if err != nil {
		s.fail(w, r, ev, http.StatusInternalServerError, err.Error())
		return false
	}
	if !s.check(w, r, ev, func(ctx context.Context) error {
		return s.opts.Validator.CheckActivation(ctx, ev.tenant, ev.pipeline, wasm, sample)
	}) {
		return false
	}
	if s.opts.Activator == nil {
		return true
	}
	// Why WithoutCancel? A client that hangs up must not leave the engine
	// half-swapped: once begun, the swap runs to its end.
	if err := s.opts.Activator.Activate(context.WithoutCancel(r.Context()), ev.tenant, ev.pipeline, v, wasm); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, ErrRefused) {
			status = http.StatusUnprocessableEntity
		}
		s.fail(w, r, ev, status, "the engine did not take the module: "+err.Error())
		return false
	}
	return true
}

// failCommit answers a manifest write that failed after the engine took the
// new version, switching the engine back to the version before.
func (s *server) failCommit(w http.ResponseWriter, r *http.Request, ev *auditEvent, err error, prev Version, hadPrev bool) {
	reason := "recording the activation failed: " + err.Error()
	switch {
	case s.opts.Activator == nil:
	case !hadPrev:
		reason += "; the engine runs the new version until it restarts, and then none"
	default:
		ctx := context.WithoutCancel(r.Context())
		wasm, berr := s.opts.Store.Blob(prev.SHA256)
		if berr == nil {
			berr = s.opts.Activator.Activate(ctx, ev.tenant, ev.pipeline, prev, wasm)
		}
		if berr != nil {
			reason += fmt.Sprintf("; switching the engine back to %s failed too (%v): it runs the new version until it restarts", prev.SHA256, berr)
		} else {
			reason += "; the engine was switched back to " + prev.SHA256
		}
	}
	s.fail(w, r, ev, http.StatusInternalServerError, reason)
}

func (s *server) delete(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	if !s.authorize(w, r, ev) {
		return
	}
	defer s.lockPipeline(ev.tenant, ev.pipeline)()
	v, ok := s.resolve(w, r, ev)
	if !ok {
		return
	}
	if err := s.opts.Store.Delete(ev.tenant, ev.pipeline, v.SHA256); err != nil {
		s.fail(w, r, ev, storeStatus(err), err.Error())
		return
	}
	s.pruneCache()
	w.WriteHeader(http.StatusNoContent)
	s.record(r, ev, http.StatusNoContent, "")
}

// resolve finds the version the path's reference names and audits it by
// its full sha256, or answers why there is none.
func (s *server) resolve(w http.ResponseWriter, r *http.Request, ev *auditEvent) (Version, bool) {
	v, err := s.opts.Store.Resolve(ev.tenant, ev.pipeline, ev.sha)
	if err != nil {
		s.fail(w, r, ev, storeStatus(err), err.Error())
		return Version{}, false
	}
	ev.sha = v.SHA256
	return v, true
}

// storeStatus is the HTTP status of a Store error.
func storeStatus(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadReference), errors.Is(err, ErrAmbiguous):
		return http.StatusBadRequest
	case errors.Is(err, ErrActive), errors.Is(err, ErrNoRollback), errors.Is(err, ErrTooManyVersions):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

// auditEvent is what one request did, for the audit log.
type auditEvent struct {
	action    string
	change    bool
	principal *Principal
	tenant    string
	pipeline  string
	sha       string
	previous  string
	path      string // of an unrouted request
	remote    string
}

// fail answers with an error and audits the refusal.
func (s *server) fail(w http.ResponseWriter, r *http.Request, ev *auditEvent, status int, reason string) {
	writeJSON(w, status, errorResponse{Error: reason})
	s.record(r, ev, status, reason)
}

// record writes the audit record of a request: every outcome of a change,
// and every refusal (401, 403, 413, 422) of anything.
func (s *server) record(r *http.Request, ev *auditEvent, status int, reason string) {
	refusal := status == http.StatusUnauthorized || status == http.StatusForbidden ||
		status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity ||
		status == http.StatusTooManyRequests
	if !ev.change && !refusal {
		return
	}
	outcome, level := "ok", slog.LevelInfo
	switch {
	case status == statusClientGone:
		outcome, level = "abandoned", slog.LevelWarn
	case status >= 500:
		outcome, level = "failed", slog.LevelError
	case status >= 400:
		outcome, level = "refused", slog.LevelWarn
	}
	actor, token := "anonymous", ""
	if ev.principal != nil {
		actor, token = ev.principal.actor(), ev.principal.TokenID
	}
	attrs := []slog.Attr{
		slog.String("action", ev.action),
		slog.String("actor", actor),
		slog.String("token", token),
		slog.String("tenant", abbreviate(ev.tenant, 80)),
		slog.String("pipeline", abbreviate(ev.pipeline, 80)),
		slog.String("sha256", abbreviate(ev.sha, 80)),
		slog.String("outcome", outcome),
		slog.Int("status", status),
		slog.String("reason", abbreviate(reason, 1000)),
		slog.String("remote", r.RemoteAddr),
	}
	if ev.previous != "" {
		attrs = append(attrs, slog.String("previous", ev.previous))
	}
	if ev.path != "" {
		attrs = append(attrs, slog.String("method", abbreviate(r.Method, 20)), slog.String("path", abbreviate(ev.path, 200)))
	}
	s.opts.Audit.LogAttrs(context.WithoutCancel(r.Context()), level, "audit", attrs...)
}

type errorResponse struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // the response types always marshal
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
