// Package wasmbuild compiles guest modules for tests, benchmarks and the
// demo: standard-Go modules (GOOS=wasip1, -buildmode=c-shared) and C modules
// (clang, wasm32-wasi, with guest-sdk/c; natively too, for comparison).
package wasmbuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Build compiles the Go module in dir (a reactor module) into out.
func Build(ctx context.Context, dir, out string) error {
	return goBuild(ctx, dir, out)
}

// goBuild runs go build for wasip1 in dir with extra flags.
func goBuild(ctx context.Context, dir, out string, flags ...string) error {
	args := append([]string{"build", "-buildmode=c-shared", "-trimpath"}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, ".")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build wasm module in %s: %w\n%s", dir, err, stderr.String())
	}
	return nil
}

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BuildT builds the module at repoRelDir (relative to the repository root)
// into the test's temp dir and returns the .wasm path.
func BuildT(t testing.TB, repoRelDir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(repoRelDir)+".wasm")
	if err := Build(context.Background(), filepath.Join(RepoRoot(), repoRelDir), out); err != nil {
		t.Fatal(err)
	}
	return out
}
