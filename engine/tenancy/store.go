package tenancy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// MaxVersions caps the versions one pipeline keeps; Put refuses more with
// ErrTooManyVersions until one is deleted.
const MaxVersions = 100

// maxHistory caps a pipeline's activation history and rollback stack; the
// oldest entries go first.
const maxHistory = 100

// minPrefix is the fewest hex digits that name a version.
const minPrefix = 8

// Errors of the Store, wrapped with the tenant, pipeline and version.
var (
	// ErrNotFound: the pipeline lists no such version (Resolve, Activate,
	// Delete, Blob). The API answers 404.
	ErrNotFound = errors.New("no such module version")
	// ErrBadReference: a version reference is not 8 to 64 hex digits. The
	// API answers 400.
	ErrBadReference = errors.New("not a sha256 or a prefix of at least 8 hex digits")
	// ErrAmbiguous: a prefix matches several versions. The API answers 400.
	ErrAmbiguous = errors.New("ambiguous sha256 prefix; give more digits")
	// ErrActive: Delete of the active version. The API answers 409.
	ErrActive = errors.New("the version is active; activate another one (or roll back) first")
	// ErrNoRollback: Rollback with no earlier version to return to. The
	// API answers 409.
	ErrNoRollback = errors.New("no earlier active version to roll back to")
	// ErrTooManyVersions: Put on a pipeline that holds MaxVersions. The API
	// answers 409.
	ErrTooManyVersions = errors.New("too many versions; delete an inactive one first")
	// ErrCorrupt: OpenStore found a manifest it cannot trust, or Blob a
	// blob whose content does not match its name. The message names the
	// problem; nothing is repaired or dropped silently.
	ErrCorrupt = errors.New("corrupt module store")
)

// Store keeps tenants' module versions on disk: each binary once, at
// blobs/<sha256>.wasm, whoever uploaded it, and manifest.json, which lists
// every (tenant, pipeline)'s versions, active version and history. A
// tenant sees only the versions listed under its own pipelines.
//
// Every change writes a new manifest to a temporary file, syncs it, renames
// it over manifest.json and syncs the directory, so a crash leaves either
// the old manifest or the new one. Blobs are written the same way before
// the manifest names them. It is safe for concurrent use.
type Store struct {
	dir string

	mu sync.Mutex
	m  manifest
	// beforeRename, if set, runs between writing the temporary manifest
	// and renaming it: tests simulate a crash there.
	beforeRename func() error
}

// manifestName, in the store's directory, lists every pipeline's versions.
const manifestName = "manifest.json"

// OpenStore opens the store in dir, creating it if needed. It loads the
// manifest and checks it: a known format, well-formed names and sha256s,
// the active version and the rollback stack among the versions, and every
// blob present with its size and hash. A manifest that fails any check is
// an error wrapping ErrCorrupt that names the problem. Leftover temporary
// files and the one blob a crash mid-change can leave unlisted are
// removed; more unlisted blobs are an ErrCorrupt (the manifest lost
// entries), and nothing is removed.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, blobsDir), 0o750); err != nil {
		return nil, fmt.Errorf("module store: %w", err)
	}
	s := &Store{dir: dir}
	for _, d := range []string{dir, filepath.Join(dir, blobsDir)} {
		if err := removeTemps(d); err != nil {
			return nil, fmt.Errorf("module store: %w", err)
		}
	}
	blobs, err := s.blobFiles()
	if err != nil {
		return nil, fmt.Errorf("module store: %w", err)
	}
	path := filepath.Join(dir, manifestName)
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if len(blobs) > 0 {
			return nil, fmt.Errorf("module store %s: %w: %s is missing but %s holds %d modules; restore the manifest, or empty the directory to start afresh",
				dir, ErrCorrupt, manifestName, blobsDir, len(blobs))
		}
		s.m = manifest{}
		if err := s.writeManifest(s.m); err != nil {
			return nil, fmt.Errorf("module store: %w", err)
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("module store: %w", err)
	}
	m, err := decodeManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("module store %s: %w", path, err)
	}
	if err := s.verifyBlobs(m); err != nil {
		return nil, fmt.Errorf("module store %s: %w", path, err)
	}
	var unlisted []string
	for _, sha := range blobs {
		if !m.referenced(sha) {
			unlisted = append(unlisted, sha)
		}
	}
	// A crash mid-change leaves at most one unlisted blob (Put writes the
	// blob before the manifest, Delete removes it after). More means the
	// manifest lost entries (emptied, or replaced by an older one): removing
	// them would delete modules the operator still has, so refuse.
	if len(unlisted) > maxUnlistedBlobs {
		return nil, fmt.Errorf("module store %s: %w: %s lists %d modules but %s holds %d more that it does not list; restore the manifest, or remove those blobs to start afresh",
			dir, ErrCorrupt, manifestName, m.versionCount(), blobsDir, len(unlisted))
	}
	for _, sha := range unlisted {
		if err := os.Remove(s.blobPath(sha)); err != nil {
			return nil, fmt.Errorf("module store: remove unlisted blob: %w", err)
		}
	}
	s.m = m
	return s, nil
}

