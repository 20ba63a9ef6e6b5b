package wasmbuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildVersion compiles the Go module in dir like Build, setting the
// string variable main.version to version: distinct binaries of one
// source, as module versions for hot-swap tests.
func BuildVersion(ctx context.Context, dir, out, version string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildmode=c-shared", "-trimpath",
		"-ldflags", "-X main.version="+version, "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build wasm module %s in %s: %w\n%s", version, dir, err, stderr.String())
	}
	return nil
}

// BuildVersionT builds the module at repoRelDir with main.version set to
// version into the test's temp dir and returns the .wasm path.
func BuildVersionT(t testing.TB, repoRelDir, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(repoRelDir)+"-"+version+".wasm")
	if err := BuildVersion(context.Background(), filepath.Join(RepoRoot(), repoRelDir), out, version); err != nil {
		t.Fatal(err)
	}
	return out
}
