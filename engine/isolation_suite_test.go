package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The isolation suite runs the real sluice binary with two tenants on the
// real broker and ClickHouse. Tenant B drains a backlog of log lines alone,
// beside tenant A whose pipelines are each hostile in one of the ways of
// issue 12, and alone again; B must keep 80% of its solo rate, land exactly
// what it produced, and the process's peak RSS must stay under
// isoRSSBound. SLUICE_ISOLATION=full runs larger volumes.

type isoProfile struct {
	name     string
	bRecords int // tenant B's backlog per run
	hostile  int // records per hostile pipeline of tenant A
	bigBytes int // the row each "output far larger than input" record makes
	bigCount int
	poison   int // poison records among 1,000 × poison records
	stalled  int // uploads that declare 8 MiB and stall after 4 bytes
}

func isoProfileFromEnv() isoProfile {
	if os.Getenv("SLUICE_ISOLATION") == "full" {
		return isoProfile{name: "full", bRecords: 1_000_000, hostile: 400, bigBytes: 4 << 20, bigCount: 1000, poison: 10, stalled: 100}
	}
	return isoProfile{name: "reduced", bRecords: 300_000, hostile: 100, bigBytes: 1 << 20, bigCount: 150, poison: 10, stalled: 20}
}

// The configured limits the RSS bound is computed from.
const (
	isoBudgetB       = 64 << 20  // tenant B's in-flight budget (one pipeline)
	isoBudgetA       = 8 << 20   // each of tenant A's pipelines
	isoMemB          = 64 << 20  // memory_bytes of B's instances
	isoMemA          = 32 << 20  // memory_bytes of A's instances
	isoPartitionsB   = 2         // B's partitions: one instance each
	isoInstanceExtra = 19 << 20  // per instance beyond memory_bytes: 2 MiB tables, 16 MiB call stack, 1 MiB bookkeeping (docs/tenancy.md)
	isoNonHeap       = 64 << 20  // compiled code, thread stacks (as faultRSSBound)
	isoMaxOutputA    = 4<<20 + 1 // A's max_output_bytes, a little over a 4 MiB big row's value
)

// isoRSSBound is the bound on the process's peak RSS, from the configured
// limits: the Go soft memory limit sluice sets (2 × Σ in-flight budgets +
// 256 MiB) covers the Go heap; each live instance's linear memory, tables and
// call stack live outside it (memory_bytes + 19 MiB each, one instance per
// partition; bisection replaces instances, it does not add to them); and
// 64 MiB covers compiled code and thread stacks.
func isoRSSBound(pipelinesA, partitionsA int) int64 {
	budgets := int64(isoBudgetB) + int64(pipelinesA)*isoBudgetA
	softLimit := 2*budgets + 256<<20
	instances := int64(isoPartitionsB)*(isoMemB+isoInstanceExtra) + int64(partitionsA)*(isoMemA+isoInstanceExtra)
	return softLimit + instances + isoNonHeap
}

// isoPipeline is one of tenant A's hostile pipelines: the class it
// stands for, its module, its table and its records.
type isoPipeline struct {
	class  string
	name   string
	module string
	table  string
	params map[string]string
	values [][]byte
}

func (p isoPipeline) topic() string { return "a-" + p.name }

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// isoRun is one start of sluice with its config.
type isoRun struct {
	t       *testing.T
	dir     string
	obsAddr string
	admAddr string
	p       *proc
	started time.Time
	peak    *scenario // holds the peak RSS sampled by proc.sampleRSS
}

// startSluice writes cfg and starts the binary on it.
func startSluice(t *testing.T, bin, dir, name, cfg string) *isoRun {
	t.Helper()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &isoRun{t: t, dir: dir, peak: &scenario{t: t}, started: time.Now()}
	r.p = &proc{s: r.peak, name: name, log: filepath.Join(dir, name+".log"), done: make(chan error, 1)}
	logf, err := os.Create(r.p.log)
	if err != nil {
		t.Fatal(err)
	}
	r.p.cmd = exec.Command(bin, "run", "-config", path)
	r.p.cmd.Stdout, r.p.cmd.Stderr = logf, logf
	r.p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := r.p.cmd.Wait()
		logf.Close()
		r.p.done <- err
	}()
	go r.p.sampleRSS()
	t.Cleanup(func() {
		if r.p.cmd.ProcessState == nil {
			_ = r.p.cmd.Process.Kill()
		}
		if t.Failed() {
			out, _ := os.ReadFile(r.p.log)
			lines := strings.Split(string(out), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("sluice %s log tail:\n%s", name, strings.Join(lines, "\n"))
		}
	})
	return r
}

