package wasmbuild

import (
	"context"
	"path/filepath"
	"testing"
)

// BuildVersion compiles the Go module in dir like Build, setting the
// string variable main.version to version: distinct binaries of one
// source, as module versions for hot-swap tests.
func BuildVersion(ctx context.Context, dir, out, version string) error {
	return goBuild(ctx, dir, out, "-ldflags", "-X main.version="+version)
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
