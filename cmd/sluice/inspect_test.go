package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

func TestModuleInspect(t *testing.T) {
	wasm := moduleT(t, "examples/log-normalize")
	code, out, stderr := runModuleCLI(t, "inspect", wasm)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"abi version: 1\n", "sha256:      ", "  sluice.log(i32, i32, i32)\n", "  wasi_snapshot_preview1.fd_write(i32, i32, i32, i32) -> i32\n",
		"  sluice_transform(i32, i32) -> i64\n", "  memory (memory)\n", "tables:      not in the binary", "load:        ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	forbidden := moduleT(t, "examples/adversarial/forbidden-import")
	code, out, _ = runModuleCLI(t, "inspect", forbidden)
	if code != 1 || !strings.Contains(out, "  env.whatever(i32) -> i32\n") ||
		!strings.Contains(out, "load:        refused: module "+forbidden+": imports env.whatever") {
		t.Errorf("forbidden-import: exit %d:\n%s", code, out)
	}
	if code, _, stderr := runModuleCLI(t, "inspect", filepath.Join(wasmbuild.RepoRoot(), "go.mod")); code != 1 || !strings.Contains(stderr, "not a WebAssembly binary") {
		t.Errorf("go.mod: exit %d, %s", code, stderr)
	}
}
