package wasmhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Why an index of the compilation cache? wazero names a compiled module's
// file by a hash of the rewritten binary, its own version and the CPU's
// features, none of which the host can recompute, and never removes one.
// So when Load compiles a module into Config.CacheDir, the host records
// which files the compile added under cacheIndexDir/<sha256 of the
// upload>, and PruneCache removes those of the modules no longer wanted.
// Compiles into one directory are serialized within the process so that
// the files a compile adds are its own.

// cacheIndexDir is the index's directory inside Config.CacheDir.
const cacheIndexDir = "sluice-modules"

var cacheDirLocks sync.Map // clean dir → *sync.Mutex

func cacheLock(dir string) *sync.Mutex {
	mu, _ := cacheDirLocks.LoadOrStore(filepath.Clean(dir), &sync.Mutex{})
	return mu.(*sync.Mutex)
}

// cacheFiles lists the files under dir (relative, slash-separated), but
// the index.
func cacheFiles(dir string) (map[string]bool, error) {
	files := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			if rel == cacheIndexDir {
				return filepath.SkipDir
			}
			return nil
		}
		files[filepath.ToSlash(rel)] = true
		return nil
	})
	return files, err
}

// recordCacheFiles adds the files that appeared in dir since before to
// sha's index entry.
func recordCacheFiles(dir, sha string, before map[string]bool) error {
	after, err := cacheFiles(dir)
	if err != nil {
		return err
	}
	entry := filepath.Join(dir, cacheIndexDir, sha)
	owned := map[string]bool{}
	if b, err := os.ReadFile(entry); err == nil {
		for _, f := range strings.Fields(string(b)) {
			owned[f] = true
		}
	}
	added := false
	for f := range after {
		if !before[f] && !owned[f] {
			owned[f], added = true, true
		}
	}
	if !added {
		return nil
	}
	list := make([]string, 0, len(owned))
	for f := range owned {
		list = append(list, f)
	}
	sort.Strings(list)
	if err := os.MkdirAll(filepath.Dir(entry), 0o750); err != nil {
		return err
	}
	tmp := entry + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(list, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, entry)
}

// PruneCache removes from the compilation cache in dir (a Config.CacheDir)
// the compiled code of every module that keep (given its sha256) does not
// want, as recorded when a Runtime of this process or an earlier one
// compiled it, and returns how many files it removed. A Runtime that has a
// pruned module loaded keeps it; a later Load compiles it again.
func PruneCache(dir string, keep func(sha256 string) bool) (int, error) {
	mu := cacheLock(dir)
	mu.Lock()
	defer mu.Unlock()
	entries, err := os.ReadDir(filepath.Join(dir, cacheIndexDir))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prune compilation cache: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		sha := e.Name()
		if e.IsDir() || strings.HasSuffix(sha, ".tmp") || keep(sha) {
			continue
		}
		entry := filepath.Join(dir, cacheIndexDir, sha)
		b, err := os.ReadFile(entry)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if !filepath.IsLocal(filepath.FromSlash(f)) {
				continue // not written by recordCacheFiles
			}
			switch err := os.Remove(filepath.Join(dir, filepath.FromSlash(f))); {
			case err == nil:
				removed++
			case !errors.Is(err, fs.ErrNotExist):
				errs = append(errs, err)
			}
		}
		if err := os.Remove(entry); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune compilation cache: %w", err)
	}
	return removed, nil
}
