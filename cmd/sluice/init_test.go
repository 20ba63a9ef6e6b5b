package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestModuleInitFreshDir is what a tenant does first, per language, in a
// directory outside this repository: sluice module init, the template's
// build.sh with the real toolchain, then sluice module test on the sample,
// whose rows must be the template's expected.txt.
func TestModuleInitFreshDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module per language with the real toolchains")
	}
	root, err := filepath.Abs(wasmbuild.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"go", "c", "rust", "ts"} {
		t.Run(lang, func(t *testing.T) {
			start := time.Now()
			dir := filepath.Join(t.TempDir(), "my-"+lang+"-module")
			if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
				t.Fatalf("%s is inside the repository %s", dir, root)
			}
			code, stdout, stderr := runModuleCLI(t, "init", "-sdk", root, lang, dir)
			if code != 0 {
				t.Fatalf("init: exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "test.sh") {
				t.Errorf("init printed %q", stdout)
			}
			build := exec.Command("bash", filepath.Join(dir, "build.sh"))
			build.Dir = dir
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build.sh: %v\n%s\n(a missing toolchain? run `go tool -modfile=tools/go.mod task deps`)", err, out)
			}
			built := time.Since(start)
			ddl, err := os.ReadFile(filepath.Join(dir, "table.sql"))
			if err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr = runModuleCLI(t, "test", "-module", filepath.Join(dir, "module.wasm"),
				"-input", filepath.Join(dir, "sample.jsonl"), "-table", string(ddl))
			if code != 0 {
				t.Fatalf("module test: exit %d: %s", code, stderr)
			}
			want, err := os.ReadFile(filepath.Join(dir, "expected.txt"))
			if err != nil {
				t.Fatal(err)
			}
			if stdout != string(want) {
				t.Fatalf("module test printed\n%s\nwant (expected.txt)\n%s", stdout, want)
			}
			if n := bytes.Count(want, []byte("events {")); n != 2 {
				t.Fatalf("expected.txt has %d rows, want 2", n)
			}
			t.Logf("%s: init, build and module test in %v (build %v)", lang, time.Since(start).Round(time.Millisecond), built.Round(time.Millisecond))
		})
	}
}

func TestModuleInitRefuses(t *testing.T) {
	root := wasmbuild.RepoRoot()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"init", "-sdk", root, "cobol", t.TempDir()}, 2, `unknown language "cobol"`},
		{[]string{"init", "-sdk", root, "go", dir}, 1, "exists and is not empty"},
		{[]string{"init", "-sdk", t.TempDir(), "go", filepath.Join(t.TempDir(), "m")}, 1, "not a sluice checkout"},
		{[]string{"init", "go"}, 2, "Usage:"},
	} {
		code, _, stderr := runModuleCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

func TestCrateName(t *testing.T) {
	for in, want := range map[string]string{"my-module": "my-module", "My_Module 2": "my-module-2", "9lives": "module-9lives", "": "module"} {
		if got := crateName(in); got != want {
			t.Errorf("crateName(%q) = %q, want %q", in, got, want)
		}
	}
}
