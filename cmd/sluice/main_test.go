package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func writeConfig(t *testing.T, broker, module, ch string, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pipeline.yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: g
  topics: [logs]
module:
  path: %s
  tables: [logs]
  cache_dir: off
clickhouse:
  addr: %s
%s`, broker, module, ch, extra)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCLI runs the CLI in-process and returns its exit code, stderr and how
// long it took.
func runCLI(t *testing.T, args ...string) (int, string, time.Duration) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(args, &stdout, &stderr)
	return code, stderr.String(), time.Since(start)
}

func TestRunConfigErrors(t *testing.T) {
	notWasm := filepath.Join(t.TempDir(), "m.wasm")
	if err := os.WriteFile(notWasm, []byte("#!/bin/sh\necho not wasm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  string
		want string
	}{
		{"unknown key", writeConfig(t, "b:1", "m.wasm", "c:1", "  colour: blue\n"), "field colour not found"},
		{"missing module", writeConfig(t, closedAddr(t), filepath.Join(t.TempDir(), "absent.wasm"), "c:1", ""), "module.path"},
		{"not wasm", writeConfig(t, closedAddr(t), notWasm, "c:1", ""), "not a WebAssembly binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr, _ := runCLI(t, "run", "-config", tc.cfg)
			if code == 0 {
				t.Fatal("exit code 0")
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
		})
	}
	if code, stderr, _ := runCLI(t, "run"); code != 2 || !strings.Contains(stderr, "-config is required") {
		t.Errorf("no -config: code %d, stderr %q", code, stderr)
	}
	if code, _, _ := runCLI(t, "frobnicate"); code != 2 {
		t.Errorf("unknown command: code %d, want 2", code)
	}
}

// TestRunUnreachableClickHouse: with no ClickHouse at its address, run
// fails within 10 s, saying so.
func TestRunUnreachableClickHouse(t *testing.T) {
	wasm := wasmbuild.BuildT(t, "examples/log-normalize")
	cfg := writeConfig(t, closedAddr(t), wasm, closedAddr(t), "")
	code, stderr, took := runCLI(t, "run", "-config", cfg)
	if code == 0 {
		t.Fatal("exit code 0")
	}
	if !strings.Contains(stderr, "clickhouse") || !strings.Contains(stderr, "unreachable") {
		t.Errorf("stderr does not say ClickHouse is unreachable: %q", stderr)
	}
	if took > 10*time.Second {
		t.Errorf("took %s, want an error within 10s", took)
	}
}

// TestMain lets a test start this test binary as the sluice command: with
// SLUICE_TEST_AS_CLI=1 it runs the CLI on its arguments instead of the tests,
// and so it does as the stuck-call watcher that sluice run starts.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_TEST_AS_CLI") == "1" || len(os.Args) > 1 && os.Args[1] == "watch-calls" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
