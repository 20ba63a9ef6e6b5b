package tenancy

import (
	"encoding/json"
	"net/http"
)

// WhoamiResponse is GET /v1/whoami.
type WhoamiResponse struct {
	Tenant string `json:"tenant,omitempty"`
	Admin  bool   `json:"admin"`
	// Token is the token's id (a prefix of its hash).
	Token string `json:"token"`
	// Pipelines are the tenant's, for a tenant's token.
	Pipelines []string `json:"pipelines,omitempty"`
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

// ListResponse is GET …/modules: a pipeline's versions.
type ListResponse struct {
	Tenant   string       `json:"tenant"`
	Pipeline string       `json:"pipeline"`
	Active   *Version     `json:"active"`
	Versions []Version    `json:"versions"`
	History  []Activation `json:"history"`
	// RollbackStack: rollback returns to the last one.
	RollbackStack []string `json:"rollback_stack"`
	// Quarantined: versions that only an admin's activation runs again.
	Quarantined []Quarantine `json:"quarantined"`
}

// UploadResponse is POST …/modules.
type UploadResponse struct {
	Version Version `json:"version"`
	// Created is false when the pipeline already had this binary.
	Created bool `json:"created"`
}

// ActivateResponse is POST …/activate and …/rollback.
type ActivateResponse struct {
	Active   Version  `json:"active"`
	Previous *Version `json:"previous"`
	// Changed is false when the version was already active.
	Changed bool `json:"changed"`
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
