package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
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

func TestRunUnreachableServers(t *testing.T) {
	wasm := wasmbuild.BuildT(t, "examples/log-normalize")

	t.Run("clickhouse", func(t *testing.T) {
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
	})

	t.Run("kafka", func(t *testing.T) {
		ch := testinfra.ClickHouseT(t)
		ddl, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/schema.sql"))
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Exec(context.Background(), string(ddl)); err != nil {
			t.Fatal(err)
		}
		cfg := writeConfig(t, closedAddr(t), wasm, ch.Addr, "")
		code, stderr, took := runCLI(t, "run", "-config", cfg)
		if code == 0 {
			t.Fatal("exit code 0")
		}
		if !strings.Contains(stderr, "kafka brokers") || !strings.Contains(stderr, "unreachable") {
			t.Errorf("stderr does not say the brokers are unreachable: %q", stderr)
		}
		if took > 10*time.Second {
			t.Errorf("took %s, want an error within 10s", took)
		}
	})
}