// maxUnlistedBlobs is how many blobs the manifest may not list at open
// (what a crash mid-change leaves) before OpenStore refuses to open.
const maxUnlistedBlobs = 1

// writeManifest replaces manifest.json atomically with m.
func (s *Store) writeManifest(m manifest) error {
	b, err := m.encode()
	if err != nil {
		return err
	}
	return writeFileAtomic(s.dir, manifestName, b, s.beforeRename)
}

// commit makes next the store's state once it is on disk. s.mu is held.
func (s *Store) commit(next manifest) error {
	if err := s.writeManifest(next); err != nil {
		return err
	}
	s.m = next
	return nil
}

func checkNames(tenant, pipeline string) error {
	if err := ValidName(tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	if err := ValidName(pipeline); err != nil {
		return fmt.Errorf("pipeline: %w", err)
	}
	return nil
}

// Put adds a module version to a pipeline, by the principal by (see
// Principal.String), with an optional note. Uploading a binary the pipeline
// already lists changes nothing and returns that version with created
// false.
func (s *Store) Put(tenant, pipeline string, wasm []byte, by, note string) (Version, bool, error) {
	if err := checkNames(tenant, pipeline); err != nil {
		return Version{}, false, err
	}
	if len(wasm) == 0 {
		return Version{}, false, errors.New("empty module")
	}
	sum := sha256.Sum256(wasm)
	sha := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[pipelineKey{tenant, pipeline}]; st != nil {
		if v, ok := st.Version(sha); ok {
			return v, false, nil
		}
		if len(st.Versions) >= MaxVersions {
			return Version{}, false, fmt.Errorf("tenant %s pipeline %s holds %d versions: %w", tenant, pipeline, len(st.Versions), ErrTooManyVersions)
		}
	}
	if err := s.writeBlob(sha, wasm); err != nil {
		return Version{}, false, err
	}
	v := Version{SHA256: sha, Size: int64(len(wasm)), UploadedAt: time.Now().UTC(), UploadedBy: by, Note: note}
	next := s.m.clone()
	st := next.state(tenant, pipeline)
	st.Versions = append(st.Versions, v)
	if err := s.commit(next); err != nil {
		if !s.m.referenced(sha) {
			_ = os.Remove(s.blobPath(sha))
		}
		return Version{}, false, err
	}
	return v, true, nil
}

// List returns a pipeline's state; a pipeline with no uploads has a zero
// State.
func (s *Store) List(tenant, pipeline string) (State, error) {
	if err := checkNames(tenant, pipeline); err != nil {
		return State{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil {
		return State{Versions: []Version{}, History: []Activation{}, RollbackStack: []string{}}, nil
	}
	out := st.clone()
	if out.Versions == nil {
		out.Versions = []Version{}
	}
	if out.History == nil {
		out.History = []Activation{}
	}
	if out.RollbackStack == nil {
		out.RollbackStack = []string{}
	}
	return *out, nil
}

// Resolve finds the pipeline's version named by ref: a full sha256 or a
// unique prefix of at least 8 hex digits (either case).
func (s *Store) Resolve(tenant, pipeline, ref string) (Version, error) {
	if err := checkNames(tenant, pipeline); err != nil {
		return Version{}, err
	}
	ref = strings.ToLower(ref)
	if len(ref) < minPrefix || len(ref) > 2*sha256.Size || !isLowerHex(ref) {
		return Version{}, fmt.Errorf("version %q: %w", abbreviate(ref, 80), ErrBadReference)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []Version
	if st := s.m[pipelineKey{tenant, pipeline}]; st != nil {
		for _, v := range st.Versions {
			if strings.HasPrefix(v.SHA256, ref) {
				found = append(found, v)
			}
		}
	}
	switch len(found) {
	case 0:
		return Version{}, fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, ref, ErrNotFound)
	case 1:
		return found[0], nil
	}
	return Version{}, fmt.Errorf("tenant %s pipeline %s version %s matches %d versions: %w", tenant, pipeline, ref, len(found), ErrAmbiguous)
}

// Active returns the pipeline's active version.
func (s *Store) Active(tenant, pipeline string) (Version, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil || st.Active == "" {
		return Version{}, false
	}
	return st.Version(st.Active)
}

// Activate makes the version with this full sha256 the pipeline's active
// one, by the principal by, and returns the version it replaces (empty if
// none) and whether anything changed: activating the active version does
// not. The replaced version goes on the rollback stack. Activating a
// quarantined version lifts its quarantine: the API lets only an admin.
//
// Activate records the decision only: the caller validates the module and
// swaps it into the engine (the API server does both, see NewServer).
func (s *Store) Activate(tenant, pipeline, sha, by string) (prev string, changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil {
		return "", false, fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, sha, ErrNotFound)
	}
	if _, ok := st.Version(sha); !ok {
		return "", false, fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, sha, ErrNotFound)
	}
	if st.Active == sha {
		return sha, false, nil
	}
	next := s.m.clone()
	nst := next[pipelineKey{tenant, pipeline}]
	prev = nst.Active
	if prev != "" {
		nst.RollbackStack = appendCapped(nst.RollbackStack, prev)
	}
	nst.Active = sha
	nst.liftQuarantine(sha)
	nst.History = appendCapped(nst.History, Activation{SHA256: sha, Previous: prev, At: time.Now().UTC(), By: by})
	if err := s.commit(next); err != nil {
		return "", false, err
	}
	return prev, true, nil
}

// RollbackTarget is the version Rollback would activate: the last one on
// the rollback stack. ErrNoRollback if the stack is empty.
func (s *Store) RollbackTarget(tenant, pipeline string) (Version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil || len(st.RollbackStack) == 0 {
		return Version{}, fmt.Errorf("tenant %s pipeline %s: %w", tenant, pipeline, ErrNoRollback)
	}
	v, _ := st.Version(st.RollbackStack[len(st.RollbackStack)-1])
	return v, nil
}

// Rollback re-activates the version active before the current one (the
// RollbackTarget), by the principal by, and pops it off the rollback
// stack, so that rolling back again goes one further back. It returns the
// version now active and the one it replaced.
func (s *Store) Rollback(tenant, pipeline, by string) (to Version, prev string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil || len(st.RollbackStack) == 0 {
		return Version{}, "", fmt.Errorf("tenant %s pipeline %s: %w", tenant, pipeline, ErrNoRollback)
	}
	next := s.m.clone()
	nst := next[pipelineKey{tenant, pipeline}]
	target := nst.RollbackStack[len(nst.RollbackStack)-1]
	nst.RollbackStack = nst.RollbackStack[:len(nst.RollbackStack)-1]
	prev = nst.Active
	nst.Active = target
	nst.History = appendCapped(nst.History, Activation{SHA256: target, Previous: prev, At: time.Now().UTC(), By: by, Rollback: true})
	if err := s.commit(next); err != nil {
		return Version{}, "", err
	}
	to, _ = nst.Version(target)
	return to, prev, nil
}

// Delete removes an inactive version (full sha256) from a pipeline, and
// its blob once no pipeline lists it. ErrActive if it is the active one.
func (s *Store) Delete(tenant, pipeline, sha string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[pipelineKey{tenant, pipeline}]
	if st == nil {
		return fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, sha, ErrNotFound)
	}
	if _, ok := st.Version(sha); !ok {
		return fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, sha, ErrNotFound)
	}
	if st.Active == sha {
		return fmt.Errorf("tenant %s pipeline %s version %s: %w", tenant, pipeline, sha, ErrActive)
	}
	next := s.m.clone()
	nst := next[pipelineKey{tenant, pipeline}]
	nst.Versions = slices.DeleteFunc(nst.Versions, func(v Version) bool { return v.SHA256 == sha })
	nst.RollbackStack = slices.DeleteFunc(nst.RollbackStack, func(x string) bool { return x == sha })
	if err := s.commit(next); err != nil {
		return err
	}
	if !next.referenced(sha) {
		// A failure here leaves an unlisted blob, which OpenStore removes.
		_ = os.Remove(s.blobPath(sha))
	}
	return nil
}