// exited reports whether the process has ended, and how.
func (r *isoRun) exited() (bool, error) {
	select {
	case err := <-r.p.done:
		r.p.done <- err
		return true, err
	default:
		return false, nil
	}
}

func (r *isoRun) ready() (bool, string) {
	resp, err := http.Get("http://" + r.obsAddr + "/readyz")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode == http.StatusOK, b.String()
}

// dlqWatch counts the dead-letter copies of each source topic and when the
// first arrived.
type dlqWatch struct {
	mu        sync.Mutex
	count     map[string]int
	first     map[string]time.Time
	truncated map[string]int
	cancel    context.CancelFunc
	done      chan struct{}
}

func watchDLQ(t *testing.T, e *tenantEnv, topic string) *dlqWatch {
	t.Helper()
	cl, err := e.kafka.NewClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &dlqWatch{count: map[string]int{}, first: map[string]time.Time{}, truncated: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				var src string
				cut := false
				for _, h := range r.Headers {
					switch h.Key {
					case engine.HeaderTopic:
						src = string(h.Value)
					case engine.HeaderTruncated:
						cut = true
					}
				}
				w.mu.Lock()
				if w.count[src] == 0 {
					w.first[src] = time.Now()
				}
				w.count[src]++
				if cut {
					w.truncated[src]++
				}
				w.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

func (w *dlqWatch) stop() { w.cancel(); <-w.done }

func (w *dlqWatch) get(topic string) (n int, first time.Time, cut int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count[topic], w.first[topic], w.truncated[topic]
}

// bProgress waits until B's table holds want rows, failing only when none
// lands for a minute or the process exits; it returns when.
func bProgress(t *testing.T, e *tenantEnv, r *isoRun, want int) time.Time {
	t.Helper()
	last, lastMove := -1, time.Now()
	for {
		c := queryInt(t, e.ch, "SELECT count() FROM logs")
		if c >= want {
			return time.Now()
		}
		if gone, err := r.exited(); gone {
			t.Fatalf("sluice exited (%v) with %d of %d of B's rows landed", err, c, want)
		}
		if c != last {
			last, lastMove = c, time.Now()
		}
		if time.Since(lastMove) > time.Minute {
			t.Fatalf("%d of %d of B's rows, none for a minute", c, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIsolationSuite: for every class of hostile module, record or upload
// in issue 12, tenant A's runs while tenant B drains, in one process of the
// real binary.
func TestIsolationSuite(t *testing.T) {
	prof := isoProfileFromEnv()
	bin := buildSluice(t)
	advDir := t.TempDir()
	if out, err := exec.Command("go", "run", filepath.Join(wasmbuild.RepoRoot(), "examples/adversarial/build"), "-out", advDir).CombinedOutput(); err != nil {
		t.Fatalf("build the adversarial modules: %v\n%s", err, out)
	}
	adv := func(name string) string { return filepath.Join(advDir, name+".wasm") }
	logNormalize := wasmbuild.BuildT(t, "examples/log-normalize")

	repeat := func(n int, v func(i int) string) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = []byte(v(i))
		}
		return out
	}
	same := func(v string) func(int) string { return func(int) string { return v } }
	pipes := []isoPipeline{
		{class: "1 table.grow", name: "grow", module: adv("table-grow"), table: "adv", values: repeat(prof.hostile, same("x"))},
		{class: "2 fd_write flood", name: "flood", module: adv("stdout-flood"), table: "adv", values: repeat(prof.hostile, same("x"))},
		{class: "3 memory growth", name: "mem", module: adv("memory-grow"), table: "adv", values: repeat(prof.hostile, same("x"))},
		{class: "3 stack overflow", name: "stack", module: adv("stack-overflow"), table: "adv", values: repeat(prof.hostile, same("x"))},
		{class: "4 output ≫ input", name: "big", module: adv("malformed-rows"), table: "adv_big",
			values: repeat(prof.bigCount, same(fmt.Sprintf("big:%d", prof.bigBytes)))},
		{class: "6 init fails later", name: "initfail", module: adv("init-fails-later"), table: "a_events", params: map[string]string{"table": "a_events"},
			values: repeat(prof.hostile*4, func(i int) string { return fmt.Sprintf("r%d", i) })},
		{class: "7 oversized poison", name: "logs", module: logNormalize, table: "a_logs", params: map[string]string{"table": "a_logs"},
			values: append(logLines(7, 100), bytes.Repeat([]byte("not json "), 1_500_000/9))},
		{class: "8 permanent insert error", name: "perm", module: logNormalize, table: "a_perm", params: map[string]string{"table": "a_perm"}},
		{class: "9 crash loop + rebalance", name: "crash", module: adv("infinite-loop"), table: "adv", values: repeat(prof.hostile, same("loop"))},
		{class: "10 many poison records", name: "poison", module: adv("panic-every-1000"), table: "adv_poison",
			values: repeat(prof.poison*1000, func(i int) string {
				if i%1000 == 500 {
					return "trap"
				}
				return fmt.Sprintf("record %d", i)
			})},
	}
	const permRecords = 500

	topics := map[string]int{"b-solo1": isoPartitionsB, "b-mixed": isoPartitionsB, "b-solo2": isoPartitionsB, "dlq-solo1": 1, "dlq-mixed": 1, "dlq-solo2": 1}
	for _, p := range pipes {
		topics[p.topic()] = 1
	}
	advDDL := "CREATE TABLE %s (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset"
	logsAs := func(table string) string {
		return strings.Replace(readSchema(t), "CREATE TABLE logs", "CREATE TABLE "+table, 1)
	}
	e := newTenantEnv(t, topics, readSchema(t), logsAs("a_logs"), logsAs("a_perm"),
		fmt.Sprintf(advDDL, "adv"), fmt.Sprintf(advDDL, "adv_big"), "CREATE TABLE adv_poison (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset",
		fmt.Sprintf(eventsDDL, "a_events"))
	ctx := context.Background()
	cl, err := e.kafka.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	big := "4194304"
	if _, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: &big}}, "a-logs"); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	for _, run := range []string{"solo1", "mixed", "solo2"} {
		produceTo(t, e, "b-"+run, logLines(uint64(len(run)), prof.bRecords))
	}
	for _, p := range pipes {
		if len(p.values) > 0 {
			produceTo(t, e, p.topic(), p.values, kgo.ProducerBatchMaxBytes(4<<20))
		}
	}
	cacheDir := t.TempDir()

	// config is the YAML of one run: B always, A's pipelines when given.
	config := func(run, obs, adm string, a []isoPipeline, b bool) string {
		var s strings.Builder
		fmt.Fprintf(&s, `kafka:
  brokers: [%s]
  group: iso-%s
  commit_interval: 500ms
  session_timeout: 10s
  revoke_timeout: 10s
clickhouse:
  addr: %s
  retry_max: 1s
  permanent_retry_interval: 1s
dead_letter: {topic: dlq-%s}
module:
  cache_dir: %s
shutdown_timeout: 30s
observability:
  listen: %s
admin:
  listen: %s
  store_dir: %s
  admin_tokens: ["%s"]
tenants:
`, e.kafka.Addr, strings.TrimSuffix(run, "-2"), e.ch.Addr, strings.TrimSuffix(run, "-2"), cacheDir, obs, adm, t.TempDir(), tokenHash("iso-admin"))
		if b {
			fmt.Fprintf(&s, `  - id: beta
    max_inflight_bytes: %d
    limits: {memory_bytes: %d}
    pipelines:
      - name: logs
        topics: [b-%s]
        tables: [logs]
        module: {path: %s}
`, isoBudgetB, isoMemB, run, logNormalize)
		}
		if len(a) > 0 {
			fmt.Fprintf(&s, `  - id: acme
    tokens: ["%s"]
    max_inflight_bytes: %d
    limits: {memory_bytes: %d, deadline: 200ms, max_output_bytes: %d, max_record_bytes: 2097152}
    max_traps_per_minute: 5
    trap_cooldown: 2s
    pipelines:
`, tokenHash("iso-acme"), isoBudgetA, isoMemA, isoMaxOutputA)
			for _, p := range a {
				fmt.Fprintf(&s, "      - name: %s\n        topics: [%s]\n        tables: [%s]\n        module: {path: %s", p.name, p.topic(), p.table, p.module)
				if len(p.params) > 0 {
					s.WriteString(", params: {")
					first := true
					for k, v := range p.params {
						if !first {
							s.WriteString(", ")
						}
						first = false
						fmt.Fprintf(&s, "%s: %s", k, v)
					}
					s.WriteString("}")
				}
				s.WriteString("}\n")
			}
		}
		return s.String()
	}

	type result struct {
		rate       float64
		r          *isoRun
		start, end time.Time // B's 10% and 90%
	}
	// measure runs B (and A's pipelines, if given) in one process and
	// returns B's rate between 10% and 90% of its rows landed. during runs
	// beside the measurement, with the process.
	measure := func(run string, a []isoPipeline, during func(r *isoRun, bDone <-chan struct{})) result {
		t.Helper()
		obs, adm := freeAddr(t), freeAddr(t)
		r := startSluice(t, bin, t.TempDir(), run, config(run, obs, adm, a, true))
		r.obsAddr, r.admAddr = obs, adm
		bDone := make(chan struct{})
		var wg sync.WaitGroup
		if during != nil {
			wg.Add(1)
			go func() { defer wg.Done(); during(r, bDone) }()
		}
		n := prof.bRecords
		t10 := bProgress(t, e, r, n/10)
		t90 := bProgress(t, e, r, n-n/10)
		bProgress(t, e, r, n)
		close(bDone)
		wg.Wait()
		rate := float64(n-2*(n/10)) / t90.Sub(t10).Seconds()
		return result{rate: rate, r: r, start: t10, end: t90}
	}
	checkB := func(run string) {
		t.Helper()
		got := queryString(t, e.ch, "SELECT count(), uniqExact(toUInt64(attrs.value[indexOf(attrs.key, 'seq')])) FROM logs")
		if want := fmt.Sprintf("%d\t%d", prof.bRecords, prof.bRecords); got != want {
			t.Errorf("%s: B's (rows, distinct records) = %q, want %q (produced = landed)", run, got, want)
		}
		if err := e.ch.Exec(ctx, "TRUNCATE TABLE logs"); err != nil {
			t.Fatal(err)
		}
	}

	// Solo, before.
	solo1 := measure("solo1", nil, nil)
	solo1.r.p.term()
	checkB("solo1")

	// Mixed: every hostile pipeline of A at once, plus the admin API's
	// abusers and a second member that takes A's crash-looping partition
	// away and gives it back (two rebalances during its cool-downs).
	type apiResult struct {
		name   string
		status int
		took   time.Duration
	}
	var (
		apiMu      sync.Mutex
		apiResults []apiResult
		wrong429   int
		dotStatus  int
		stalledOK  int
		permReady  string
		rebalanced bool
		member2    *isoRun
		aliveAll   = true
		mixedRun   *isoRun
	)
	w := watchDLQ(t, e, "dlq-mixed")
	mixed := measure("mixed", pipes, func(r *isoRun, bDone <-chan struct{}) {
		mixedRun = r
		// Class 8: drop A's table once the process runs (its start checks
		// the tables), then give it records.
		for queryInt(t, e.ch, "SELECT count() FROM logs") == 0 {
			if gone, _ := r.exited(); gone {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := e.ch.Exec(ctx, "DROP TABLE a_perm"); err != nil {
			t.Error(err)
			return
		}
		produceTo(t, e, "a-perm", logLines(8, permRecords))

		// Class 5: compile bombs and abusive uploads through the admin API.
		base := "http://" + r.admAddr
		upload := func(name, token string, body []byte) int {
			start := time.Now()
			req, _ := http.NewRequest("POST", base+"/v1/tenants/acme/pipelines/grow/modules", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("upload %s: %v", name, err)
				return 0
			}
			resp.Body.Close()
			apiMu.Lock()
			apiResults = append(apiResults, apiResult{name, resp.StatusCode, time.Since(start)})
			apiMu.Unlock()
			return resp.StatusCode
		}
		// Stalled uploads that declare 8 MiB each and send 4 bytes, held
		// open while the bombs are uploaded.
		var conns []net.Conn
		for range prof.stalled {
			c, err := net.Dial("tcp", r.admAddr)
			if err != nil {
				t.Errorf("stalled upload: %v", err)
				break
			}
			fmt.Fprintf(c, "POST /v1/tenants/acme/pipelines/grow/modules HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer iso-acme\r\nContent-Length: %d\r\n\r\n\x00asm", 8<<20)
			conns = append(conns, c)
		}
		for _, name := range []string{"table-bomb", "bomb-nesting", "bomb-br-table", "bomb-functions", "bomb-one-func", "bomb-compile-me"} {
			wasm, err := os.ReadFile(adv(name))
			if err != nil {
				t.Error(err)
				continue
			}
			upload(name, "iso-acme", wasm)
		}
		for range 30 {
			req, _ := http.NewRequest("GET", base+"/v1/whoami", nil)
			req.Header.Set("Authorization", "Bearer wrong")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				if resp.StatusCode == http.StatusTooManyRequests {
					wrong429++
				}
				resp.Body.Close()
			}
		}
		noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if resp, err := noRedirect.Get(base + "/v1/tenants/acme/../../v1/tenants"); err == nil {
			dotStatus = resp.StatusCode
			resp.Body.Close()
		}
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil {
				stalledOK++ // still held, not answered or closed
			}
			c.Close()
		}

		// Class 9: a second member that consumes only A's crash-looping
		// topic joins while B drains and leaves again.
		m2 := startSluice(t, bin, t.TempDir(), "member2", config("mixed-2", freeAddr(t), freeAddr(t), pipes[8:9], false))
		member2 = m2
		rebalanced = waitMembers(t, e, "iso-mixed", 2, m2)
		if !rebalanced {
			t.Error("9: the second member never joined the group")
		}

		// Class 8 is visible in /readyz while B still drains.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if ok, why := r.ready(); !ok && strings.Contains(why, "a_perm") {
				permReady = why
				break
			}
		}
		<-bDone
		if gone, err := r.exited(); gone {
			aliveAll = false
			t.Errorf("sluice exited during the mixed run: %v", err)
		}
	})
	checkB("mixed")
	bound := isoRSSBound(len(pipes), len(pipes))

	// A's classes: each ran, was contained, and lost nothing of what it
	// could land. Member 2 leaves: a second rebalance hands the
	// crash-looping partition back to the first.
	if member2 != nil {
		if gone, err := member2.exited(); gone {
			t.Errorf("9: member 2 exited: %v", err)
		} else {
			member2.p.term()
		}
	}
	if err := e.ch.Exec(ctx, logsAs("a_perm")); err != nil {
		t.Fatal(err)
	}
	waitCount(t, e, "SELECT count() FROM a_perm", permRecords)
	waitCount(t, e, "SELECT count() FROM adv_big", prof.bigCount)
	waitCount(t, e, "SELECT count() FROM a_logs", 100)
	wantPoison := prof.poison*1000 - prof.poison - prof.poison // traps and offsets 999 mod 1000
	waitCount(t, e, "SELECT count() FROM adv_poison", wantPoison)
	for _, p := range pipes {
		if p.name == "perm" || p.name == "big" {
			continue
		}
		for deadline := time.Now().Add(3 * time.Minute); !committedEnd(t, e, "iso-mixed", p.topic()); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s: tenant A's topic %s not committed to its end", p.class, p.topic())
				break
			}
		}
	}
	if gone, err := mixedRun.exited(); gone {
		t.Errorf("sluice exited after the mixed run: %v", err)
	}
	mixedPeak := mixedRun.peak.peakRSS.Load()
	mixedRun.p.term()

	solo2 := measure("solo2", nil, nil)
	solo2.r.p.term()
	checkB("solo2")

	soloRate := (solo1.rate + solo2.rate) / 2
	t.Logf("isolation suite, profile %s: tenant B alone %.0f and %.0f rows/s, beside A %.0f rows/s (%.1f%% of solo); peak RSS solo %d/%d MiB, mixed %d MiB (bound %d MiB); member 2 joined: %v",
		prof.name, solo1.rate, solo2.rate, mixed.rate, 100*mixed.rate/soloRate, solo1.r.peak.peakRSS.Load()>>20, solo2.r.peak.peakRSS.Load()>>20, mixedPeak>>20, bound>>20, rebalanced)
	if mixed.rate < 0.8*soloRate {
		t.Errorf("tenant B at %.0f rows/s beside A, below 80%% of its solo %.0f rows/s", mixed.rate, soloRate)
	}
	if mixedPeak > bound {
		t.Errorf("peak RSS %d MiB over the bound of %d MiB", mixedPeak>>20, bound>>20)
	}
	if !aliveAll {
		t.Error("the process did not survive the mixed run")
	}
	for _, p := range pipes {
		n, first, cut := w.get(p.topic())
		contain := "-"
		if !first.IsZero() {
			contain = first.Sub(mixedRun.started).Round(time.Millisecond).String() + " after start"
		}
		t.Logf("%-26s %-12s dead-lettered %5d (cut %d), first %s", p.class, p.topic(), n, cut, contain)
		switch p.name {
		case "grow", "flood", "mem", "stack", "crash":
			if n != len(p.values) {
				t.Errorf("%s: %d of %d records dead-lettered", p.class, n, len(p.values))
			}
		case "logs":
			if n != 1 || cut != 1 {
				t.Errorf("%s: %d dead-lettered (%d cut), want the one record, cut", p.class, n, cut)
			}
		case "poison":
			if n != 2*prof.poison {
				t.Errorf("%s: %d dead-lettered, want %d", p.class, n, 2*prof.poison)
			}
		case "initfail":
			rows := queryInt(t, e.ch, "SELECT count() FROM a_events")
			if rows+n != len(p.values) {
				t.Errorf("%s: %d rows and %d dead-lettered of %d records", p.class, rows, n, len(p.values))
			}
		}
	}
	if got := queryInt(t, e.ch, fmt.Sprintf("SELECT count() FROM adv_big WHERE length(value) = %d", prof.bigBytes)); got != prof.bigCount {
		t.Errorf("4 output ≫ input: %d of %d big rows landed whole", got, prof.bigCount)
	}
	if permReady == "" {
		t.Error("8 permanent insert error: /readyz never named a_perm")
	}
	for _, a := range apiResults {
		t.Logf("5 upload %-16s %d in %s", a.name, a.status, a.took.Round(time.Millisecond))
		if a.status != http.StatusUnprocessableEntity {
			t.Errorf("5 upload %s: status %d, want 422", a.name, a.status)
		}
	}
	t.Logf("5 wrong tokens: %d of 30 got 429; path with ..: %d; stalled uploads held %d of %d", wrong429, dotStatus, stalledOK, prof.stalled)
	if wrong429 < 15 {
		t.Errorf("5 wrong tokens: only %d of 30 rate-limited", wrong429)
	}
	if dotStatus != http.StatusUnauthorized {
		t.Errorf("5 a path with ..: %d without a token, want 401", dotStatus)
	}
}

// waitMembers waits until group has n members, or m exits; it reports
// whether they joined.
func waitMembers(t *testing.T, e *tenantEnv, group string, n int, m *isoRun) bool {
	t.Helper()
	cl, err := e.kafka.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if gone, _ := m.exited(); gone {
			return false
		}
		groups, err := adm.DescribeGroups(context.Background(), group)
		if err == nil && len(groups[group].Members) >= n {
			return true
		}
	}
	return false
}
