package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

func (s *server) whoami(w http.ResponseWriter, r *http.Request, ev *auditEvent) {
	p := ev.principal
	resp := WhoamiResponse{Tenant: p.Tenant, Admin: p.Admin, Token: p.TokenID}
	if !p.Admin {
		resp.Pipelines = sortedKeys(s.pipelines[p.Tenant])
	}
	writeJSON(w, http.StatusOK, resp)
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
		History: st.History, RollbackStack: st.RollbackStack, Quarantined: st.Quarantined}
	if resp.Quarantined == nil {
		resp.Quarantined = []Quarantine{}
	}
	if v, ok := st.Version(st.Active); ok {
		resp.Active = &v
	}
	writeJSON(w, http.StatusOK, resp)
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
	if !s.refuseQuarantined(w, r, ev, ev.sha) {
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
	case errors.Is(err, ErrActive), errors.Is(err, ErrNoRollback), errors.Is(err, ErrTooManyVersions), errors.Is(err, ErrQuarantined):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
