package tenancy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (a *testAPI) doNoRedirect(method, path, token string) *http.Response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A path with dot segments is answered after authentication, with no
// redirect: 401 without a token, 400 with one.
func TestAPIDotSegmentsAreAuthenticatedFirst(t *testing.T) {
	api := newTestAPI(t, nil)
	for _, p := range []string{"/v1/tenants/../whoami", "/v1/./whoami", "/v1//whoami", "/v1/tenants/acme/pipelines/logs/modules/../../../../../tenants"} {
		if resp := api.doNoRedirect("GET", p, ""); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Location") != "" {
			t.Errorf("GET %s without a token: %d, Location %q; want 401 and no redirect", p, resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp := api.doNoRedirect("GET", p, adminToken); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Location") != "" {
			t.Errorf("GET %s with a token: %d, Location %q; want 400 and no redirect", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	if resp := api.doNoRedirect("GET", "/v1/whoami", adminToken); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/whoami: %d", resp.StatusCode)
	}
}

// Wrong tokens from one address are limited: past the burst, they get 429
// instead of 401. A right token from that address is still accepted:
// behind a shared proxy, one client's wrong tokens must not lock out the
// others (they used to: 429 before the token was looked at).
func TestAPIWrongTokensAreRateLimited(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.AuthFailureBurst, o.AuthFailureInterval = 5, time.Hour })
	var statuses []int
	var last *http.Response
	for i := range 20 {
		last = api.doNoRedirect("GET", "/v1/whoami", fmt.Sprintf("wrong-token-%d", i))
		statuses = append(statuses, last.StatusCode)
	}
	for i, st := range statuses {
		want := http.StatusUnauthorized
		if i >= 5 {
			want = http.StatusTooManyRequests
		}
		if st != want {
			t.Fatalf("wrong token %d: status %d, want %d (all: %v)", i+1, st, want, statuses)
		}
	}
	if ra, err := strconv.Atoi(last.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q", last.Header.Get("Retry-After"))
	}
	expectAudit(t, api.lastAudit(), map[string]any{"status": 429, "outcome": "refused", "token": tokenID(HashToken("wrong-token-19"))})
	for _, tok := range []string{adminToken, acmeToken, globexToken} {
		if resp := api.doNoRedirect("GET", "/v1/whoami", tok); resp.StatusCode != http.StatusOK {
			t.Errorf("a right token from an address over its budget: %d, want 200", resp.StatusCode)
		}
	}
}

// One wrong token is limited whatever address it comes from.
func TestAPIWrongTokenIsLimitedAcrossAddresses(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.AuthFailureBurst, o.AuthFailureInterval = 3, time.Hour })
	var statuses []int
	for i := range 10 {
		statuses = append(statuses, api.serve(fmt.Sprintf("192.0.2.%d:4000", i+1), "stale-token").Code)
	}
	for i, st := range statuses {
		want := http.StatusUnauthorized
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if st != want {
			t.Fatalf("attempt %d: status %d, want %d (all: %v)", i+1, st, want, statuses)
		}
	}
	if rec := api.serve("192.0.2.1:4000", "another-token"); rec.Code != http.StatusUnauthorized {
		t.Errorf("another wrong token from a fresh address: %d, want 401", rec.Code)
	}
	if rec := api.serve("192.0.2.1:4000", acmeToken); rec.Code != http.StatusOK {
		t.Errorf("a right token: %d, want 200", rec.Code)
	}
}

// Wrong tokens from one IPv6 /64 count as from one address: a host
// usually has the whole /64 to pick addresses from.
func TestAPIWrongTokensPerIPv6Prefix(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.AuthFailureBurst, o.AuthFailureInterval = 3, time.Hour })
	var statuses []int
	for i := range 10 {
		statuses = append(statuses, api.serve(fmt.Sprintf("[2001:db8:5:6:%x::%x]:443", i*977, i+1), fmt.Sprintf("wrong-%d", i)).Code)
	}
	for i, st := range statuses {
		want := http.StatusUnauthorized
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if st != want {
			t.Fatalf("attempt %d: status %d, want %d (all: %v)", i+1, st, want, statuses)
		}
	}
	if rec := api.serve("[2001:db8:5:7::1]:443", "wrong-x"); rec.Code != http.StatusUnauthorized {
		t.Errorf("a wrong token from the next /64: %d, want 401", rec.Code)
	}
}

// blockingValidator's CheckUpload waits for release, or for its context
// to end; with finishAfterCancel, it then passes the module anyway, as a
// compile that cannot be cancelled ends well after its client left.
type blockingValidator struct {
	fakeValidator
	started           chan string
	release           chan struct{}
	finishAfterCancel bool
}

