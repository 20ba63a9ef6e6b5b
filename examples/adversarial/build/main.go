// Command build compiles the adversarial modules of examples/adversarial
// (every subdirectory with a go.mod) into one directory, and writes the
// hand-assembled hostile modules of wasmhost/internal/wasmtest beside
// them:
//
//	go run ./examples/adversarial/build -out bin/adversarial
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

func main() {
	out := flag.String("out", "bin/adversarial", "directory for the .wasm files")
	flag.Parse()
	if err := build(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	root := filepath.Join(wasmbuild.RepoRoot(), "examples", "adversarial")
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			continue
		}
		wasm := filepath.Join(out, e.Name()+".wasm")
		if err := wasmbuild.Build(ctx, dir, wasm); err != nil {
			return err
		}
		fmt.Println(wasm)
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	// The hand-assembled ones come from a package internal to wasmhost.
	cmd := exec.CommandContext(ctx, "go", "run", "./wasmhost/internal/wasmtest/hostile", "-out", abs)
	cmd.Dir = wasmbuild.RepoRoot()
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hand-assembled modules: %w", err)
	}
	return nil
}
