package wasmbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// C modules are built with clang from Debian's packages: clang-14 (wasm32
// code generation), lld-14 (wasm-ld), wasi-libc (the sysroot) and
// libclang-rt-14-dev-wasm32 (compiler builtins). `go tool -modfile=tools/go.mod task deps`
// installs them.

// CTarget is what BuildC compiles a C module for.
type CTarget int

const (
	// Wasm is a WASI reactor module for the sluice host.
	Wasm CTarget = iota
	// Native is a shared library of the same sources for the build
	// machine, loaded by package internal/cnative.
	Native
)

func (t CTarget) String() string {
	if t == Native {
		return "native"
	}
	return "wasm"
}

// COptFlags is the optimisation of both targets, the same so that the wasm
// and native builds of a module compare the same compiled source.
var COptFlags = []string{"-O2"}

// SDKDir is the C guest SDK, relative to the repository root.
const SDKDir = "guest-sdk/c"

// cFlags are the compiler flags for the target, after COptFlags.
func cFlags(t CTarget) []string {
	common := []string{"-std=c11", "-Wall", "-Wextra", "-I" + filepath.Join(RepoRoot(), SDKDir)}
	if t == Native {
		// Hidden visibility keeps calls inside the library direct, as in a
		// static build; sluice.h exports the two entry points.
		return append(common, "-shared", "-fPIC", "-fvisibility=hidden")
	}
	// Bulk memory turns memcpy and memset into memory.copy and memory.fill,
	// which wazero runs with Go's memmove: without it they are wasi-libc's
	// byte loops, where the native build has glibc's vectorised ones.
	return append(common, "--target=wasm32-wasi", "-mexec-model=reactor", "-mbulk-memory")
}

// ErrNoClang is returned when no clang is installed.
var ErrNoClang = errors.New("clang-14 (or clang) is not installed; install the C toolchain " +
	"(Debian: clang-14 lld-14 wasi-libc libclang-rt-14-dev-wasm32) with `go tool -modfile=tools/go.mod task deps`")

// Clang returns the clang to use: clang-14, else clang, from PATH.
func Clang() (string, error) {
	for _, name := range []string{"clang-14", "clang"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoClang
}

// cSources lists the .c files of the module in dir and of the SDK: the
// files a build compiles. Headers of both directories go into the cache key.
func cSources(dir string) (srcs, all []string, err error) {
	for _, d := range []string{dir, filepath.Join(RepoRoot(), SDKDir)} {
		ents, err := os.ReadDir(d)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range ents {
			name := e.Name()
			if e.IsDir() || !(strings.HasSuffix(name, ".c") || strings.HasSuffix(name, ".h")) {
				continue
			}
			p := filepath.Join(d, name)
			all = append(all, p)
			if strings.HasSuffix(name, ".c") {
				srcs = append(srcs, p)
			}
		}
	}
	sort.Strings(srcs)
	sort.Strings(all)
	if len(srcs) == 0 {
		return nil, nil, fmt.Errorf("no .c files in %s", dir)
	}
	return srcs, all, nil
}

// BuildC compiles the C module in dir (its .c files) with the C guest SDK
// (guest-sdk/c) for target into out.
func BuildC(ctx context.Context, target CTarget, dir, out string, extraFlags ...string) error {
	cc, err := Clang()
	if err != nil {
		return err
	}
	srcs, _, err := cSources(dir)
	if err != nil {
		return err
	}
	return buildC(ctx, cc, target, srcs, out, extraFlags)
}

func buildC(ctx context.Context, cc string, target CTarget, srcs []string, out string, extraFlags []string) error {
	args := append(append(append([]string{}, COptFlags...), cFlags(target)...), extraFlags...)
	args = append(append(args, "-o", out), srcs...)
	cmd := exec.CommandContext(ctx, cc, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := stderr.String()
		if target == Wasm && (strings.Contains(msg, "wasm-ld") || strings.Contains(msg, "wasi") ||
			strings.Contains(msg, "libclang_rt")) {
			msg += "\n(the wasm32-wasi toolchain is incomplete: run `go tool -modfile=tools/go.mod task deps`)"
		}
		return fmt.Errorf("build C module (%s): %s %s: %w\n%s", target, cc, strings.Join(args, " "), err, msg)
	}
	return nil
}

// CacheDir is where built C modules are kept: $SLUICE_CACHE (as
// scripts/deps.sh uses it) or the user cache directory, under sluice/.
func CacheDir() (string, error) {
	if d := os.Getenv("SLUICE_CACHE"); d != "" {
		return filepath.Join(d, "cmodules"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "sluice", "cmodules"), nil
}

// BuildCCached is BuildC into the cache directory, keyed by the sources, the
// flags and the compiler's version, so that a rebuild of unchanged sources
// costs a hash. It returns the path of the built file.
func BuildCCached(ctx context.Context, target CTarget, dir string, extraFlags ...string) (string, error) {
	cc, err := Clang()
	if err != nil {
		return "", err
	}
	srcs, all, err := cSources(dir)
	if err != nil {
		return "", err
	}
	version, err := exec.CommandContext(ctx, cc, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", cc, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%q\x00%q\x00", target, version, append(append([]string{}, COptFlags...), cFlags(target)...), extraFlags)
	for _, p := range all {
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
	ext := ".wasm"
	if target == Native {
		ext = ".so"
	}
	out := filepath.Join(cache, filepath.Base(dir)+"-"+hex.EncodeToString(h.Sum(nil))[:16]+ext)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Build next to the final name and rename, so that concurrent test
	// binaries never see half a file.
	tmp, err := os.CreateTemp(cache, ".build-*"+ext)
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := buildC(ctx, cc, target, srcs, tmp.Name(), extraFlags); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// BuildCT builds the C module at repoRelDir (relative to the repository
// root) for target, through the cache, and returns the file's path. It
// fails the test, saying how to install the toolchain, when clang is
// missing: a test that needs it must not pass silently without it. Under
// -short it skips tb (see SkipShort).
func BuildCT(tb testing.TB, target CTarget, repoRelDir string, extraFlags ...string) string {
	tb.Helper()
	SkipShort(tb)
	out, err := BuildCCached(context.Background(), target, filepath.Join(RepoRoot(), repoRelDir), extraFlags...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
