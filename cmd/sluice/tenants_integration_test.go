package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// lockedBuffer is a bytes.Buffer safe to read while a process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunTenantsWithAdminAPI runs `sluice run` with a tenant whose pipeline
// has no module yet, pushes and activates one with `sluice module push`, and
// checks that the records land, that `sluice module ls` lists the version,
// that the audit log has the upload, and that SIGTERM drains and exits 0.
func TestRunTenantsWithAdminAPI(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	kafka := testinfra.KafkaT(t)
	ctx := context.Background()
	if err := ch.Exec(ctx, "CREATE TABLE events (topic String, partition Int32, offset Int64, version String, value String) ENGINE = MergeTree ORDER BY offset"); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"acme-events", "dlq"} {
		if err := kafka.CreateTopic(ctx, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	wasm := wasmbuild.BuildVersionT(t, "engine/testdata/versioned", "v1")

	const token = "acme-secret-token"
	adminAddr := closedAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: tenants
clickhouse:
  addr: %s
dead_letter:
  topic: dlq
module:
  cache_dir: off
observability:
  listen: off
admin:
  listen: %s
  store_dir: %s
  # The check compiles the module in this race-instrumented process.
  check_timeout: 10m
tenants:
  - id: acme
    tokens: ["%s"]
    pipelines:
      - name: events
        topics: [acme-events]
        tables: [events]
`, kafka.Addr, ch.Addr, adminAddr, t.TempDir(), tenancy.HashToken(token))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer
	cmd := exec.Command(os.Args[0], "run", "-config", cfgPath)
	cmd.Env = append(os.Environ(), "SLUICE_TEST_AS_CLI=1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("sluice output:\n%s", logs.String())
		}
	}()

	url := "http://" + adminAddr
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(url + "/v1/whoami")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin API not up within 60s: %v", err)
		}
	}

	cl, err := kafka.NewClient(kgo.DefaultProduceTopic("acme-events"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		cl.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// Two checks compile the module in the race-instrumented server: on a
	// busy machine that takes minutes, past the CLI's default bound.
	if code, stderr, _ := runCLI(t, "module", "push", "-server", url, "-token", token, "-timeout", "10m", "-activate", wasm); code != 0 {
		t.Fatalf("module push: exit %d: %s", code, stderr)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, err := ch.Query(ctx, "SELECT count(), countIf(version = 'v1') FROM events")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) == "1000\t1000" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("(rows, v1 rows) = %q within 60s, want 1000 of each", strings.TrimSpace(out))
		}
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"module", "ls", "-server", url, "-token", token}, &stdout, &stderr); code != 0 {
		t.Fatalf("module ls: exit %d: %s", code, stderr.String())
	}
	bin, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	active := regexp.MustCompile(`(?m)^\*\s+` + hex.EncodeToString(sum[:])[:16] + `\s`)
	if ls := stdout.String(); !strings.Contains(ls, "acme/events: 1 version(s)\n") || !active.MatchString(ls) {
		t.Errorf("module ls does not list the pushed version as active:\n%s", ls)
	}
	if code, _, _ := runCLI(t, "module", "ls", "-server", url, "-token", "wrong"); code == 0 {
		t.Error("module ls with a wrong token exited 0")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("sluice run after SIGTERM: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("sluice run did not exit within 40s of SIGTERM")
	}
	out := logs.String()
	for _, want := range []string{"serving the module admin API", "msg=audit log=audit action=upload actor=acme", "action=activate", "outcome=refused status=401", "module activated"} {
		if !strings.Contains(out, want) {
			t.Errorf("sluice output lacks %q", want)
		}
	}
	if strings.Contains(out, token) {
		t.Error("sluice output contains the token")
	}
}
