package tenancy

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

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
