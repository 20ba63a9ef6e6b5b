package tenancy

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
)

// authenticate identifies the caller, or answers 401, or 429 if its token
// is wrong and its address or that token has sent too many wrong tokens
// lately, or 400 if the request has more than one Authorization header.
// A right token is always accepted: others' wrong tokens from the same
// address (a proxy's) must not lock it out.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request, ev *auditEvent) bool {
	// Which of two tokens would count is the server's guess, and a proxy
	// or client library may pick the other one: refuse to guess.
	if n := len(r.Header.Values("Authorization")); n > 1 {
		s.fail(w, r, ev, http.StatusBadRequest, fmt.Sprintf("%d Authorization headers; send one", n))
		return false
	}
	token := BearerToken(r)
	if p, ok := s.opts.Auth.Identify(token); ok {
		ev.principal = &p
		return true
	}
	if token != "" {
		ev.wrongToken = tokenID(HashToken(token))
	}
	if wait, over := s.authFail.failed(clientAddr(r), ev.wrongToken, s.now()); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		s.fail(w, r, ev, http.StatusTooManyRequests, "missing or unknown bearer token, and too many wrong tokens "+over+" lately; retry later")
		return false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
	s.fail(w, r, ev, http.StatusUnauthorized, "missing or unknown bearer token")
	return false
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
