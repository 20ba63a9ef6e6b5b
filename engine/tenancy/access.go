package tenancy

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// authenticate identifies the caller, or answers 401, or 429 if the
// client's IP has sent too many wrong tokens lately, or 400 if the request
// has more than one Authorization header.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request, ev *auditEvent) bool {
	// Which of two tokens would count is the server's guess, and a proxy
	// or client library may pick the other one: refuse to guess.
	if n := len(r.Header.Values("Authorization")); n > 1 {
		s.fail(w, r, ev, http.StatusBadRequest, fmt.Sprintf("%d Authorization headers; send one", n))
		return false
	}
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
