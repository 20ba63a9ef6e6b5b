package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine/tenancy"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// faultInjectSection is the custom section a binary built with the
// sluice_faultinject tag loads a module uninstrumented for (see
// wasmhost/faultinject.go); a production binary ignores it.
const faultInjectSection = "sluice.faultinject.uninstrumented"

// spinningModule is a sluice module whose sluice_transform loops forever,
// marked for the faultinject build to load without the deadline's
// instrumentation: the guard has failed, as it would for a module that
// found a way around it. Its other exports answer at once.
func spinningModule() []byte {
	vec := func(items ...[]byte) []byte {
		b := []byte{byte(len(items))}
		for _, it := range items {
			b = append(b, it...)
		}
		return b
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, body []byte) []byte {
		if len(body) > 127 {
			panic("section too long for a one-byte size")
		}
		return append([]byte{id, byte(len(body))}, body...)
	}
	body := func(code ...byte) []byte { return append([]byte{byte(len(code) + 1), 0x00}, code...) } // no locals
	export := func(n string, kind, idx byte) []byte { return append(name(n), kind, idx) }
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, section(1, vec( // types
		[]byte{0x60, 0x00, 0x01, 0x7F},             // () -> i32
		[]byte{0x60, 0x01, 0x7F, 0x01, 0x7F},       // (i32) -> i32
		[]byte{0x60, 0x02, 0x7F, 0x7F, 0x01, 0x7E}, // (i32, i32) -> i64
	))...)
	b = append(b, section(3, vec([]byte{0}, []byte{1}, []byte{2}, []byte{2}))...) // functions
	b = append(b, section(5, vec([]byte{0x00, 0x02}))...)                         // one memory of 2 pages
	b = append(b, section(7, vec(export("memory", 2, 0), export("sluice_abi_version", 0, 0),
		export("sluice_alloc", 0, 1), export("sluice_init", 0, 2), export("sluice_transform", 0, 3)))...)
	b = append(b, section(10, vec(
		body(0x41, 0x01, 0x0B),                               // sluice_abi_version: 1
		body(0x41, 0x80, 0x08, 0x0B),                         // sluice_alloc: 1024
		body(0x42, 0x00, 0x0B),                               // sluice_init: accepts
		body(0x03, 0x40, 0x0C, 0x00, 0x0B, 0x42, 0x00, 0x0B), // sluice_transform: loop; br 0; end
	))...)
	return append(b, section(0, append(name(faultInjectSection), 1))...)
}

// buildFaultInjectBinary builds sluice with the sluice_faultinject tag.
func buildFaultInjectBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice-faultinject")
	cmd := exec.Command("go", "build", "-tags", "sluice_faultinject", "-o", bin, "./cmd/sluice")
	cmd.Dir = wasmbuild.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags sluice_faultinject: %v\n%s", err, out)
	}
	return bin
}

// sluiceProcess is one run of the binary.
type sluiceProcess struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan struct{}
	err    error
}

func startSluice(t *testing.T, bin, cfgPath string, env []string, logs *lockedBuffer) *sluiceProcess {
	t.Helper()
	p := &sluiceProcess{cmd: exec.Command(bin, "run", "-config", cfgPath), logs: logs, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// waitHTTP polls url until it answers status.
func waitHTTP(t *testing.T, url string, status int, within time.Duration, dead <-chan struct{}) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return
			}
		}
		select {
		case <-dead:
			t.Fatalf("sluice exited while waiting for %s", url)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d within %v", url, status, within)
		}
	}
}

// TestStuckCallQuarantine is the stuck-call watcher end to end, with the
// real binary (built with the sluice_faultinject tag), a real broker and
// ClickHouse 26.9. Two tenants; B's records are produced all along.
// Tenant A activates a version whose sluice_transform spins where no
// interrupt reaches. The watcher must kill the process; the test,
// standing in for the service manager, starts it again; the next start
// must quarantine the version and restore A's previous one, which then
// lands A's records; B's records must keep landing, every one of them;
// and at no moment may a committed offset cover a record whose row did
// not land.
//
// Two ways the stuck call shows: "beating", the process runs with
// GOGC=off, so that no garbage collection stops the world (below
// memory_limit, which it stays far from), and runs on beside the stuck
// call: the watcher sees the call past its deadline while the heartbeat
// beats; "frozen",
// the process runs with GOGC=1, so that a garbage collection's
// stop-the-world comes within milliseconds and waits for the spinning
// guest, freezing every goroutine: the watcher sees a process that makes
// no progress while burning CPU.
func TestStuckCallQuarantine(t *testing.T) {
	testinfra.SkipShort(t)
	bin := buildFaultInjectBinary(t)
	t.Run("beating", func(t *testing.T) {
		testStuckCall(t, bin, 2*time.Second, []string{"GOGC=off"}, "and its deadline's interrupt did not stop it")
	})
	t.Run("frozen", func(t *testing.T) { testStuckCall(t, bin, 3*time.Second, []string{"GOGC=1"}, "made no progress") })
}