func (v *blockingValidator) CheckUpload(ctx context.Context, tenant, pipeline string, wasm []byte) error {
	v.started <- tenant
	select {
	case <-v.release:
	case <-ctx.Done():
		if !v.finishAfterCancel {
			return ctx.Err()
		}
	}
	return v.fakeValidator.CheckUpload(ctx, tenant, pipeline, wasm)
}

func newBlocking(finishAfterCancel bool) *blockingValidator {
	return &blockingValidator{started: make(chan string, 10), release: make(chan struct{}), finishAfterCancel: finishAfterCancel}
}

// A check that outlives CheckTimeout is answered 503, and nothing is
// stored.
func TestAPICheckTimeout(t *testing.T) {
	v := newBlocking(false)
	api := newTestAPI(t, func(o *ServerOptions) { o.Validator, o.CheckTimeout = v, 200*time.Millisecond })
	r := api.upload(acmeToken, "acme", "logs", fakeWasm("slow"))
	expectStatus(t, "slow upload", r, http.StatusServiceUnavailable)
	if !strings.Contains(r.errText(), "did not end within 200ms") {
		t.Errorf("error %q", r.errText())
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "upload", "status": 503, "outcome": "failed"})
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Fatal("a timed-out upload was stored")
	}
}

// A client that hangs up during the check gets nothing, and the audit
// says so: not "201 ok", and nothing is stored.
func TestAPIAbandonedUploadIsNotRecordedAsOK(t *testing.T) {
	v := newBlocking(true)
	api := newTestAPI(t, func(o *ServerOptions) { o.Validator = v })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", api.url+logsModules, strings.NewReader(string(fakeWasm("gone"))))
	req.Header.Set("Authorization", "Bearer "+acmeToken)
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-v.started
	cancel() // the client's timeout
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(api.auditRecords()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	expectAudit(t, api.lastAudit(), map[string]any{"action": "upload", "status": statusClientGone, "outcome": "abandoned"})
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Fatal("an abandoned upload was stored")
	}
}

// A tenant has one check at a time; a second is refused at once.
func TestAPIOneCheckPerTenant(t *testing.T) {
	v := newBlocking(false)
	api := newTestAPI(t, func(o *ServerOptions) { o.Validator = v })
	first := make(chan response, 1)
	go func() { first <- api.upload(acmeToken, "acme", "logs", fakeWasm("1")) }()
	<-v.started
	r := api.upload(acmeToken, "acme", "metrics", fakeWasm("2"))
	expectStatus(t, "second upload of the tenant", r, http.StatusTooManyRequests)
	close(v.release)
	expectStatus(t, "first upload", <-first, http.StatusCreated)
	expectStatus(t, "upload after", api.upload(acmeToken, "acme", "logs", fakeWasm("3")), http.StatusCreated)
}