// storedPipeline is a pipeline the store lists, with its version count.
type storedPipeline struct {
	tenant, pipeline string
	versions         int
}

// storedPipelines lists the pipelines that have versions, sorted by tenant,
// then pipeline.
func (s *Store) storedPipelines() []storedPipeline {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []storedPipeline
	for _, k := range s.m.keys() {
		if n := len(s.m[k].Versions); n > 0 {
			out = append(out, storedPipeline{k.tenant, k.pipeline, n})
		}
	}
	return out
}

// Stored reports whether any pipeline lists the version sha.
func (s *Store) Stored(sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.referenced(sha)
}

// Blob returns a listed module's binary, checking its hash.
func (s *Store) Blob(sha string) ([]byte, error) {
	// The lock keeps a concurrent Delete from removing the blob mid-read.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.m {
		if v, ok := st.Version(sha); ok {
			return s.readBlob(sha, v.Size)
		}
	}
	return nil, fmt.Errorf("module %s: %w", abbreviate(sha, 80), ErrNotFound)
}

// appendCapped appends x, dropping the oldest entries past maxHistory.
func appendCapped[T any](s []T, x T) []T {
	s = append(s, x)
	if len(s) > maxHistory {
		s = slices.Clone(s[len(s)-maxHistory:])
	}
	return s
}
