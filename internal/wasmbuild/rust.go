package wasmbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Rust modules are built with Debian's rustc and cargo (1.63), whose
// libstd-rust-dev-wasm32 carries the wasm32-wasi standard library. A rustup
// toolchain earlier on PATH usually has no wasm32 target, so both are
// called by path, and cargo is told which rustc to use.

// RustSDKDir is the Rust guest SDK, relative to the repository root.
const RustSDKDir = "guest-sdk/rust"

// Debian's toolchain, by path.
const (
	DebianCargo   = "/usr/bin/cargo"
	DebianRustc   = "/usr/bin/rustc"
	DebianRustdoc = "/usr/bin/rustdoc"
)

// ErrNoRust is returned when the Rust toolchain for wasm32-wasi is missing.
var ErrNoRust = errors.New("the Rust toolchain for wasm32-wasi is not installed (Debian: rustc cargo " +
	"libstd-rust-dev-wasm32, called as /usr/bin/cargo and /usr/bin/rustc): run `go tool -modfile=tools/go.mod task deps`")

// RustTarget is the target Rust modules are built for.
const RustTarget = "wasm32-wasi"

// RustEnv is the environment for Debian's cargo: its own rustc and
// rustdoc, whatever PATH says.
func RustEnv() []string {
	return append(os.Environ(), "RUSTC="+DebianRustc, "RUSTDOC="+DebianRustdoc)
}

// RustTargetDir is where cargo keeps its build state for the tests, shared
// so that a rebuild of unchanged sources is quick.
func RustTargetDir() (string, error) { return rustTargetDir() }

// CheckRust returns ErrNoRust unless Debian's Rust toolchain for
// wasm32-wasi is installed.
func CheckRust(ctx context.Context) error { return checkRust(ctx) }

// checkRust reports ErrNoRust unless Debian's cargo, rustc and the
// wasm32-wasi standard library are installed.
func checkRust(ctx context.Context) error {
	for _, p := range []string{DebianCargo, DebianRustc} {
		if _, err := os.Stat(p); err != nil {
			return ErrNoRust
		}
	}
	sysroot, err := exec.CommandContext(ctx, DebianRustc, "--print", "sysroot").Output()
	if err != nil {
		return fmt.Errorf("%s --print sysroot: %w", DebianRustc, err)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(sysroot)), "lib", "rustlib", RustTarget)); err != nil {
		return ErrNoRust
	}
	return nil
}

// rustTargetDir is where cargo keeps its build state, shared by the tests
// so that a rebuild of unchanged sources is quick.
func rustTargetDir() (string, error) {
	d, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(d), "cargo-target"), nil
}

// BuildRust builds the cdylib crate in dir for wasm32-wasi (release) and
// copies the module to out.
func BuildRust(ctx context.Context, dir, out string) error {
	if err := checkRust(ctx); err != nil {
		return err
	}
	target, err := rustTargetDir()
	if err != nil {
		return err
	}
	args := []string{"build", "--release", "--offline", "--target", RustTarget,
		"--manifest-path", filepath.Join(dir, "Cargo.toml"), "--target-dir", target,
		"--message-format", "short", "--quiet"}
	cmd := exec.CommandContext(ctx, DebianCargo, args...)
	cmd.Env = RustEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build Rust module in %s: cargo %s: %w\n%s", dir, strings.Join(args, " "), err, stderr.String())
	}
	name, err := crateName(dir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(target, RustTarget, "release", strings.ReplaceAll(name, "-", "_")+".wasm"))
	if err != nil {
		return fmt.Errorf("build Rust module in %s: %w", dir, err)
	}
	return os.WriteFile(out, b, 0o644)
}

// crateName reads the package name from dir/Cargo.toml.
func crateName(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "Cargo.toml"))
	if err != nil {
		return "", err
	}
	inPackage := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			inPackage = line == "[package]"
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && inPackage && strings.TrimSpace(k) == "name" {
			return strings.Trim(strings.TrimSpace(v), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/Cargo.toml: no package name", dir)
}

// BuildRustT builds the Rust module at repoRelDir into the test's temp dir
// and returns the .wasm path. A missing toolchain fails the test; under
// -short it skips (see SkipShort).
func BuildRustT(tb testing.TB, repoRelDir string) string {
	tb.Helper()
	SkipShort(tb)
	out := filepath.Join(tb.TempDir(), filepath.Base(repoRelDir)+".wasm")
	if err := BuildRust(context.Background(), filepath.Join(RepoRoot(), repoRelDir), out); err != nil {
		tb.Fatal(err)
	}
	return out
}