// Uploads that declare a large Content-Length and send a few bytes hold
// what they sent, not what they declared.
func TestAPIDeclaredLengthIsNotPreallocated(t *testing.T) {
	const declared, uploads = 8 << 20, 20
	api := newTestAPI(t, func(o *ServerOptions) { o.MaxModuleBytes = declared })
	srv := api.handler.(*server)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range uploads {
		c, err := net.Dial("tcp", strings.TrimPrefix(api.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		req := "POST " + logsModules + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeToken +
			"\r\nContent-Length: " + strconv.Itoa(declared) + "\r\n\r\n\x00asm"
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	// Every handler is reading its body once each holds its first chunk.
	deadline := time.Now().Add(20 * time.Second)
	for srv.bodies.heldBytes() < uploads*512 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := srv.bodies.heldBytes(); got != uploads*512 {
		t.Fatalf("%d uploads hold %d bytes, want %d", uploads, got, uploads*512)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	if grew > 16<<20 {
		t.Errorf("the heap grew by %d MB for %d stalled uploads declaring %d MiB each", grew>>20, uploads, declared>>20)
	}
	t.Logf("heap grew by %.1f MB for %d stalled uploads declaring %d MiB each", float64(grew)/(1<<20), uploads, declared>>20)
}

// The request bodies held at once are bounded: past MaxBodyMemory an
// upload is refused with 503.
func TestAPIBodyMemoryIsBounded(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.MaxModuleBytes, o.MaxBodyMemory = 1<<20, 48<<10 })
	srv := api.handler.(*server)
	// The first upload declares 64 KiB, sends 24 KiB and stalls.
	c, err := net.Dial("tcp", strings.TrimPrefix(api.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST " + logsModules + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + acmeToken + "\r\nContent-Length: 65536\r\n\r\n"
	if _, err := c.Write(append([]byte(head+"\x00asm"), make([]byte, 24<<10-4)...)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for srv.bodies.heldBytes() < 24<<10 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	held := srv.bodies.heldBytes()
	r := api.upload(acmeToken, "acme", "metrics", append(fakeWasm("b"), make([]byte, 40<<10)...))
	expectStatus(t, fmt.Sprintf("upload of 40 KiB while another holds %d bytes of a 48 KiB budget", held), r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	c.Close()
	deadline = time.Now().Add(10 * time.Second)
	for srv.bodies.heldBytes() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := srv.bodies.heldBytes(); got != 0 {
		t.Errorf("%d bytes still held after the requests ended", got)
	}
	expectStatus(t, "upload after", api.upload(acmeToken, "acme", "metrics", append(fakeWasm("b"), make([]byte, 40<<10)...)), http.StatusCreated)
}

// fakeCacheEntry makes a compiled-code file for sha in a compilation cache
// dir and records it in the cache's index as wasmhost does, returning its
// path.
func fakeCacheEntry(t *testing.T, dir, sha string) string {
	t.Helper()
	f := filepath.Join(dir, "wazero-test", sha+".bin")
	if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("code"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sluice-modules"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sluice-modules", sha), []byte("wazero-test/"+sha+".bin\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// The compiled code of modules the store does not hold is pruned from the
// engine's compilation cache: at start, and after a delete.
func TestAPIPrunesTheCompilationCache(t *testing.T) {
	cache := t.TempDir()
	gone := fakeCacheEntry(t, cache, strings.Repeat("ab", 32)) // compiled once, never stored
	api := newTestAPI(t, func(o *ServerOptions) { o.CacheDir = cache })
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the code of a module the store does not hold survived the start: %v", err)
	}
	expectStatus(t, "upload a", api.upload(acmeToken, "acme", "logs", fakeWasm("a")), http.StatusCreated)
	expectStatus(t, "upload b", api.upload(acmeToken, "acme", "logs", fakeWasm("b")), http.StatusCreated)
	a := fakeCacheEntry(t, cache, shaOf(fakeWasm("a")))
	b := fakeCacheEntry(t, cache, shaOf(fakeWasm("b")))
	expectStatus(t, "delete a", api.do("DELETE", logsModules+"/"+shaOf(fakeWasm("a")), acmeToken, nil), http.StatusNoContent)
	if _, err := os.Stat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted module's code is still cached: %v", err)
	}
	if _, err := os.Stat(b); err != nil {
		t.Errorf("a stored module's code was pruned: %v", err)
	}
}

// A module the engine runs without the store holding it (configured from
// a file) keeps its compiled code through every pruning: the start, a
// refused upload, a delete.
func TestAPIPruningKeepsModulesInUse(t *testing.T) {
	cache := t.TempDir()
	running := strings.Repeat("cd", 32)
	kept := fakeCacheEntry(t, cache, running)
	gone := fakeCacheEntry(t, cache, strings.Repeat("ef", 32))
	api := newTestAPI(t, func(o *ServerOptions) {
		o.CacheDir = cache
		o.InUse = func(sha string) bool { return sha == running }
	})
	if _, err := os.Stat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the code of a module neither stored nor in use survived the start: %v", err)
	}
	expectStatus(t, "refused upload", api.upload(acmeToken, "acme", "logs", []byte("not wasm")), http.StatusUnprocessableEntity)
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a refused upload pruned the code of a module in use: %v", err)
	}
	expectStatus(t, "upload a", api.upload(acmeToken, "acme", "logs", fakeWasm("a")), http.StatusCreated)
	expectStatus(t, "delete a", api.do("DELETE", logsModules+"/"+shaOf(fakeWasm("a")), acmeToken, nil), http.StatusNoContent)
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the code of a module in use was pruned: %v", err)
	}
}

// A request with two Authorization headers is refused with 400 before
// either token is looked at, whichever of them is right: the first one
// used to win, so a right token followed by a wrong one got 200.
func TestAPITwoAuthorizationHeadersAreRefused(t *testing.T) {
	api := newTestAPI(t, nil)
	for _, tokens := range [][]string{{acmeToken, "wrong"}, {"wrong", acmeToken}, {acmeToken, acmeToken}, {acmeToken, adminToken}} {
		for _, route := range []struct{ method, path string }{{"GET", "/v1/whoami"}, {"POST", logsModules}, {"GET", "/v1/nowhere"}} {
			req, err := http.NewRequest(route.method, api.url+route.path, strings.NewReader("\x00asm\x01\x00\x00\x00"))
			if err != nil {
				t.Fatal(err)
			}
			for _, tok := range tokens {
				req.Header.Add("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "2 Authorization headers") {
				t.Errorf("%s %s with tokens %q: %d %s; want 400 naming the 2 headers", route.method, route.path, tokens, resp.StatusCode, body)
			}
			expectAudit(t, api.lastAudit(), map[string]any{"status": 400, "outcome": "refused", "actor": "anonymous"})
		}
	}
	if st, _ := api.store.List("acme", "logs"); len(st.Versions) != 0 {
		t.Errorf("stored %d versions from requests with two tokens", len(st.Versions))
	}
}
