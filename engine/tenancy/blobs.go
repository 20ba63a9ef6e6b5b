package tenancy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// blobsDir, under the store's directory, holds each module binary once, as
// <sha256>.wasm.
const blobsDir = "blobs"

// blobFiles lists the sha256s of the blobs on disk.
func (s *Store) blobFiles() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, blobsDir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if sha, ok := strings.CutSuffix(e.Name(), ".wasm"); ok && isSHA256(sha) && e.Type().IsRegular() {
			out = append(out, sha)
		}
	}
	return out, nil
}

func (s *Store) blobPath(sha string) string {
	return filepath.Join(s.dir, blobsDir, sha+".wasm")
}

// readBlob reads a blob and checks its size and hash.
func (s *Store) readBlob(sha string, size int64) ([]byte, error) {
	path := s.blobPath(sha)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: blob %s is missing", ErrCorrupt, path)
	}
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != size {
		return nil, fmt.Errorf("%w: blob %s has %d bytes, the manifest says %d", ErrCorrupt, path, len(b), size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("%w: blob %s does not hash to its name", ErrCorrupt, path)
	}
	return b, nil
}

// writeBlob stores wasm under its sha256 unless an intact copy is there.
func (s *Store) writeBlob(sha string, wasm []byte) error {
	if _, err := s.readBlob(sha, int64(len(wasm))); err == nil {
		return nil
	}
	return writeFileAtomic(filepath.Join(s.dir, blobsDir), sha+".wasm", wasm, nil)
}

// verifyBlobs checks that every listed version's blob is there, with its
// size and hash.
func (s *Store) verifyBlobs(m manifest) error {
	checked := map[string]bool{}
	for _, k := range m.keys() {
		for _, v := range m[k].Versions {
			if checked[v.SHA256] {
				continue
			}
			if _, err := s.readBlob(v.SHA256, v.Size); err != nil {
				return fmt.Errorf("tenant %s pipeline %s version %s: %w", k.tenant, k.pipeline, v.SHA256, err)
			}
			checked[v.SHA256] = true
		}
	}
	return nil
}
