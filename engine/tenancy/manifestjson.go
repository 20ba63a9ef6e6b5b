package tenancy

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ManifestFormat is the manifest format this package reads and writes.
const ManifestFormat = 1

// manifestFile is the manifest on disk.
type manifestFile struct {
	Format    int              `json:"format"`
	Pipelines []pipelineRecord `json:"pipelines"`
}

type pipelineRecord struct {
	Tenant   string `json:"tenant"`
	Pipeline string `json:"pipeline"`
	State
}

// decodeManifest parses and checks a manifest, without its blobs. A
// UTF-8 byte order mark, which some editors put at the start of a file,
// is skipped; the next write leaves it out.
func decodeManifest(raw []byte) (manifest, error) {
	raw = bytes.TrimPrefix(raw, []byte("\xef\xbb\xbf"))
	if bytes.HasPrefix(raw, []byte("\xff\xfe")) || bytes.HasPrefix(raw, []byte("\xfe\xff")) {
		return nil, fmt.Errorf("%w: the manifest is UTF-16 (it starts with a UTF-16 byte order mark); save it as UTF-8", ErrCorrupt)
	}
	var head struct {
		Format *int `json:"format"`
	}
	// Unmarshal also refuses data after the top-level value.
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: not a JSON manifest: %v", ErrCorrupt, err)
	}
	switch {
	case head.Format == nil:
		return nil, fmt.Errorf("%w: no format field", ErrCorrupt)
	case *head.Format != ManifestFormat:
		return nil, fmt.Errorf("%w: manifest format %d; this sluice reads format %d", ErrCorrupt, *head.Format, ManifestFormat)
	}
	var f manifestFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	// An unknown field would be dropped by the next write: refuse it.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	m := make(manifest, len(f.Pipelines))
	for i := range f.Pipelines {
		p := &f.Pipelines[i]
		where := fmt.Sprintf("pipelines[%d]", i)
		if err := ValidName(p.Tenant); err != nil {
			return nil, fmt.Errorf("%w: %s: tenant: %v", ErrCorrupt, where, err)
		}
		if err := ValidName(p.Pipeline); err != nil {
			return nil, fmt.Errorf("%w: %s: pipeline: %v", ErrCorrupt, where, err)
		}
		where = fmt.Sprintf("tenant %s pipeline %s", p.Tenant, p.Pipeline)
		k := pipelineKey{p.Tenant, p.Pipeline}
		if m[k] != nil {
			return nil, fmt.Errorf("%w: %s is listed twice", ErrCorrupt, where)
		}
		if err := checkState(&p.State); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, where, err)
		}
		st := p.State
		m[k] = &st
	}
	// The next change writes the manifest back: it must be able to.
	if _, err := m.encode(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return m, nil
}

// checkState checks a pipeline's state on its own.
func checkState(st *State) error {
	seen := map[string]bool{}
	for i, v := range st.Versions {
		if !isSHA256(v.SHA256) {
			return fmt.Errorf("versions[%d]: sha256 %q is not 64 lowercase hex digits", i, abbreviate(v.SHA256, 80))
		}
		if seen[v.SHA256] {
			return fmt.Errorf("versions[%d]: %s is listed twice", i, v.SHA256)
		}
		seen[v.SHA256] = true
		if v.Size <= 0 {
			return fmt.Errorf("versions[%d] (%s): size %d", i, v.SHA256, v.Size)
		}
	}
	if st.Active != "" && !seen[st.Active] {
		return fmt.Errorf("active version %q is not among the versions", abbreviate(st.Active, 80))
	}
	for i, sha := range st.RollbackStack {
		if !seen[sha] {
			return fmt.Errorf("rollback_stack[%d]: %q is not among the versions", i, abbreviate(sha, 80))
		}
	}
	for i, a := range st.History {
		if !isSHA256(a.SHA256) || (a.Previous != "" && !isSHA256(a.Previous)) {
			return fmt.Errorf("history[%d]: a sha256 is not 64 lowercase hex digits", i)
		}
	}
	return checkQuarantines(st)
}

// encode renders the manifest, pipelines sorted, pipelines with no
// versions, history or quarantines left out.
func (m manifest) encode() ([]byte, error) {
	f := manifestFile{Format: ManifestFormat, Pipelines: []pipelineRecord{}}
	for _, k := range m.keys() {
		st := m[k]
		if len(st.Versions) == 0 && len(st.History) == 0 && len(st.Quarantined) == 0 {
			continue
		}
		f.Pipelines = append(f.Pipelines, pipelineRecord{Tenant: k.tenant, Pipeline: k.pipeline, State: *st})
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}
