package tenancy

import (
	"slices"
	"sort"
	"time"
)

// Version is one uploaded module of a pipeline.
type Version struct {
	SHA256     string    `json:"sha256"`
	Size       int64     `json:"size"`
	UploadedAt time.Time `json:"uploaded_at"`
	// UploadedBy is the uploader, as Principal.String gives it.
	UploadedBy string `json:"uploaded_by"`
	Note       string `json:"note,omitempty"`
}

// Activation records one change of a pipeline's active version.
type Activation struct {
	SHA256 string `json:"sha256"`
	// Previous is the version active before, empty if none was.
	Previous string    `json:"previous,omitempty"`
	At       time.Time `json:"at"`
	By       string    `json:"by"`
	// Rollback marks an activation made by Rollback.
	Rollback bool `json:"rollback,omitempty"`
	// Quarantine marks the restoring of this version because Previous was
	// quarantined (Store.Quarantine).
	Quarantine bool `json:"quarantine,omitempty"`
}

// State is a pipeline's module versions, as List returns it.
type State struct {
	// Active is the sha256 of the active version, empty if none is.
	Active string `json:"active"`
	// Versions are oldest first.
	Versions []Version `json:"versions"`
	// History is every activation, oldest first (the last maxHistory).
	History []Activation `json:"history"`
	// RollbackStack holds the versions active before the current one,
	// oldest first: Rollback returns to the last one and pops it. An
	// activation pushes the version it replaces; a deleted version leaves
	// the stack.
	RollbackStack []string `json:"rollback_stack"`
	// Quarantined are the versions that must not run until an admin
	// activates them (see Quarantine), oldest first.
	Quarantined []Quarantine `json:"quarantined,omitempty"`
}

// Version returns the version with this exact sha256.
func (st *State) Version(sha string) (Version, bool) {
	for _, v := range st.Versions {
		if v.SHA256 == sha {
			return v, true
		}
	}
	return Version{}, false
}

func (st *State) clone() *State {
	return &State{
		Active:        st.Active,
		Versions:      slices.Clone(st.Versions),
		History:       slices.Clone(st.History),
		RollbackStack: slices.Clone(st.RollbackStack),
		Quarantined:   slices.Clone(st.Quarantined),
	}
}

type pipelineKey struct{ tenant, pipeline string }

// manifest is the store's state in memory. A committed manifest is never
// modified: a change edits a clone, writes it and then replaces it.
type manifest map[pipelineKey]*State

func (m manifest) clone() manifest {
	out := make(manifest, len(m))
	for k, st := range m {
		out[k] = st.clone()
	}
	return out
}

// state returns the pipeline's state, creating it.
func (m manifest) state(tenant, pipeline string) *State {
	k := pipelineKey{tenant, pipeline}
	st := m[k]
	if st == nil {
		st = &State{}
		m[k] = st
	}
	return st
}

// referenced reports whether any pipeline lists the blob.
func (m manifest) referenced(sha string) bool {
	for _, st := range m {
		if _, ok := st.Version(sha); ok {
			return true
		}
	}
	return false
}

// versionCount is how many distinct versions the manifest lists.
func (m manifest) versionCount() int {
	seen := map[string]bool{}
	for _, st := range m {
		for _, v := range st.Versions {
			seen[v.SHA256] = true
		}
	}
	return len(seen)
}

// keys lists the pipelines sorted by tenant, then pipeline.
func (m manifest) keys() []pipelineKey {
	keys := make([]pipelineKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].tenant != keys[j].tenant {
			return keys[i].tenant < keys[j].tenant
		}
		return keys[i].pipeline < keys[j].pipeline
	})
	return keys
}