func testStuckCall(t *testing.T, bin string, grace time.Duration, env []string, reason string) {
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: testinfra.Modern})
	kafka := testinfra.KafkaT(t)
	ctx := context.Background()
	for _, table := range []string{"events_a", "events_b"} {
		if err := ch.Exec(ctx, "CREATE TABLE "+table+" (topic String, partition Int32, offset Int64, version String, value String) ENGINE = MergeTree ORDER BY (partition, offset)"); err != nil {
			t.Fatal(err)
		}
	}
	// When each of B's inserts landed, by the server's clock (this host's).
	for _, ddl := range []string{
		"CREATE TABLE b_landed (at DateTime64(6), rows UInt64) ENGINE = MergeTree ORDER BY at",
		"CREATE MATERIALIZED VIEW b_landed_mv TO b_landed AS SELECT now64(6) AS at, count() AS rows FROM events_b",
	} {
		if err := ch.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	for topic, parts := range map[string]int{"a-events": 1, "b-events": 2, "dlq": 1} {
		if err := kafka.CreateTopic(ctx, topic, parts); err != nil {
			t.Fatal(err)
		}
	}
	v1 := wasmbuild.BuildVersionT(t, "engine/testdata/versioned", "v1")
	b1 := wasmbuild.BuildVersionT(t, "engine/testdata/versioned", "b1")
	bad := filepath.Join(t.TempDir(), "spin.wasm")
	if err := os.WriteFile(bad, spinningModule(), 0o600); err != nil {
		t.Fatal(err)
	}
	badSum := sha256.Sum256(spinningModule())
	badSHA := hex.EncodeToString(badSum[:])

	const (
		acmeToken = "acme-secret"
		adminTok  = "admin-secret"
		group     = "stuck"
	)
	adminAddr, obsAddr := closedAddr(t), closedAddr(t)
	storeDir, cacheDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "sluice.yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: %s
  instance_id: sluice-1   # static membership: the restarted process takes its partitions back at once
  fetch_max_wait: 50ms
  commit_interval: 200ms
clickhouse:
  addr: %s
  chunk_linger: 50ms
  insert_linger: 50ms
dead_letter: {topic: dlq}
module:
  cache_dir: %s
  limits: {deadline: 1s}
observability:
  listen: %s
admin:
  listen: %s
  store_dir: %s
  admin_tokens: ["%s"]
stuck_calls:
  grace: %v
tenants:
  - id: acme
    tokens: ["%s"]
    pipelines:
      - name: logs
        topics: [a-events]
        tables: [events_a]
        module: {params: {table: events_a}}
  - id: bravo
    pipelines:
      - name: events
        topics: [b-events]
        tables: [events_b]
        module: {path: %s, params: {table: events_b}}
`, kafka.Addr, group, ch.Addr, cacheDir, obsAddr, adminAddr, storeDir, tenancy.HashToken(adminTok), grace, tenancy.HashToken(acmeToken), b1)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer
	defer func() {
		if t.Failed() {
			t.Logf("sluice output:\n%s", logs.String())
		}
	}()
	proc := startSluice(t, bin, cfgPath, env, &logs)
	admin := "http://" + adminAddr
	waitHTTP(t, admin+"/v1/whoami", http.StatusUnauthorized, 2*time.Minute, proc.exited)
	waitHTTP(t, "http://"+obsAddr+"/readyz", http.StatusOK, 2*time.Minute, proc.exited)

	count := func(table, where string) int64 {
		t.Helper()
		out, err := ch.Query(ctx, "SELECT uniqExact(partition, offset) FROM "+table+where)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil {
			t.Fatalf("count %q: %v", out, err)
		}
		return n
	}
	waitRows := func(table, where string, want int64, within time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
			n := count(table, where)
			if n >= want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s%s: %d rows within %v, want %d", table, where, n, within, want)
			}
		}
	}
	produce := func(cl *kgo.Client, topic, prefix string, n int) {
		t.Helper()
		for i := range n {
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kafka.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// B produces all along, 100 records every 50 ms.
	var bProduced atomic.Int64
	stopB := make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for i := 0; ; i++ {
			select {
			case <-stopB:
				return
			case <-time.After(50 * time.Millisecond):
			}
			for j := range 100 {
				cl.Produce(ctx, &kgo.Record{Topic: "b-events", Value: fmt.Appendf(nil, "b-%d-%d", i, j)}, nil)
			}
			if err := cl.Flush(ctx); err == nil {
				bProduced.Add(100)
			}
		}
	}()
	// A runs v1 on 1,000 records.
	if code, stderr, _ := runCLI(t, "module", "push", "-server", admin, "-token", acmeToken, "-timeout", "5m", "-activate", v1); code != 0 {
		t.Fatalf("push v1: exit %d: %s", code, stderr)
	}
	produce(cl, "a-events", "a1", 1000)
	waitRows("events_a", " WHERE version = 'v1'", 1000, 2*time.Minute)

	// A activates the spinning version; its next batch sticks.
	if code, stderr, _ := runCLI(t, "module", "push", "-server", admin, "-token", acmeToken, "-timeout", "5m", "-activate", bad); code != 0 {
		t.Fatalf("push the spinning version: exit %d: %s", code, stderr)
	}
	activated := time.Now()
	produce(cl, "a-events", "a2", 1000)

	// The watcher kills the process; the test restarts it as a service
	// manager would, until a start has quarantined the version (a freeze
	// with B's call in progress beside A's names no culprit the first time).
	var (
		kills     int
		killedAt  time.Time
		restarted time.Time
	)
	for {
		select {
		case <-proc.exited:
		case <-time.After(3 * time.Minute):
			t.Fatalf("the process was not killed within 3 minutes of the stuck call (kill %d)", kills+1)
		}
		killedAt = time.Now()
		kills++
		var ee *exec.ExitError
		if !errors.As(proc.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the process ended with %v, want killed by SIGKILL", proc.err)
		}
		// The killed process committed only offsets whose rows had landed.
		checkCommitted(t, kafka, ch, group, map[string]string{"a-events": "events_a", "b-events": "events_b"})
		if kills > 4 {
			t.Fatalf("killed %d times without a quarantine", kills)
		}
		proc = startSluice(t, bin, cfgPath, env, &logs)
		restarted = time.Now()
		waitHTTP(t, admin+"/v1/whoami", http.StatusUnauthorized, 2*time.Minute, proc.exited)
		if strings.Contains(logs.String(), "module version quarantined") {
			break
		}
	}
	waitHTTP(t, "http://"+obsAddr+"/readyz", http.StatusOK, 2*time.Minute, proc.exited)
	ready := time.Now()

	out := logs.String()
	for _, want := range []string{
		"log=\"stuck-call watcher\"",
		"stuck module call: killing the process; the next start quarantines the version",
		"tenant=acme pipeline=logs sha256=" + badSHA,
		"msg=audit log=audit action=quarantine actor=sluice",
		reason,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sluice output lacks %q", want)
		}
	}

	// A's previous version runs again, and lands A's records that were
	// stuck (at least once: duplicates of landed rows are allowed).
	waitRows("events_a", " WHERE version = 'v1'", 2000, 2*time.Minute)
	if n := count("events_a", " WHERE version != 'v1'"); n != 0 {
		t.Errorf("%d rows of A by another version", n)
	}
	// The tenant sees the quarantine; the metric says so.
	var list tenancy.ListResponse
	getJSON(t, admin+"/v1/tenants/acme/pipelines/logs/modules", acmeToken, &list)
	if list.Active == nil || len(list.Quarantined) != 1 || list.Quarantined[0].SHA256 != badSHA || list.Quarantined[0].Reason == "" {
		t.Errorf("A's modules: active %v, quarantined %+v; want v1 active and the spinning version quarantined", list.Active, list.Quarantined)
	} else if list.Active.SHA256 == badSHA {
		t.Errorf("the quarantined version is active")
	}
	metrics := httpGet(t, "http://"+obsAddr+"/metrics")
	if want := `sluice_module_quarantined{pipeline="logs",sha256="` + badSHA + `",tenant="acme"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	// Its activation by the tenant is refused.
	if code, stderr, _ := runCLI(t, "module", "activate", "-server", admin, "-token", acmeToken, badSHA[:12]); code == 0 || !strings.Contains(stderr, "quarantined") {
		t.Errorf("the tenant's activation of the quarantined version: exit %d: %s", code, stderr)
	}

	// B: everything produced lands.
	close(stopB)
	<-bDone
	waitRows("events_b", "", bProduced.Load(), 2*time.Minute)

	// What the watcher costs: its memory and CPU, beside sluice run's.
	logCost(t, proc.cmd.Process.Pid, time.Since(restarted))

	// A clean stop commits what landed, and only that.
	if err := proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-proc.exited:
		if proc.err != nil {
			t.Errorf("sluice after SIGTERM: %v", proc.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("sluice did not exit within a minute of SIGTERM")
	}
	checkCommitted(t, kafka, ch, group, map[string]string{"a-events": "events_a", "b-events": "events_b"})

	// The figures: B's inserts around the kills, by when they landed.
	raw, err := ch.Query(ctx, "SELECT toUnixTimestamp64Micro(at) FROM b_landed ORDER BY at")
	if err != nil {
		t.Fatal(err)
	}
	var landed []time.Time
	for _, f := range strings.Fields(raw) {
		us, _ := strconv.ParseInt(f, 10, 64)
		landed = append(landed, time.UnixMicro(us))
	}
	var gap time.Duration
	var gapFrom, backAt time.Time
	for i := 1; i < len(landed); i++ {
		if d := landed[i].Sub(landed[i-1]); landed[i].After(activated) && d > gap {
			gap, gapFrom = d, landed[i-1]
		}
		if backAt.IsZero() && landed[i].After(killedAt) {
			backAt = landed[i]
		}
	}
	// kill → restart includes the test's own checks of the commits.
	t.Logf("kills %d; activation of the spinning version → last kill %v; kill → restart %v; restart → ready %v; "+
		"B: longest time without an insert after the activation %v (from %v after it), first insert %v after the last restart (%v after the activation)",
		kills, killedAt.Sub(activated).Round(time.Millisecond), restarted.Sub(killedAt).Round(time.Millisecond),
		ready.Sub(restarted).Round(time.Millisecond), gap.Round(time.Millisecond), gapFrom.Sub(activated).Round(time.Millisecond),
		backAt.Sub(restarted).Round(time.Millisecond), backAt.Sub(activated).Round(time.Millisecond))
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "stuck-call watcher") || strings.Contains(line, "quarantine") {
			t.Log(line)
		}
	}
}

