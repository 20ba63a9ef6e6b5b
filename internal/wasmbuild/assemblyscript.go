package wasmbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// AssemblyScript modules are compiled with asc from npm (the version
// guest-sdk/assemblyscript/package-lock.json pins), installed with npm ci
// into the package's node_modules on first use.

// ASSDKDir is the AssemblyScript guest SDK, relative to the repository root.
const ASSDKDir = "guest-sdk/assemblyscript"

// ASFlags are the asc flags of a sluice module: a WASI-style reactor whose
// start function is exported as _initialize, and no env.abort import (an
// abort is a trap, which the host handles as an instance failure).
var ASFlags = []string{"-O3", "--runtime", "incremental", "--exportStart", "_initialize", "--use", "abort="}

// ErrNoNode is returned when node or npm is missing.
var ErrNoNode = errors.New("node and npm are not installed (Debian: nodejs npm): run `go tool -modfile=tools/go.mod task deps`")

// EnsureASC installs the npm packages of pkgDir (npm ci, from its lock
// file) when its asc is missing, and returns the path of asc.
func EnsureASC(ctx context.Context, pkgDir string) (string, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", ErrNoNode
		}
	}
	asc := filepath.Join(pkgDir, "node_modules", ".bin", "asc")
	if _, err := os.Stat(asc); err == nil {
		return asc, nil
	}
	// Test binaries run in parallel: one installs, the others wait for it.
	unlock, err := lockFile(ctx, filepath.Join(pkgDir, ".npm-install.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(asc); err == nil {
		return asc, nil
	}
	verb := "ci"
	if _, err := os.Stat(filepath.Join(pkgDir, "package-lock.json")); err != nil {
		verb = "install"
	}
	cmd := exec.CommandContext(ctx, "npm", verb, "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = pkgDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm %s in %s: %w\n%s", verb, pkgDir, err, stderr.String())
	}
	if _, err := os.Stat(asc); err != nil {
		return "", fmt.Errorf("npm %s in %s did not install asc: %w", verb, pkgDir, err)
	}
	return asc, nil
}

// BuildAS compiles the AssemblyScript entry file into out with the asc of
// pkgDir (see EnsureASC).
func BuildAS(ctx context.Context, pkgDir, entry, out string) error {
	asc, err := EnsureASC(ctx, pkgDir)
	if err != nil {
		return err
	}
	args := append([]string{entry, "-o", out}, ASFlags...)
	cmd := exec.CommandContext(ctx, asc, args...)
	cmd.Dir = filepath.Dir(entry)
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build AssemblyScript module %s: asc %s: %w\n%s", entry, strings.Join(args, " "), err, output.String())
	}
	return nil
}

// BuildASCached is BuildAS into the cache directory, keyed by the .ts
// sources of the entry's directory and of the SDK, the flags and asc's
// version, so that a rebuild of unchanged sources costs a hash (asc takes
// seconds). It returns the path of the built file.
func BuildASCached(ctx context.Context, entry string) (string, error) {
	sdk := filepath.Join(RepoRoot(), ASSDKDir)
	asc, err := EnsureASC(ctx, sdk)
	if err != nil {
		return "", err
	}
	version, err := exec.CommandContext(ctx, asc, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("asc --version: %w", err)
	}
	var srcs []string
	for _, d := range []string{filepath.Dir(entry), filepath.Join(sdk, "assembly")} {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !e.IsDir() && strings.HasSuffix(p, ".ts") {
				srcs = append(srcs, p)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	sort.Strings(srcs)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00", entry, version, ASFlags)
	for _, p := range srcs {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	cache = filepath.Join(filepath.Dir(cache), "asmodules")
	out := filepath.Join(cache, filepath.Base(filepath.Dir(entry))+"-"+hex.EncodeToString(h.Sum(nil))[:16]+".wasm")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(cache, ".build-*.wasm")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := BuildAS(ctx, sdk, entry, tmp.Name()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// BuildAST builds the AssemblyScript module whose entry file is at
// repoRelEntry, through the cache, and returns the file's path. A missing
// toolchain fails the test; under -short it skips (see SkipShort).
func BuildAST(tb testing.TB, repoRelEntry string) string {
	tb.Helper()
	SkipShort(tb)
	out, err := BuildASCached(context.Background(), filepath.Join(RepoRoot(), repoRelEntry))
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// lockFile takes an exclusive lock by creating path, waiting (up to 5
// minutes, or ctx) while another process holds it. A lock older than that
// is taken to be left by a process that died.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			return func() { os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) > 5*time.Minute {
			os.Remove(path)
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: still locked after 5 minutes", path)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
