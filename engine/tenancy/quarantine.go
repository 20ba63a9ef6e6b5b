package tenancy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"
)

// Quarantine records that a pipeline's module version must not run: a
// call of it ran past its deadline and the interrupt could not stop it,
// so the process was killed from outside (docs/adr/0007). The version is
// deactivated, and only an admin's activation runs it again, which lifts
// the quarantine. A quarantine outlives the version's deletion, so that
// the tenant cannot upload the same binary again.
type Quarantine struct {
	SHA256 string    `json:"sha256"`
	At     time.Time `json:"at"`
	// Reason says what was seen, as the stuck-call watcher put it.
	Reason string `json:"reason"`
	// By is who quarantined it: "sluice (stuck-call watcher)".
	By string `json:"by"`
}

// QuarantinedBy is the principal recorded for the watcher's quarantines.
const QuarantinedBy = "sluice (stuck-call watcher)"

// ErrQuarantined: a tenant's activation or upload of a quarantined
// version. The API answers 409.
var ErrQuarantined = errors.New("the version is quarantined; an admin must activate it to run it again")

// QuarantineOutcome is what Store.Quarantine changed.
type QuarantineOutcome struct {
	// Already: the version was quarantined before; nothing changed.
	Already bool
	// WasActive: it was the pipeline's active version. Restored is the
	// version active now in its place (the last on the rollback stack),
	// empty when there was none: the pipeline then waits for an
	// activation.
	WasActive bool
	Restored  string
}

// Quarantine quarantines the pipeline's version q.SHA256, whether or not
// the pipeline lists it (a module that stuck its upload check never was):
// it leaves the rollback stack and, if it is active, the version before
// it is restored, recorded as an activation by q.By.
func (s *Store) Quarantine(tenant, pipeline string, q Quarantine) (QuarantineOutcome, error) {
	if err := checkNames(tenant, pipeline); err != nil {
		return QuarantineOutcome{}, err
	}
	if !isSHA256(q.SHA256) {
		return QuarantineOutcome{}, fmt.Errorf("quarantine: sha256 %q is not 64 lowercase hex digits", abbreviate(q.SHA256, 80))
	}
	if q.At.IsZero() {
		q.At = time.Now()
	}
	q.At = q.At.UTC()
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[pipelineKey{tenant, pipeline}]; st != nil && st.quarantined(q.SHA256) != nil {
		return QuarantineOutcome{Already: true}, nil
	}
	next := s.m.clone()
	st := next.state(tenant, pipeline)
	st.Quarantined = append(st.Quarantined, q)
	st.RollbackStack = slices.DeleteFunc(st.RollbackStack, func(x string) bool { return x == q.SHA256 })
	var out QuarantineOutcome
	if st.Active == q.SHA256 {
		out.WasActive = true
		st.Active = ""
		if n := len(st.RollbackStack); n > 0 {
			out.Restored = st.RollbackStack[n-1]
			st.RollbackStack = st.RollbackStack[:n-1]
			st.Active = out.Restored
			st.History = appendCapped(st.History, Activation{SHA256: out.Restored, Previous: q.SHA256, At: q.At, By: q.By, Quarantine: true})
		}
	}
	if err := s.commit(next); err != nil {
		return QuarantineOutcome{}, err
	}
	return out, nil
}

// QuarantineOf returns the pipeline's quarantine of version sha, if any.
func (s *Store) QuarantineOf(tenant, pipeline, sha string) (Quarantine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[pipelineKey{tenant, pipeline}]; st != nil {
		if q := st.quarantined(sha); q != nil {
			return *q, true
		}
	}
	return Quarantine{}, false
}

// QuarantinedVersion is one quarantine and its pipeline.
type QuarantinedVersion struct {
	Tenant, Pipeline string
	Quarantine
}

// Quarantines lists every pipeline's quarantined versions, by tenant,
// pipeline and time.
func (s *Store) Quarantines() []QuarantinedVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []QuarantinedVersion
	for _, k := range s.m.keys() {
		for _, q := range s.m[k].Quarantined {
			out = append(out, QuarantinedVersion{Tenant: k.tenant, Pipeline: k.pipeline, Quarantine: q})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Tenant != b.Tenant || a.Pipeline != b.Pipeline {
			return a.Tenant < b.Tenant || a.Tenant == b.Tenant && a.Pipeline < b.Pipeline
		}
		return a.At.Before(b.At)
	})
	return out
}

