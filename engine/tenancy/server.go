package tenancy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/wasmhost"
)

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
	// client IP and, separately, per token: after AuthFailureBurst
	// failures, one more is allowed per AuthFailureInterval, and a wrong
	// token over either budget is answered 429 (with Retry-After) instead
	// of 401. A right token is always accepted, whatever its address's
	// failures. Defaults 10 and 1s.
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
	now      func() time.Time // the limiter's clock
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
		authFail: newFailureLimiter(opts.AuthFailureBurst, opts.AuthFailureInterval, maxTrackedKeys), now: time.Now}
	for t, ps := range opts.Tenants {
		s.pipelines[t] = map[string]bool{}
		for _, p := range ps {
			s.pipelines[t][p] = true
		}
	}
	s.warnUnconfigured()
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

// warnUnconfigured warns about each tenant and pipeline the store lists
// with versions but the config does not have (removed from it, or
// renamed). They are kept as they are, blobs and compiled code included:
// configured again, they are back as they were.
func (s *server) warnUnconfigured() {
	unknownTenants := map[string][]string{}
	versions := map[string]int{}
	for _, k := range s.opts.Store.storedPipelines() {
		switch {
		case s.pipelines[k.tenant] == nil:
			unknownTenants[k.tenant] = append(unknownTenants[k.tenant], k.pipeline)
			versions[k.tenant] += k.versions
		case !s.pipelines[k.tenant][k.pipeline]:
			s.opts.Audit.Warn("the module store lists a pipeline that is not configured; its versions are kept, not run and out of the API's reach until it is configured again",
				"tenant", k.tenant, "pipelines", []string{k.pipeline}, "versions", k.versions)
		}
	}
	for _, t := range sortedKeys(unknownTenants) {
		s.opts.Audit.Warn("the module store lists a tenant that is not configured; its versions are kept, not run and out of the API's reach until it is configured again",
			"tenant", t, "pipelines", unknownTenants[t], "versions", versions[t])
	}
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
