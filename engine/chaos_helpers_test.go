package engine_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// The chaos harness runs the real sluice binary with two tenants against the
// real broker and ClickHouse, injects faults at moments drawn from a seed,
// restarts sluice whenever it exits (as systemd's Restart=always would), and
// then checks delivery with its own reading of Kafka's committed offsets,
// the tables and the dead-letter topic: nothing here calls sluice's code.

// chaosProfile sizes a chaos run.
type chaosProfile struct {
	name       string
	seeds      []uint64
	rate       int           // records/s per tenant while the faults run
	minRecords int           // per tenant, at least
	extraFault int           // faults drawn on top of one of each kind
	hold       [2]float64    // seconds a fault lasts, min and max
	gap        [2]float64    // seconds between faults, min and max
	stall      time.Duration // quiescence: committed offsets still for this long
	quiesceMax time.Duration // quiescence: at most this long
	flow       time.Duration // between faults, wait at most this long for a commit
	shutdown   time.Duration // sluice's shutdown_timeout
	skip       []string      // fault kinds left out (SLUICE_CHAOS_SKIP)
	// eo runs sluice with delivery: exactly_once on ClickHouse 26.9, into
	// tables with a deduplication window (SLUICE_CHAOS_DELIVERY): a seed
	// then also fails on any duplicate.
	eo bool
}

func chaosProfileFromEnv(t *testing.T) chaosProfile {
	p := chaosProfile{
		name: "reduced", rate: 25, minRecords: 1000, hold: [2]float64{1.5, 3}, gap: [2]float64{0.3, 1.5},
		stall: 30 * time.Second, quiesceMax: 90 * time.Second, flow: 10 * time.Second, shutdown: 10 * time.Second,
	}
	n := 2
	if os.Getenv("SLUICE_CHAOS") == "full" {
		p = chaosProfile{
			name: "full", rate: 100, minRecords: 10_000, extraFault: 2, hold: [2]float64{2, 6}, gap: [2]float64{0.5, 3},
			stall: 45 * time.Second, quiesceMax: 3 * time.Minute, flow: 20 * time.Second, shutdown: 10 * time.Second,
		}
		n = 50
	}
	if v := os.Getenv("SLUICE_CHAOS_SEEDS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("SLUICE_CHAOS_SEEDS=%q: want a count of seeds", v)
		}
	}
	switch v := os.Getenv("SLUICE_CHAOS_DELIVERY"); v {
	case "", "at_least_once":
	case "exactly_once":
		p.eo = true
	default:
		t.Fatalf("SLUICE_CHAOS_DELIVERY=%q: want at_least_once or exactly_once", v)
	}
	if v := os.Getenv("SLUICE_CHAOS_SKIP"); v != "" {
		for _, k := range strings.Split(v, ",") {
			if !slices.Contains(chaosKinds, k) {
				t.Fatalf("SLUICE_CHAOS_SKIP: %q is not one of %v", k, chaosKinds)
			}
			p.skip = append(p.skip, k)
		}
	}
	first := uint64(1)
	if v := os.Getenv("SLUICE_CHAOS_SEED"); v != "" {
		var err error
		if first, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SLUICE_CHAOS_SEED=%q: want a number", v)
		}
	}
	for i := range n {
		p.seeds = append(p.seeds, first+uint64(i))
	}
	return p
}

// The fault kinds. Each seed runs every kind once, in an order and at
// moments drawn from the seed, plus extraFault more drawn at random.
const (
	faultKill9         = "kill9"           // kill -9 of a sluice instance
	faultTermCHDown    = "sigterm_ch_down" // SIGTERM to sluice while ClickHouse is stopped
	faultCHStop        = "ch_stop"         // ClickHouse stopped (SIGTERM), then started
	faultCHFreeze      = "ch_freeze"       // ClickHouse kill -STOP, then kill -CONT
	faultCHKill        = "ch_kill"         // ClickHouse kill -9, then started
	faultBrokerRestart = "broker_restart"  // the Kafka broker stopped and started
	faultRebalance     = "rebalance"       // a second instance joins, then leaves
	faultInitFail      = "init_fail"       // tenant acme activates a module whose later instances refuse init (and, half of the time, b joins and leaves meanwhile)
	faultOversized     = "oversized_dlq"   // a record too large for the dead-letter producer
	faultDropColumn    = "drop_column"     // tenant beta's table loses a column, then gets it back
)

var chaosKinds = []string{faultKill9, faultTermCHDown, faultCHStop, faultCHFreeze, faultCHKill,
	faultBrokerRestart, faultRebalance, faultInitFail, faultOversized, faultDropColumn}

type chaosFault struct {
	kind string
	gap  time.Duration // wait before it
	hold time.Duration // how long it lasts
	pick int           // a free draw (which instance, which partition)
}

func (f chaosFault) String() string {
	return fmt.Sprintf("%s(+%.1fs, %.1fs)", f.kind, f.gap.Seconds(), f.hold.Seconds())
}

