package wasmhost

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestLoadCommandModule: a Go module built without -buildmode=c-shared is a
// WASI command whose exports trap in runtime.notInitialized; the load error
// says how to build it.
func TestLoadCommandModule(t *testing.T) {
	skipGoCompile(t)
	out := filepath.Join(t.TempDir(), "command.wasm")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, ".")
	cmd.Dir = filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r := newTestRuntime(t, Config{})
	_, err = r.Load(context.Background(), "cmd", wasm)
	if !errors.Is(err, ErrCommandModule) {
		t.Fatalf("err = %v, want ErrCommandModule", err)
	}
	for _, want := range []string{"-buildmode=c-shared", "runtime.notInitialized"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s: %v", want, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "module cmd: "+ErrCommandModule.Error()) || strings.Count(err.Error(), "module cmd") != 1 {
		t.Errorf("error does not say how to build the module first, naming it once: %v", err)
	}
	// The c-shared build of the same source loads.
	if _, err := r.Load(context.Background(), "reactor", moduleWasm(t, "examples/log-normalize")); err != nil {
		t.Fatal(err)
	}
}