// checkCommitted checks that every offset below each partition's
// committed offset has its row in ClickHouse (the module makes one row
// per record): nothing is committed that did not land.
func checkCommitted(t *testing.T, kafka *testinfra.Kafka, ch *testinfra.ClickHouse, group string, tables map[string]string) {
	t.Helper()
	cl, err := kafka.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	offs.Each(func(o kadm.OffsetResponse) {
		table, ok := tables[o.Topic]
		if !ok || o.At <= 0 {
			return
		}
		q := fmt.Sprintf("SELECT uniqExact(offset) FROM %s WHERE partition = %d AND offset < %d", table, o.Partition, o.At)
		out, err := ch.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64); n != o.At {
			t.Errorf("%s/%d committed at %d, but only %d of the rows below it landed in %s", o.Topic, o.Partition, o.At, n, table)
		}
	})
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func getJSON(t *testing.T, url, token string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// logCost logs the peak RSS and CPU time of process pid and of its
// children (the stuck-call watcher), which have run for about ran.
func logCost(t *testing.T, pid int, ran time.Duration) {
	t.Helper()
	cost := func(pid int) string {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return err.Error()
		}
		var hwm string
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				hwm = strings.TrimSpace(v)
			}
		}
		_, cpu, err := procStat(pid)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("peak RSS %s, CPU %v", hwm, cpu)
	}
	// Children are listed per thread: the watcher's is the thread that
	// started it.
	var children []string
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		children = append(children, strings.Fields(string(b))...)
	}
	t.Logf("over %v: sluice run %s", ran.Round(time.Second), cost(pid))
	for _, c := range children {
		n, _ := strconv.Atoi(c)
		t.Logf("over %v: child %d (the stuck-call watcher) %s", ran.Round(time.Second), n, cost(n))
	}
}