// chaosPlan draws a seed's faults.
func chaosPlan(rng *rand.Rand, p chaosProfile) []chaosFault {
	var all []string
	for _, k := range chaosKinds {
		if !slices.Contains(p.skip, k) {
			all = append(all, k)
		}
	}
	kinds := append([]string(nil), all...)
	for i := 0; i < p.extraFault && len(all) > 0; i++ {
		kinds = append(kinds, all[rng.IntN(len(all))])
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	secs := func(r [2]float64) time.Duration {
		return time.Duration((r[0] + rng.Float64()*(r[1]-r[0])) * float64(time.Second))
	}
	var plan []chaosFault
	for _, k := range kinds {
		plan = append(plan, chaosFault{kind: k, gap: secs(p.gap), hold: secs(p.hold), pick: rng.IntN(1 << 20)})
	}
	return plan
}

// chaosEnv is what every seed shares: the servers, the binary, the modules.
type chaosEnv struct {
	ch       *testinfra.ClickHouse
	kafka    *testinfra.Kafka
	bin      string
	v1       string // engine/testdata/versioned, version v1
	initFail string // examples/adversarial/init-fails-later
	cacheDir string
}

const (
	chaosAcmeToken = "chaos-acme-token"
	chaosAdmToken  = "chaos-admin-token"
	chaosTableDDL  = "CREATE TABLE %s (topic String, partition Int32, offset Int64, version String, value String) ENGINE = MergeTree ORDER BY (topic, partition, offset)"
	// chaosBigValue is the size of the record the dead-letter producer
	// cannot send as is: over franz-go's default 1,000,012-byte batch limit,
	// under the source topic's max.message.bytes.
	chaosBigValue = 1_500_000
)

func tokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func fileSHA256(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// chaosTenant is one tenant's pipeline in a seed's run.
type chaosTenant struct {
	id, topic, table string
}

// chaosRun is one seed.
type chaosRun struct {
	t     *testing.T
	env   *chaosEnv
	prof  chaosProfile
	seed  uint64
	rng   *rand.Rand
	dir   string
	group string
	dlq   string
	acme  chaosTenant
	beta  chaosTenant
	start time.Time

	a, b *chaosInstance
	plan []chaosFault

	producer *kgo.Client
	admin    *kadm.Client
	adminCl  *kgo.Client
	produced atomic.Int64
	acked    sync.Map // topic → *atomic.Int64

	mu       sync.Mutex
	timeline []string
	faultLog []chaosSpan // faults with their start and end
	commits  map[string][]chaosCommit
	drains   []time.Duration
	// missingNear counts committed-but-missing records by the fault kinds
	// around the commit that passed them.
	missingNear map[string]int
	// missingBy counts them by how the process that committed them ended.
	missingBy map[string]int
}

type chaosSpan struct {
	kind       string
	start, end time.Time
}

type chaosCommit struct {
	at     time.Time
	offset int64
}

func (r *chaosRun) logf(format string, args ...any) {
	line := fmt.Sprintf("%7.2fs  ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.timeline = append(r.timeline, line)
	r.mu.Unlock()
	if testing.Verbose() {
		r.t.Log(line)
	}
}

func newChaosRun(t *testing.T, env *chaosEnv, prof chaosProfile, seed uint64) *chaosRun {
	t.Helper()
	s := fmt.Sprintf("s%d", seed)
	r := &chaosRun{
		t: t, env: env, prof: prof, seed: seed,
		rng:         rand.New(rand.NewPCG(seed, 0xc4a05)),
		dir:         t.TempDir(),
		group:       "chaos-" + s,
		dlq:         "chaos-" + s + "-dlq",
		acme:        chaosTenant{id: "acme", topic: "chaos-" + s + "-acme", table: "chaos_acme_" + s},
		beta:        chaosTenant{id: "beta", topic: "chaos-" + s + "-beta", table: "chaos_beta_" + s},
		start:       time.Now(),
		commits:     map[string][]chaosCommit{},
		missingNear: map[string]int{},
		missingBy:   map[string]int{},
	}
	ctx := context.Background()
	for _, tn := range []chaosTenant{r.acme, r.beta} {
		if err := env.ch.Exec(ctx, "DROP TABLE IF EXISTS "+tn.table); err != nil {
			t.Fatal(err)
		}
		ddl := fmt.Sprintf(chaosTableDDL, tn.table)
		if prof.eo {
			ddl += fmt.Sprintf(" SETTINGS non_replicated_deduplication_window = %d", clickhouse.MinDedupWindow)
		}
		if err := env.ch.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
		if err := env.kafka.CreateTopic(ctx, tn.topic, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.kafka.CreateTopic(ctx, r.dlq, 1); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.adminCl, err = env.kafka.NewClient(kgo.RequestRetries(2), kgo.RetryTimeout(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.adminCl.Close)
	r.admin = kadm.NewClient(r.adminCl)
	// beta's topic takes the oversized record.
	big := strconv.Itoa(4 << 20)
	resp, err := r.admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &big}}, r.beta.topic)
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatalf("set max.message.bytes on %s: %v", r.beta.topic, err)
	}
	// The harness's producer lives through broker_restart: a connection
	// the restarting broker closes before its first response is retried
	// (franz-go takes that for a missing SASL and fails the records
	// otherwise; the test broker has none).
	if r.producer, err = env.kafka.NewClient(kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.ProducerBatchMaxBytes(4<<20), kgo.RecordDeliveryTimeout(4*time.Minute), kgo.ProducerLinger(5*time.Millisecond),
		kgo.AlwaysRetryEOF()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.producer.Close)
	r.a = r.newInstance("a")
	r.b = r.newInstance("b")
	return r
}

func (r *chaosRun) config(name, adminAddr string) string {
	path := filepath.Join(r.dir, "sluice-"+name+".yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: %s
  instance_id: chaos-%s
  session_timeout: 6s
  commit_interval: 250ms
  revoke_timeout: 10s
  max_inflight_bytes: 33554432
clickhouse:
  addr: %s
  retry_max: 1s
dead_letter:
  topic: %s
module:
  cache_dir: %s
observability:
  listen: "off"
shutdown_timeout: %s
admin:
  listen: %s
  store_dir: %s
  admin_tokens: ["%s"]
tenants:
  - id: acme
    tokens: ["%s"]
    limits: {deadline: 2s}
    max_traps_per_minute: 5
    trap_cooldown: 3s
    pipelines:
      - name: events
        topics: [%s]
        tables: [%s]
        module: {path: %s, params: {table: %s}}
  - id: beta
    limits: {max_record_bytes: 1048576}
    pipelines:
      - name: events
        topics: [%s]
        tables: [%s]
        module: {path: %s, params: {table: %s}}
`, r.env.kafka.Addr, r.group, name, r.env.ch.Addr, r.dlq, r.env.cacheDir, r.prof.shutdown, adminAddr,
		filepath.Join(r.dir, "store-"+name), tokenHash(chaosAdmToken), tokenHash(chaosAcmeToken),
		r.acme.topic, r.acme.table, r.env.v1, r.acme.table,
		r.beta.topic, r.beta.table, r.env.v1, r.beta.table)
	if r.prof.eo {
		cfg += "delivery: exactly_once\n"
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// chaosInstance is one sluice instance under supervision: while wanted, it
// is started again one second after every exit.
type chaosInstance struct {
	r         *chaosRun
	name      string
	cfgPath   string
	adminAddr string

	mu    sync.Mutex
	want  bool
	cur   *chaosProc
	runs  []chaosExit
	seq   int
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	begun bool
	// stopped: shutdown ran.
	stopped bool
}

type chaosProc struct {
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan struct{}
	termAt  time.Time // guarded by the instance's mu
	killed  bool      // guarded by the instance's mu
	hung    bool      // guarded by the instance's mu
}

// chaosExit is how one sluice process ended.
type chaosExit struct {
	instance string
	pid      int
	started  time.Time
	ended    time.Time
	code     int           // exit code; -1 when ended by a signal
	signal   string        // the signal, when ended by one
	cause    string        // what the harness did to it, "" if nothing
	drain    time.Duration // SIGTERM to exit, when the harness sent SIGTERM
	panic    string        // the first line of a Go panic or fatal error it printed
	lastErr  string        // its last error log line
	log      string
}

func (e chaosExit) String() string {
	s := fmt.Sprintf("exit %d", e.code)
	if e.signal != "" {
		s = "signal " + e.signal
	}
	if e.cause != "" {
		s += " (" + e.cause + ")"
	}
	if e.drain > 0 {
		s += fmt.Sprintf(" drain %.1fs", e.drain.Seconds())
	}
	return s
}

func (r *chaosRun) newInstance(name string) *chaosInstance {
	ports, err := testinfra.FreePorts(1)
	if err != nil {
		r.t.Fatal(err)
	}
	in := &chaosInstance{r: r, name: name, adminAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	in.cfgPath = r.config(name, in.adminAddr)
	return in
}

// setWant starts supervising (want) or stops restarting the instance.
func (in *chaosInstance) setWant(want bool) {
	in.mu.Lock()
	in.want = want
	if !in.begun {
		in.begun = true
		go in.supervise()
	}
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

func (in *chaosInstance) supervise() {
	defer close(in.done)
	for {
		in.mu.Lock()
		want := in.want
		in.mu.Unlock()
		if !want {
			select {
			case <-in.wake:
				continue
			case <-in.stop:
				return
			}
		}
		p := in.startProc()
		if p != nil {
			<-p.exited
		}
		// systemd's RestartSec=1.
		select {
		case <-in.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// startProc starts a process if the instance is wanted; nil if not.
func (in *chaosInstance) startProc() *chaosProc {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.want {
		return nil
	}
	in.seq++
	p := &chaosProc{log: filepath.Join(in.r.dir, fmt.Sprintf("sluice-%s-%d.log", in.name, in.seq)), exited: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		in.r.logf("%s: %v", in.name, err)
		return nil
	}
	p.cmd = exec.Command(in.r.env.bin, "run", "-config", in.cfgPath)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		in.r.logf("%s: start: %v", in.name, err)
		return nil
	}
	p.started = time.Now()
	in.cur = p
	in.r.logf("%s: started pid %d", in.name, p.cmd.Process.Pid)
	go func() {
		err := p.cmd.Wait()
		logf.Close()
		in.recordExit(p, err)
		close(p.exited)
	}()
	return p
}

func (in *chaosInstance) recordExit(p *chaosProc, waitErr error) {
	e := chaosExit{instance: in.name, pid: p.cmd.Process.Pid, started: p.started, ended: time.Now(), log: p.log}
	st := p.cmd.ProcessState
	e.code = st.ExitCode()
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		e.signal = ws.Signal().String()
	}
	e.panic, e.lastErr = scanSluiceLog(p.log)
	in.mu.Lock()
	switch {
	case p.killed:
		e.cause = "kill -9 by the harness"
	case p.hung:
		e.cause = "SIGTERM by the harness, then kill -9: did not exit"
	case !p.termAt.IsZero():
		e.cause = "SIGTERM by the harness"
		e.drain = e.ended.Sub(p.termAt)
	}
	in.runs = append(in.runs, e)
	if in.cur == p {
		in.cur = nil
	}
	in.mu.Unlock()
	if !p.termAt.IsZero() && !p.hung {
		in.r.mu.Lock()
		in.r.drains = append(in.r.drains, e.drain)
		in.r.mu.Unlock()
	}
	msg := fmt.Sprintf("%s: pid %d ended: %s", in.name, e.pid, e)
	if e.panic != "" {
		msg += "; PANIC: " + e.panic
	} else if e.cause == "" && e.lastErr != "" {
		msg += "; last error: " + e.lastErr
	}
	_ = waitErr
	in.r.logf("%s", msg)
}

// scanSluiceLog finds a Go panic or fatal error and the last error line in
// a process's output.
func scanSluiceLog(path string) (panicLine, lastErr string) {
	f, err := os.Open(path)
	if err != nil {
		return "", ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if panicLine == "" && (strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ")) {
			panicLine = line
		}
		if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "sluice run: ") || strings.HasPrefix(line, "error: ") {
			lastErr = line
		}
	}
	if len(lastErr) > 400 {
		lastErr = lastErr[:400] + "…"
	}
	return panicLine, lastErr
}

func (in *chaosInstance) running() *chaosProc {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cur
}

// kill9 kills the running process, if any.
func (in *chaosInstance) kill9() bool {
	in.mu.Lock()
	p := in.cur
	if p != nil {
		p.killed = true
	}
	in.mu.Unlock()
	if p == nil {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	return true
}

// term sends SIGTERM to the running process and waits for it to exit, at
// most shutdown_timeout + 20s, after which it is killed and reported hung.
func (in *chaosInstance) term() bool {
	in.mu.Lock()
	p := in.cur
	if p != nil {
		p.termAt = time.Now()
	}
	in.mu.Unlock()
	if p == nil {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(in.r.prof.shutdown + 20*time.Second):
		in.mu.Lock()
		p.hung = true
		in.mu.Unlock()
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	return true
}

// shutdown stops supervising and drains the running process.
func (in *chaosInstance) shutdown() {
	in.mu.Lock()
	in.want = false
	begun, stopped := in.begun, in.stopped
	in.stopped = true
	in.mu.Unlock()
	if !begun || stopped {
		return
	}
	in.term()
	close(in.stop)
	<-in.done
	// A start racing the stop: end it too.
	in.term()
}

func (in *chaosInstance) exits() []chaosExit {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]chaosExit(nil), in.runs...)
}

// waitAdmin waits until the instance's admin API answers.
func (in *chaosInstance) waitAdmin(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get("http://" + in.adminAddr + "/v1/whoami")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("admin API of %s not up within %s: %v", in.name, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cli runs the sluice CLI against the instance's admin API as tenant acme.
func (in *chaosInstance) cli(args ...string) (string, error) {
	args = append(args, "-server", "http://"+in.adminAddr, "-tenant", "acme", "-pipeline", "events", "-timeout", "30s")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.r.env.bin, append([]string{"module"}, args...)...)
	cmd.Env = append(os.Environ(), "SLUICE_TOKEN="+chaosAcmeToken)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// cliRetry repeats a CLI call until it succeeds or d passes: the API may be
// down while the process restarts, and init-fails-later refuses init half
// of the time.
func (in *chaosInstance) cliRetry(d time.Duration, args ...string) error {
	deadline := time.Now().Add(d)
	for attempt := 1; ; attempt++ {
		out, err := in.cli(args...)
		if err == nil {
			in.r.logf("%s: sluice module %s: ok after %d attempt(s): %s", in.name, args[0], attempt, firstLine(out))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sluice module %s on %s: %v: %s (after %d attempts)", strings.Join(args, " "), in.name, err, out, attempt)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// produce writes records for both tenants at the profile's rate until stop
// is closed and at least minRecords each are sent, then flushes. Each value
// starts with "<tenant>-s<seed>-<id>|": an id that does not depend on the
// partition.
func (r *chaosRun) produce(stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		var failed atomic.Value
		filler := strings.Repeat("x", 120)
		start := time.Now()
		for i := 0; ; i++ {
			stopped := false
			select {
			case <-stop:
				stopped = true
			default:
			}
			if stopped && i >= r.prof.minRecords {
				break
			}
			if !stopped {
				due := start.Add(time.Duration(float64(i) / float64(r.prof.rate) * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
			for _, tn := range []chaosTenant{r.acme, r.beta} {
				rec := &kgo.Record{Topic: tn.topic, Value: fmt.Appendf(nil, "%s-s%d-%07d|%s", tn.id, r.seed, i, filler)}
				r.produceOne(ctx, rec, &failed)
			}
		}
		err := r.producer.Flush(ctx)
		if e, _ := failed.Load().(error); e != nil && err == nil {
			err = e
		}
		done <- err
	}()
	return done
}

func (r *chaosRun) produceOne(ctx context.Context, rec *kgo.Record, failed *atomic.Value) {
	r.producer.Produce(ctx, rec, func(rec *kgo.Record, err error) {
		if err != nil {
			failed.Store(fmt.Errorf("produce to %s: %w", rec.Topic, err))
			return
		}
		r.produced.Add(1)
	})
}

// committed reads the group's committed offsets and the end offsets of the
// tenants' partitions.
func (r *chaosRun) offsets(ctx context.Context) (committed, ends map[string]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	offs, err := r.admin.FetchOffsets(ctx, r.group)
	if err != nil {
		return nil, nil, fmt.Errorf("fetch committed offsets: %w", err)
	}
	listed, err := r.admin.ListEndOffsets(ctx, r.acme.topic, r.beta.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("list end offsets: %w", err)
	}
	committed, ends = map[string]int64{}, map[string]int64{}
	var lerr error
	listed.Each(func(l kadm.ListedOffset) {
		if l.Err != nil {
			lerr = l.Err
			return
		}
		key := fmt.Sprintf("%s/%d", l.Topic, l.Partition)
		ends[key] = l.Offset
		committed[key] = -1
		if o, ok := offs.Lookup(l.Topic, l.Partition); ok && o.Err == nil {
			committed[key] = o.At
		}
	})
	return committed, ends, lerr
}

// watchCommits records every move of a committed offset until ctx ends,
// so that a record committed without landing can be placed on the
// timeline.
func (r *chaosRun) watchCommits(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if committed, _, err := r.offsets(ctx); err == nil {
			now := time.Now()
			r.mu.Lock()
			for k, o := range committed {
				h := r.commits[k]
				if o >= 0 && (len(h) == 0 || h[len(h)-1].offset != o) {
					r.commits[k] = append(h, chaosCommit{at: now, offset: o})
				}
			}
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// lag is the records not yet committed, summed over the partitions.
func lag(committed, ends map[string]int64) (n, committedSum int64) {
	for k, end := range ends {
		c := max(committed[k], 0)
		n += end - c
		committedSum += c
	}
	return n, committedSum
}

// waitProgress waits until the committed offsets have moved past from, at
// most d; it reports whether they did.
func (r *chaosRun) waitProgress(from int64, d time.Duration) (int64, bool) {
	deadline := time.Now().Add(d)
	for {
		committed, ends, err := r.offsets(context.Background())
		if err == nil {
			if _, sum := lag(committed, ends); sum > from {
				return sum, true
			}
		}
		if time.Now().After(deadline) {
			return from, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// quiesce waits until every produced record is committed, or the committed
// offsets have not moved for prof.stall, or prof.quiesceMax passes.
func (r *chaosRun) quiesce() (lagLeft int64, how string) {
	start := time.Now()
	var last int64 = -1
	lastMove := time.Now()
	for {
		committed, ends, err := r.offsets(context.Background())
		if err == nil {
			n, sum := lag(committed, ends)
			if n == 0 {
				return 0, fmt.Sprintf("all committed after %.1fs", time.Since(start).Seconds())
			}
			if sum != last {
				last, lastMove = sum, time.Now()
			}
			lagLeft = n
		}
		if time.Since(lastMove) > r.prof.stall {
			return lagLeft, fmt.Sprintf("STALLED: committed offsets still for %s with %d records uncommitted", r.prof.stall, lagLeft)
		}
		if time.Since(start) > r.prof.quiesceMax {
			return lagLeft, fmt.Sprintf("STALLED: %d records uncommitted after %s", lagLeft, r.prof.quiesceMax)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// inject runs one fault and heals it. An error is a failure of the harness
// (a server that does not come back), not of sluice.
func (r *chaosRun) inject(f chaosFault) error {
	ctx := context.Background()
	span := chaosSpan{kind: f.kind, start: time.Now()}
	defer func() {
		span.end = time.Now()
		r.mu.Lock()
		r.faultLog = append(r.faultLog, span)
		r.mu.Unlock()
	}()
	r.logf("FAULT %s: begin (hold %.1fs)", f.kind, f.hold.Seconds())
	defer r.logf("FAULT %s: healed", f.kind)
	ch := r.env.ch
	switch f.kind {
	case faultKill9:
		in := r.a
		if f.pick%2 == 1 && r.b.running() != nil {
			in = r.b
		}
		in.kill9()
	case faultTermCHDown:
		if err := ch.Stop(); err != nil {
			return err
		}
		r.logf("clickhouse stopped; SIGTERM to a")
		r.a.term()
		time.Sleep(f.hold)
		return ch.Start(ctx)
	case faultCHStop:
		if err := ch.Stop(); err != nil {
			return err
		}
		time.Sleep(f.hold)
		return ch.Start(ctx)
	case faultCHKill:
		if err := ch.Kill(); err != nil {
			return err
		}
		time.Sleep(f.hold)
		return ch.Start(ctx)
	case faultCHFreeze:
		pid := ch.PID()
		if pid == 0 {
			return errors.New("clickhouse is not running")
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
		time.Sleep(f.hold)
		return syscall.Kill(pid, syscall.SIGCONT)
	case faultBrokerRestart:
		if err := r.env.kafka.Stop(); err != nil {
			return err
		}
		time.Sleep(f.hold / 2)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return r.env.kafka.Start(sctx)
	case faultRebalance:
		// Half of the joins happen while ClickHouse is frozen, so that a's
		// revoked partitions still have rows in flight; half of the leaves
		// are a kill -9, so that b's partitions come back after the
		// session timeout.
		freeze := f.pick%2 == 1
		r.b.setWant(true)
		// b's admin API answers once it has connected to ClickHouse and
		// Kafka, just before it joins the group.
		if err := r.b.waitAdmin(90 * time.Second); err != nil {
			r.logf("b: %v", err)
		}
		pid := ch.PID()
		if freeze && pid != 0 {
			r.logf("clickhouse frozen for the join")
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return err
			}
		}
		r.waitMembers(2, 30*time.Second)
		if freeze && pid != 0 {
			time.Sleep(f.hold)
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				return err
			}
			r.logf("clickhouse thawed")
		}
		time.Sleep(f.hold)
		r.b.setWant(false)
		if f.pick%4 >= 2 {
			r.b.kill9()
		} else {
			r.b.term()
		}
	case faultInitFail:
		if err := r.a.cliRetry(60*time.Second, "push", "-activate", "-note", "init-fails-later", r.env.initFail); err != nil {
			r.logf("init_fail: could not activate: %v", err)
			return nil
		}
		// At least two periods (4 s each) so that instances are created
		// in a refusing window.
		until := time.Now().Add(max(f.hold, 9*time.Second))
		if f.pick%2 == 1 {
			// A rebalance while acme's partitions are paused for its
			// failing module.
			r.logf("init_fail: b joins and leaves meanwhile")
			r.b.setWant(true)
			if err := r.b.waitAdmin(90 * time.Second); err != nil {
				r.logf("b: %v", err)
			}
			r.waitMembers(2, 30*time.Second)
			time.Sleep(f.hold)
			r.b.setWant(false)
			r.b.term()
		}
		time.Sleep(time.Until(until))
		if err := r.a.cliRetry(90*time.Second, "activate", fileSHA256(r.t, r.env.v1)); err != nil {
			return err
		}
	case faultOversized:
		rec := &kgo.Record{Topic: r.beta.topic,
			Value: append(fmt.Appendf(nil, "beta-s%d-big%d|", r.seed, f.pick), strings.Repeat("B", chaosBigValue)...)}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res := r.producer.ProduceSync(pctx, rec)
		if err := res.FirstErr(); err != nil {
			return fmt.Errorf("produce the oversized record: %w", err)
		}
		r.produced.Add(1)
		r.logf("oversized record (%d bytes) at %s/%d@%d", len(rec.Value), rec.Topic, rec.Partition, rec.Offset)
		time.Sleep(f.hold)
	case faultDropColumn:
		if err := ch.Exec(ctx, "ALTER TABLE "+r.beta.table+" DROP COLUMN version"); err != nil {
			return err
		}
		time.Sleep(f.hold)
		return ch.Exec(ctx, "ALTER TABLE "+r.beta.table+" ADD COLUMN version String AFTER offset")
	default:
		return fmt.Errorf("unknown fault %q", f.kind)
	}
	return nil
}

// waitMembers waits until the group has n members, at most d.
func (r *chaosRun) waitMembers(n int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		gs, err := r.admin.DescribeGroups(ctx, r.group)
		cancel()
		if err == nil {
			if g, ok := gs[r.group]; ok && len(g.Members) >= n && g.State == "Stable" {
				r.logf("group %s: %d members, stable", r.group, len(g.Members))
				return
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.logf("group %s: not %d stable members within %s", r.group, n, d)
}

// partitionCheck is the checker's verdict on one partition.
type partitionCheck struct {
	tenant    string
	topic     string
	partition int32
	produced  int   // records in the partition
	end       int64 // its end offset
	committed int64 // the group's committed offset, -1 for none
	landed    int   // distinct offsets with a row in ClickHouse
	rows      int   // rows in ClickHouse
	deadLet   int   // distinct offsets in the dead-letter topic
	missing   []int64
	// unresolved: neither landed nor dead-lettered, committed or not.
	unresolved []int64
	// corrupt: rows whose value is not the record's, rows or dead letters
	// naming an offset the partition does not have.
	corrupt []string
}

// chaosCheck reads what sluice left behind, independently of its code:
// every record of the tenants' partitions from Kafka, the committed offsets
// from the group coordinator, the rows from ClickHouse and the dead letters
// from their topic (identified by the documented sluice.source.* headers,
// else by the id in the value).
func (r *chaosRun) check() ([]partitionCheck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	committed, ends, err := r.offsets(ctx)
	if err != nil {
		return nil, err
	}
	topics := map[string]string{r.acme.topic: r.acme.table, r.beta.topic: r.beta.table}
	kafkaRecs, err := r.readTopics(ctx, append([]string{r.dlq}, r.acme.topic, r.beta.topic))
	if err != nil {
		return nil, err
	}
	type key struct {
		topic     string
		partition int32
	}
	byPart := map[key]map[int64][]byte{}
	byID := map[string]key{}
	offsetOf := map[string]int64{}
	for _, rec := range kafkaRecs {
		if rec.Topic == r.dlq {
			continue
		}
		k := key{rec.Topic, rec.Partition}
		if byPart[k] == nil {
			byPart[k] = map[int64][]byte{}
		}
		byPart[k][rec.Offset] = rec.Value
		id, _, _ := strings.Cut(string(rec.Value[:min(len(rec.Value), 64)]), "|")
		byID[id] = k
		offsetOf[id] = rec.Offset
	}
	dead := map[key]map[int64]bool{}
	var strays []string
	for _, rec := range kafkaRecs {
		if rec.Topic != r.dlq {
			continue
		}
		h := map[string]string{}
		for _, hd := range rec.Headers {
			h[hd.Key] = string(hd.Value)
		}
		var k key
		var off int64
		if topic, ok := h["sluice.source.topic"]; ok {
			p, err1 := strconv.ParseInt(h["sluice.source.partition"], 10, 32)
			o, err2 := strconv.ParseInt(h["sluice.source.offset"], 10, 64)
			if err1 != nil || err2 != nil {
				strays = append(strays, fmt.Sprintf("dead letter at %d with bad source headers %v", rec.Offset, h))
				continue
			}
			k, off = key{topic, int32(p)}, o
		} else {
			id, _, _ := strings.Cut(string(rec.Value[:min(len(rec.Value), 64)]), "|")
			var ok bool
			if k, ok = byID[id]; !ok {
				strays = append(strays, fmt.Sprintf("dead letter at %d with no source headers and unknown id %q", rec.Offset, id))
				continue
			}
			off = offsetOf[id]
		}
		if dead[k] == nil {
			dead[k] = map[int64]bool{}
		}
		dead[k][off] = true
	}
	var out []partitionCheck
	for topic, table := range topics {
		tenant := r.acme.id
		if topic == r.beta.topic {
			tenant = r.beta.id
		}
		rows, err := r.env.ch.Query(ctx, fmt.Sprintf(
			"SELECT partition, offset, count(), any(value) FROM %s WHERE topic = '%s' GROUP BY partition, offset FORMAT TSV", table, topic))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		landed := map[key]map[int64]int{}
		var bad []string
		for _, line := range strings.Split(strings.TrimSpace(rows), "\n") {
			if line == "" {
				continue
			}
			f := strings.SplitN(line, "\t", 4)
			if len(f) != 4 {
				return nil, fmt.Errorf("read %s: unexpected line %q", table, line)
			}
			p, _ := strconv.ParseInt(f[0], 10, 32)
			o, _ := strconv.ParseInt(f[1], 10, 64)
			n, _ := strconv.Atoi(f[2])
			k := key{topic, int32(p)}
			if landed[k] == nil {
				landed[k] = map[int64]int{}
			}
			landed[k][o] = n
			if v, ok := byPart[k][o]; !ok {
				bad = append(bad, fmt.Sprintf("row for %s/%d@%d, which Kafka does not have", topic, p, o))
			} else if string(v) != f[3] {
				bad = append(bad, fmt.Sprintf("row for %s/%d@%d holds %.40q, the record is %.40q", topic, p, o, f[3], v))
			}
		}
		for p := int32(0); p < 4; p++ {
			k := key{topic, p}
			pk := fmt.Sprintf("%s/%d", topic, p)
			c := partitionCheck{tenant: tenant, topic: topic, partition: p, end: ends[pk], committed: committed[pk], produced: len(byPart[k])}
			for _, b := range bad {
				if strings.Contains(b, fmt.Sprintf("%s/%d@", topic, p)) {
					c.corrupt = append(c.corrupt, b)
				}
			}
			for o := range dead[k] {
				if _, ok := byPart[k][o]; !ok {
					c.corrupt = append(c.corrupt, fmt.Sprintf("dead letter for %s@%d, which Kafka does not have", pk, o))
				}
			}
			c.deadLet = len(dead[k])
			for o, n := range landed[k] {
				c.landed++
				c.rows += n
				_ = o
			}
			offs := make([]int64, 0, len(byPart[k]))
			for o := range byPart[k] {
				offs = append(offs, o)
			}
			sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
			for _, o := range offs {
				if landed[k][o] > 0 || dead[k][o] {
					continue
				}
				c.unresolved = append(c.unresolved, o)
				if o < c.committed {
					c.missing = append(c.missing, o)
				}
			}
			out = append(out, c)
		}
	}
	if len(strays) > 0 && len(out) > 0 {
		out[0].corrupt = append(out[0].corrupt, strays...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].topic != out[j].topic {
			return out[i].topic < out[j].topic
		}
		return out[i].partition < out[j].partition
	})
	return out, nil
}

// readTopics reads every record of topics, from the start to the end
// offsets listed now.
func (r *chaosRun) readTopics(ctx context.Context, topics []string) ([]*kgo.Record, error) {
	starts, err := r.admin.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends, err := r.admin.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	assign := map[string]map[int32]kgo.Offset{}
	remaining := map[string]int64{} // partition → end offset still to reach
	var lerr error
	ends.Each(func(l kadm.ListedOffset) {
		if l.Err != nil {
			lerr = l.Err
			return
		}
		s, _ := starts.Lookup(l.Topic, l.Partition)
		if l.Offset <= s.Offset {
			return
		}
		if assign[l.Topic] == nil {
			assign[l.Topic] = map[int32]kgo.Offset{}
		}
		assign[l.Topic][l.Partition] = kgo.NewOffset().At(s.Offset)
		remaining[fmt.Sprintf("%s/%d", l.Topic, l.Partition)] = l.Offset
	})
	if lerr != nil {
		return nil, lerr
	}
	if len(assign) == 0 {
		return nil, nil
	}
	cl, err := r.env.kafka.NewClient(kgo.ConsumePartitions(assign), kgo.FetchMaxBytes(16<<20), kgo.FetchMaxPartitionBytes(8<<20))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %v: %d partitions not read to their end: %w", topics, len(remaining), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s/%d: %w", t, p, err) })
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(rec *kgo.Record) {
			k := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
			end, ok := remaining[k]
			if !ok || rec.Offset >= end {
				return
			}
			out = append(out, rec)
			if rec.Offset+1 >= end {
				delete(remaining, k)
			}
		})
	}
	return out, nil
}

// commitTime is when the committed offset of a partition first passed
// offset, from the watch; zero if never seen.
func (r *chaosRun) commitTime(pk string, offset int64) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.commits[pk] {
		if c.offset > offset {
			return c.at
		}
	}
	return time.Time{}
}

// near names the faults active at, or ended within 15s before, moment at.
func (r *chaosRun) near(at time.Time) string {
	s, _, _ := r.nearKinds(at)
	return s
}

// nearKinds is near with the kinds of those faults.
func (r *chaosRun) nearKinds(at time.Time) (desc string, kinds []string, exit string) {
	if at.IsZero() {
		return "commit not observed by the watch (at the final drain?)", nil, ""
	}
	r.mu.Lock()
	faults := append([]chaosSpan(nil), r.faultLog...)
	r.mu.Unlock()
	for _, f := range faults {
		if !at.Before(f.start) && (f.end.IsZero() || !at.After(f.end.Add(15*time.Second))) {
			kinds = append(kinds, f.kind)
		}
	}
	desc = fmt.Sprintf("committed at %.2fs", at.Sub(r.start).Seconds())
	if len(kinds) > 0 {
		desc += " during/after " + strings.Join(kinds, ",")
	}
	// The process that made the commit most likely ended soon after it: a
	// failing pipeline commits, then drains for up to shutdown_timeout.
	var first *chaosExit
	for _, in := range []*chaosInstance{r.a, r.b} {
		for _, e := range in.exits() {
			if d := e.ended.Sub(at); d > -time.Second && d < r.prof.shutdown+5*time.Second && (first == nil || e.ended.Before(first.ended)) {
				first = &e
			}
		}
	}
	if first != nil {
		desc += fmt.Sprintf(", then %s pid %d ended at %.2fs: %s", first.instance, first.pid, first.ended.Sub(r.start).Seconds(), first)
		exit = first.String()
		if first.cause == "" && first.lastErr != "" {
			desc += ": " + first.lastErr
			exit += ": " + digits.ReplaceAllString(strings.TrimPrefix(first.lastErr, "sluice run: "), "N")
		}
		if first.panic != "" {
			exit += ": " + first.panic
		}
	}
	return desc, kinds, exit
}

// ranges prints offsets as compact ranges.
func ranges(offs []int64) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatInt(offs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", offs[i], offs[j]))
		}
		i = j + 1
	}
	if len(parts) > 12 {
		parts = append(parts[:12], fmt.Sprintf("… (%d ranges)", len(parts)))
	}
	return strings.Join(parts, ",")
}

// missingRanges prints offsets as ranges, each with the moment the
// committed offset first passed it and the faults around that moment.
func (r *chaosRun) missingRanges(pk string, offs []int64) string {
	var parts []string
	for i := 0; i < len(offs); {
		j := i
		for j+1 < len(offs) && offs[j+1] == offs[j]+1 {
			j++
		}
		span := strconv.FormatInt(offs[i], 10)
		if j > i {
			span = fmt.Sprintf("%d-%d", offs[i], offs[j])
		}
		desc, kinds, exit := r.nearKinds(r.commitTime(pk, offs[i]))
		if len(kinds) == 0 {
			kinds = []string{"(no fault near)"}
		}
		if exit == "" {
			exit = "(no exit soon after)"
		}
		r.mu.Lock()
		for _, k := range kinds {
			r.missingNear[k] += j - i + 1
		}
		r.missingBy[exit] += j - i + 1
		r.mu.Unlock()
		parts = append(parts, fmt.Sprintf("%s (%s)", span, desc))
		i = j + 1
	}
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("… (%d ranges)", len(parts)))
	}
	return strings.Join(parts, "; ")
}
