package tenancy

import (
	"context"
	"log/slog"
	"net/http"
)

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
	// wrongToken is the id of a token no principal has, as TokenID.
	wrongToken string
}

// fail answers with an error and audits the refusal.
func (s *server) fail(w http.ResponseWriter, r *http.Request, ev *auditEvent, status int, reason string) {
	writeJSON(w, status, errorResponse{Error: reason})
	s.record(r, ev, status, reason)
}

// record writes the audit record of a request: every outcome of a change,
// and every refusal (401, 403, 413, 422, 429, and any answer to a request
// not authenticated) of anything.
func (s *server) record(r *http.Request, ev *auditEvent, status int, reason string) {
	refusal := status == http.StatusUnauthorized || status == http.StatusForbidden ||
		status == http.StatusRequestEntityTooLarge || status == http.StatusUnprocessableEntity ||
		status == http.StatusTooManyRequests || (ev.principal == nil && status >= 400)
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
	actor, token := "anonymous", ev.wrongToken
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