// quarantined returns the state's quarantine of sha, nil if none.
func (st *State) quarantined(sha string) *Quarantine {
	for i := range st.Quarantined {
		if st.Quarantined[i].SHA256 == sha {
			return &st.Quarantined[i]
		}
	}
	return nil
}

// liftQuarantine drops the state's quarantine of sha: an admin activated
// it.
func (st *State) liftQuarantine(sha string) {
	st.Quarantined = slices.DeleteFunc(st.Quarantined, func(q Quarantine) bool { return q.SHA256 == sha })
}

// checkQuarantines checks a state's quarantines on their own.
func checkQuarantines(st *State) error {
	seen := map[string]bool{}
	for i, q := range st.Quarantined {
		if !isSHA256(q.SHA256) {
			return fmt.Errorf("quarantined[%d]: sha256 %q is not 64 lowercase hex digits", i, abbreviate(q.SHA256, 80))
		}
		if seen[q.SHA256] {
			return fmt.Errorf("quarantined[%d]: %s is listed twice", i, q.SHA256)
		}
		seen[q.SHA256] = true
	}
	if seen[st.Active] {
		return fmt.Errorf("the active version %s is quarantined", st.Active)
	}
	for i, sha := range st.RollbackStack {
		if seen[sha] {
			return fmt.Errorf("rollback_stack[%d]: %s is quarantined", i, sha)
		}
	}
	return nil
}

// refuseQuarantined answers 409 to a tenant's upload or activation of a
// quarantined version; an admin may go on (and an activation lifts the
// quarantine). It reports whether the request may go on.
func (s *server) refuseQuarantined(w http.ResponseWriter, r *http.Request, ev *auditEvent, sha string) bool {
	q, ok := s.opts.Store.QuarantineOf(ev.tenant, ev.pipeline, sha)
	if !ok || ev.principal.Admin {
		return true
	}
	s.fail(w, r, ev, http.StatusConflict, fmt.Sprintf("tenant %s pipeline %s version %s: %v (quarantined at %s: %s)",
		ev.tenant, ev.pipeline, sha, ErrQuarantined, q.At.Format(time.RFC3339), q.Reason))
	return false
}

// recordLift audits an admin's activation that lifted a quarantine.
func (s *server) recordLift(r *http.Request, ev *auditEvent, q Quarantine) {
	s.opts.Audit.LogAttrs(context.WithoutCancel(r.Context()), slog.LevelWarn, "audit",
		slog.String("action", "unquarantine"), slog.String("actor", ev.principal.actor()),
		slog.String("token", ev.principal.TokenID), slog.String("tenant", ev.tenant),
		slog.String("pipeline", ev.pipeline), slog.String("sha256", q.SHA256), slog.String("outcome", "ok"),
		slog.String("reason", abbreviate("activated by an admin; it was quarantined at "+q.At.Format(time.RFC3339)+": "+q.Reason, 1000)),
		slog.String("remote", r.RemoteAddr))
}

// AuditQuarantine writes the audit record of a quarantine, in the admin
// API's audit format, with actor "sluice".
func AuditQuarantine(audit *slog.Logger, tenant, pipeline string, q Quarantine, out QuarantineOutcome) {
	attrs := []slog.Attr{
		slog.String("action", "quarantine"), slog.String("actor", "sluice"), slog.String("token", ""),
		slog.String("tenant", tenant), slog.String("pipeline", pipeline), slog.String("sha256", q.SHA256),
		slog.String("outcome", "ok"), slog.String("reason", abbreviate(q.Reason, 1000)),
	}
	switch {
	case out.Restored != "":
		attrs = append(attrs, slog.String("restored", out.Restored))
	case out.WasActive:
		attrs = append(attrs, slog.String("restored", "none: the pipeline waits for an activation"))
	}
	audit.LogAttrs(context.Background(), slog.LevelWarn, "audit", attrs...)
}
