package conformance

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestRustSDKUnit runs the Rust SDK's own tests (cargo test, natively, with
// Debian's toolchain): a native Instance, std errors through ?, a table
// from another instance's Config, init refusals.
func TestRustSDKUnit(t *testing.T) {
	wasmbuild.SkipShort(t)
	ctx := context.Background()
	if err := wasmbuild.CheckRust(ctx); err != nil {
		t.Fatal(err)
	}
	target, err := wasmbuild.RustTargetDir()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, wasmbuild.DebianCargo, "test", "--offline", "--quiet",
		"--manifest-path", filepath.Join(wasmbuild.RepoRoot(), wasmbuild.RustSDKDir, "Cargo.toml"), "--target-dir", target)
	cmd.Env = wasmbuild.RustEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cargo test: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "test result: ok. 3 passed") {
		t.Fatalf("cargo test did not run the SDK's 3 unit tests:\n%s", out)
	}
}
