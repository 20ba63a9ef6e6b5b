package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestRunUnreachableKafka: with ClickHouse up and no broker at its
// address, run fails within 10 s, saying so.
func TestRunUnreachableKafka(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	wasm := wasmbuild.BuildT(t, "examples/log-normalize")
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
}
