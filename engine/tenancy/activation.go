package tenancy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
)

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
	if !ok || !s.refuseQuarantined(w, r, ev, v.SHA256) {
		return
	}
	q, quarantined := s.opts.Store.QuarantineOf(ev.tenant, ev.pipeline, v.SHA256)
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
	if quarantined {
		s.recordLift(r, ev, q)
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
		if errors.Is(err, ErrModuleRejected) {
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
