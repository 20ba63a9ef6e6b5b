package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The isolation suite runs the real sluice binary with two tenants on the
// real broker and ClickHouse. Tenant B drains a backlog of log lines alone,
// then beside tenant A whose pipelines are each hostile in one of the ways
// of issue 12, then alone again, mix after mix; B must keep 80% of the
// solo rate of the runs just before and after each mix, land exactly what
// it produced, and the process's peak RSS must stay under isoRSSBound.
// `go tool -modfile=tools/go.mod task isolation` runs the reduced profile (SLUICE_ISOLATION=reduced);
// SLUICE_ISOLATION=full runs larger volumes (`go tool -modfile=tools/go.mod task isolation PROFILE=full`).

type isoProfile struct {
	name     string
	bRecords int // tenant B's backlog per run
	hostile  int // records per hostile pipeline of tenant A
	looping  int // records of the crash-loop pipeline, whose every record burns the deadline
	bigBytes int // the row each "output far larger than input" record makes
	bigCount int
	poison   int // poison records among 1,000 × poison records
	stalled  int // uploads that declare 8 MiB and stall after 4 bytes
}

func isoProfileFromEnv() isoProfile {
	if os.Getenv("SLUICE_ISOLATION") == "full" {
		return isoProfile{name: "full", bRecords: 1_000_000, hostile: 400, looping: 60, bigBytes: 4 << 20, bigCount: 1000, poison: 10, stalled: 100}
	}
	// B's drain must outlast A's start and average over many inserts
	// (docs/tenancy.md): at 300,000 records its solo rate varied by 20%.
	return isoProfile{name: "reduced", bRecords: 600_000, hostile: 30, looping: 30, bigBytes: 1 << 20, bigCount: 24, poison: 10, stalled: 20}
}

// isoCommitStall is how long a topic of A's may go without a commit or a
// dead letter before the suite calls it stuck: the crash-loop policy's
// window (a minute) and its cool-down, with room to spare.
const isoCommitStall = 2 * time.Minute

// The configured limits the RSS bound is computed from.
const (
	isoBudgetB       = 64 << 20       // tenant B's in-flight budget (one pipeline)
	isoBudgetA       = 8 << 20        // each of tenant A's pipelines
	isoMemB          = 64 << 20       // memory_bytes of B's instances
	isoMemA          = 32 << 20       // memory_bytes of A's instances
	isoPartitionsB   = 2              // B's partitions: one instance each
	isoInstanceExtra = 19 << 20       // per instance beyond memory_bytes: 2 MiB tables, 16 MiB call stack, 1 MiB bookkeeping (docs/tenancy.md)
	isoNonHeap       = 64 << 20       // compiled code, thread stacks (as faultRSSBound)
	isoMaxOutputA    = 4<<20 + 64<<10 // A's max_output_bytes: a 4 MiB big row and its framing
)

// isoRSSBound is the bound on the process's peak RSS, from the configured
// limits: the Go soft memory limit sluice sets (2 × Σ in-flight budgets +
// 192 MiB) covers the Go heap; each live instance's linear memory, tables and
// call stack live outside it (memory_bytes + 19 MiB each, one instance per
// partition; bisection replaces instances, it does not add to them); and
// 64 MiB covers compiled code and thread stacks.
func isoRSSBound(pipelinesA, partitionsA int) int64 {
	budgets := int64(isoBudgetB) + int64(pipelinesA)*isoBudgetA
	softLimit := 2*budgets + 192<<20
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
	run    string // the run whose records these are
}

// topic is the pipeline's topic in its run: every run of a mix gets fresh
// records.
func (p isoPipeline) topic() string { return "a-" + p.name + "-" + p.run }

// isoRun is one start of sluice with its config, and the addresses of
// its observability and admin listeners.
type isoRun struct {
	*sluiceProc
	obsAddr string
	admAddr string
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

func watchDLQ(t *testing.T, e *env, topic string) *dlqWatch {
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
					case headerSourceTopic:
						src = string(h.Value)
					case headerTruncated:
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

// bSample is one reading of B's landed rows.
type bSample struct {
	at   time.Time
	rows int
}

// bDrain waits until B's table holds want rows, failing only when none
// lands for a minute or the process exits; it returns every reading.
func bDrain(t *testing.T, e *env, r *isoRun, want int) []bSample {
	t.Helper()
	var samples []bSample
	waitProgress(t, 20*time.Millisecond, time.Minute, func() (int, bool) {
		c := e.queryInt(t, "SELECT count() FROM logs")
		samples = append(samples, bSample{time.Now(), c})
		if gone, err := r.Exited(); gone && c < want {
			t.Fatalf("sluice exited (%v) with %d of %d of B's rows landed", err, c, want)
		}
		return c, c >= want
	}, func(c int) string { return fmt.Sprintf("%d of %d of B's rows, none for a minute", c, want) })
	return samples
}

// drainRate is B's rate in rows per second over the readings between lo
// and hi rows landed: the slope of the least-squares line through them.
// Rows land an insert at a time, so the count climbs in steps; the line
// through every reading, unlike the time between two thresholds, does not
// move by a whole step when a threshold falls just before or after one.
func drainRate(samples []bSample, lo, hi int) (rate float64, from, to time.Time) {
	var in []bSample
	for _, s := range samples {
		if s.rows >= lo && s.rows <= hi {
			in = append(in, s)
		}
	}
	if len(in) < 2 {
		return 0, time.Time{}, time.Time{}
	}
	t0 := in[0].at
	var sx, sy, sxx, sxy float64
	for _, s := range in {
		x, y := s.at.Sub(t0).Seconds(), float64(s.rows)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(len(in))
	if d := n*sxx - sx*sx; d > 0 {
		rate = (n*sxy - sx*sy) / d
	}
	return rate, t0, in[len(in)-1].at
}

// TestDrainRate: the rate of a count that climbs in steps is the rate of
// its steps, wherever the thresholds fall.
func TestDrainRate(t *testing.T) {
	t0 := time.Unix(0, 0)
	// 10,000 rows land every 500 ms (20,000 rows/s), read every 20 ms.
	var samples []bSample
	for ms := 0; ms <= 10_000; ms += 20 {
		samples = append(samples, bSample{t0.Add(time.Duration(ms) * time.Millisecond), 10_000 * (ms / 500)})
	}
	for _, c := range []struct{ lo, hi int }{{10_000, 190_000}, {15_000, 185_000}, {29_000, 171_000}} {
		rate, from, to := drainRate(samples, c.lo, c.hi)
		if rate < 19_000 || rate > 21_000 {
			t.Errorf("rows %d to %d: rate %.0f rows/s, want 20,000 ± 5%%", c.lo, c.hi, rate)
		}
		if !to.After(from) {
			t.Errorf("rows %d to %d: window %v to %v", c.lo, c.hi, from, to)
		}
	}
	if rate, _, _ := drainRate(samples[:1], 0, 1<<30); rate != 0 {
		t.Errorf("one reading: rate %.0f, want 0 (none measured)", rate)
	}
}

// TestIsolationSuite: for every class of hostile module, record or upload
// in issue 12, tenant A's runs while tenant B drains, in one process of the
// real binary.
func TestIsolationSuite(t *testing.T) {
	if os.Getenv("SLUICE_ISOLATION") == "" {
		// Its rates are compared between runs minutes apart, so it runs
		// alone: go tool -modfile=tools/go.mod task test runs it after the other tests.
		t.Skip("the isolation suite runs alone, with SLUICE_ISOLATION=reduced or full: go tool -modfile=tools/go.mod task test runs it after the other tests, go tool -modfile=tools/go.mod task isolation on its own")
	}
	// The servers' log tails, logged when a test fails, come after the
	// failures; this cleanup, registered first, runs last and says again
	// what failed, so that the end of the output names it.
	var failMu sync.Mutex
	var failures []string
	errorf := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		failMu.Lock()
		failures = append(failures, msg)
		failMu.Unlock()
		t.Error(msg)
	}
	t.Cleanup(func() {
		failMu.Lock()
		defer failMu.Unlock()
		switch {
		case len(failures) > 0:
			t.Logf("isolation suite failures (%d):\n  %s", len(failures), strings.Join(failures, "\n  "))
		case t.Failed():
			t.Log("isolation suite failed: a fatal error above stopped it (its line is the first with \"isolation_test.go\" and no rate)")
		}
	})
	prof := isoProfileFromEnv()
	e := newEnv(t, testinfra.ClickHouseOptions{})
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
		{class: "9 crash loop + rebalance", name: "crash", module: adv("infinite-loop"), table: "adv", values: repeat(prof.looping, same("loop"))},
		{class: "10 many poison records", name: "poison", module: adv("panic-every-1000"), table: "adv",
			values: repeat(prof.poison*1000, func(i int) string {
				if i%1000 == 500 {
					return "trap"
				}
				return fmt.Sprintf("record %d", i)
			})},
	}
	const permRecords = 500

	mixNames := isoMixes
	if v := os.Getenv("SLUICE_ISOLATION_MIXES"); v != "" {
		// For narrowing down a slow mix: "grow,flood;crash" runs two.
		mixNames = nil
		for _, m := range strings.Split(v, ";") {
			mixNames = append(mixNames, strings.Split(m, ","))
		}
	}
	// B drains the same backlog in every run, each run in a consumer group
	// of its own; A's topics and the dead-letter topic are made per run.
	advDDL := "CREATE TABLE %s (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset"
	e.exec(t, logsDDL(t, "logs"), logsDDL(t, "a_logs"), logsDDL(t, "a_perm"),
		fmt.Sprintf(advDDL, "adv"), fmt.Sprintf(advDDL, "adv_big"),
		fmt.Sprintf(eventsDDL, "a_events"))
	e.createTopic(t, "b-logs", isoPartitionsB)
	adm := e.admin(t)
	ctx := context.Background()
	e.produce(t, "b-logs", logLines(1, prof.bRecords))
	// prepare makes run's topics and A's records, and empties A's tables.
	prepare := func(run string, a []isoPipeline) {
		t.Helper()
		e.createTopic(t, "dlq-"+run, 1)
		for _, table := range []string{"adv", "adv_big", "a_logs", "a_perm", "a_events"} {
			e.exec(t, "TRUNCATE TABLE IF EXISTS "+table)
		}
		for _, p := range a {
			e.createTopic(t, p.topic(), 1)
			if p.name == "logs" {
				e.allowRecordBytes(t, adm, p.topic(), 4<<20)
			}
			if len(p.values) > 0 {
				e.produce(t, p.topic(), p.values, kgo.ProducerBatchMaxBytes(4<<20))
			}
		}
	}
	cacheDir := t.TempDir()

	// config is one run's: B always, A's pipelines when given.
	config := func(run, obs, admin string, a []isoPipeline, b bool) *sluiceConfig {
		return isoConfig(e.kafka.Addr, e.ch.Addr, run, cacheDir, t.TempDir(), obs, admin, logNormalize, a, b)
	}

	type result struct {
		rate       float64
		r          *isoRun
		start, end time.Time // B's 10% and 90%
	}
	// measure runs B (and A's pipelines, if given) in one process and
	// returns B's rate between 10% and 90% of its rows landed (drainRate).
	// during runs beside the measurement, with the process.
	measure := func(run string, a []isoPipeline, during func(r *isoRun, bDone <-chan struct{})) result {
		t.Helper()
		obs, adm := freeAddr(t), freeAddr(t)
		r := &isoRun{sluiceProc: runSluice(t, e.bin, t.TempDir(), run, config(run, obs, adm, a, true), false), obsAddr: obs, admAddr: adm}
		bDone := make(chan struct{})
		var wg sync.WaitGroup
		if during != nil {
			wg.Add(1)
			go func() { defer wg.Done(); during(r, bDone) }()
		}
		n := prof.bRecords
		samples := bDrain(t, e, r, n)
		close(bDone)
		wg.Wait()
		rate, t10, t90 := drainRate(samples, n/10, n-n/10)
		if os.Getenv("SLUICE_ISOLATION_TIMELINE") != "" {
			var b strings.Builder
			last := samples[0]
			for _, s := range samples {
				if s.at.Sub(last.at) >= 500*time.Millisecond {
					fmt.Fprintf(&b, " %.1f:%d", s.at.Sub(samples[0].at).Seconds(), int(float64(s.rows-last.rows)/s.at.Sub(last.at).Seconds()))
					last = s
				}
			}
			t.Logf("%s timeline (s:rows/s):%s", run, b.String())
		}
		if rate <= 0 {
			t.Fatalf("%s: B's rows landed in too few steps to measure a rate (%d readings)", run, len(samples))
		}
		return result{rate: rate, r: r, start: t10, end: t90}
	}
	checkB := func(run string) {
		t.Helper()
		got := e.queryString(t, "SELECT count(), uniqExact("+seqExpr+") FROM logs")
		if want := fmt.Sprintf("%d\t%d", prof.bRecords, prof.bRecords); got != want {
			errorf("%s: B's (rows, distinct records) = %q, want %q (produced = landed)", run, got, want)
		}
		e.exec(t, "TRUNCATE TABLE logs")
	}

	type mixResult struct {
		name    string
		classes []string
		res     result
		solo    float64 // B's rate in the solo runs just before and after
		peak    int64
		bound   int64
	}
	var table []string // one line per class, for the log
	// runMix runs A's pipelines of names beside B, as run, and checks what
	// each class must show.
	runMix := func(run string, names []string) mixResult {
		t.Helper()
		var a []isoPipeline
		has := map[string]bool{}
		for _, p := range pipes {
			if slices.Contains(names, p.name) {
				p.run = run
				a = append(a, p)
				has[p.name] = true
			}
		}
		prepare(run, a)
		w := watchDLQ(t, e, "dlq-"+run)
		var (
			apiResults          []isoAPIResult
			wrong429, dotStatus int
			stalledHeld         int
			permReady           string
			member2             *sluiceProc
			rebalanced          bool
			mixedRun            *isoRun
		)
		res := measure(run, a, func(r *isoRun, bDone <-chan struct{}) {
			mixedRun = r
			// The process is up (its start checks the tables, and the
			// admin API listens) once B's first rows land.
			for e.queryInt(t, "SELECT count() FROM logs") == 0 {
				if gone, _ := r.Exited(); gone {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
			if has["perm"] {
				// Class 8: A's table goes away, then A's records come.
				if err := e.ch.Exec(ctx, "DROP TABLE a_perm"); err != nil {
					errorf("%v", err)
					return
				}
				e.produce(t, "a-perm-"+run, logLines(8, permRecords))
			}
			if has["grow"] {
				apiResults, wrong429, dotStatus, stalledHeld = abuseAdmin(t, r.admAddr, adv, prof.stalled)
			}
			if has["crash"] {
				crash := []isoPipeline{a[slices.IndexFunc(a, func(p isoPipeline) bool { return p.name == "crash" })]}
				// Class 9: a second member that consumes only A's
				// crash-looping topic joins while B drains (a revoke
				// during A's cool-downs) and leaves after. It stands for
				// another host, so it yields the CPU to the process measured.
				member2 = runSluice(t, e.bin, t.TempDir(), run+"-member2", config(run, freeAddr(t), freeAddr(t), crash, false), true)
				rebalanced, _ = waitGroup(adm, "iso-"+run, 2*time.Minute, func() bool {
					gone, _ := member2.Exited()
					return gone
				}, func(g groupState) bool { return g.members >= 2 })
			}
			if has["perm"] {
				// Class 8 is visible in /readyz.
				for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
					if ok, why := r.ready(); !ok && strings.Contains(why, "a_perm") {
						permReady = why
						break
					}
				}
			}
			<-bDone
		})
		checkB(run)
		if mixedRun == nil {
			t.Fatalf("%s: sluice never ran", run)
		}
		if gone, err := mixedRun.Exited(); gone {
			errorf("%s: sluice exited while B drained: %v", run, err)
		}
		if member2 != nil {
			if gone, err := member2.Exited(); gone {
				errorf("9: member 2 exited: %v", err)
			} else {
				member2.Drain(t)
			}
			if !rebalanced {
				errorf("%v", "9: the second member never joined the group")
			}
		}
		// A's classes: each ran, was contained, and lost nothing of what
		// it could land.
		if has["perm"] {
			if permReady == "" {
				errorf("%v", "8 permanent insert error: /readyz never named a_perm")
			}
			e.exec(t, logsDDL(t, "a_perm"))
			e.waitCount(t, "SELECT count() FROM a_perm", permRecords)
		}
		if has["big"] {
			e.waitCount(t, "SELECT count() FROM adv_big", prof.bigCount)
			// A few rows a block: in the full profile (1,000 rows of 4 MiB)
			// this check once went over 18.16's 3.73 GiB limit for a query.
			if got := e.queryInt(t, fmt.Sprintf("SELECT count() FROM adv_big WHERE length(value) = %d SETTINGS max_block_size = 8", prof.bigBytes)); got != prof.bigCount {
				errorf("4 output ≫ input: %d of %d big rows landed whole", got, prof.bigCount)
			}
		}
		if has["logs"] {
			e.waitCount(t, "SELECT count() FROM a_logs", 100)
		}
		if has["poison"] {
			// Only panic-every-1000 writes rows to adv: the others there
			// trap, loop or write nothing.
			e.waitCount(t, "SELECT count() FROM adv", prof.poison*1000-2*prof.poison)
		}
		// The classes that trap on every record go as fast as the
		// crash-loop policy lets them (a cool-down after each few traps),
		// which takes minutes for hundreds of records: wait on progress.
		// A partition commits a polled batch once all its records are
		// done, and a topic of small records is polled in one batch, so
		// the dead letters are the progress to watch until the commit.
		for _, p := range a {
			committed, end := committedOffsets(t, adm, "iso-"+run, p.topic())
			dead, _, _ := w.get(p.topic())
			for moved := time.Now(); committed < end; time.Sleep(200 * time.Millisecond) {
				c, n := committedOffsets(t, adm, "iso-"+run, p.topic())
				d, _, _ := w.get(p.topic())
				if c != committed || n != end || d != dead {
					committed, end, dead, moved = c, n, d, time.Now()
				}
				if time.Since(moved) > isoCommitStall {
					errorf("%s: tenant A's topic %s not committed to its end: %d of %d, %d dead-lettered, nothing for %v",
						p.class, p.topic(), committed, end, dead, isoCommitStall)
					break
				}
			}
		}
		if gone, err := mixedRun.Exited(); gone {
			errorf("%s: sluice exited: %v", run, err)
		}
		peak := mixedRun.PeakRSS()
		mixedRun.Drain(t)
		w.stop()
		bound := isoRSSBound(len(a), len(a))
		if peak > bound {
			errorf("%s: peak RSS %d MiB over the bound of %d MiB", run, peak>>20, bound>>20)
		}
		var classes []string
		for _, p := range a {
			classes = append(classes, p.class)
			n, first, cut := w.get(p.topic())
			contain := "-"
			if !first.IsZero() {
				contain = first.Sub(mixedRun.started).Round(time.Millisecond).String()
			}
			line := fmt.Sprintf("%-4s %-26s dead-lettered %5d of %5d (cut %d), first dead letter %s after start", run, p.class, n, len(p.values), cut, contain)
			switch p.name {
			case "grow", "flood", "mem", "stack":
				if n != len(p.values) {
					errorf("%s: %d of %d records dead-lettered", p.class, n, len(p.values))
				}
			case "crash":
				// At least once: across the rebalances a record that was
				// dead-lettered but not yet committed is dead-lettered again.
				if n < len(p.values) {
					errorf("%s: %d of %d records dead-lettered", p.class, n, len(p.values))
				}
				line += fmt.Sprintf("; member 2 joined %v", rebalanced)
			case "logs":
				if n != 1 || cut != 1 {
					errorf("%s: %d dead-lettered (%d cut), want the one record, cut", p.class, n, cut)
				}
			case "poison":
				if n != 2*prof.poison {
					errorf("%s: %d dead-lettered, want %d", p.class, n, 2*prof.poison)
				}
			case "initfail":
				rows := e.queryInt(t, "SELECT count() FROM a_events")
				if rows+n != len(p.values) {
					errorf("%s: %d rows and %d dead-lettered of %d records", p.class, rows, n, len(p.values))
				}
				line += fmt.Sprintf("; %d rows landed", rows)
			case "perm":
				line = fmt.Sprintf("%-4s %-26s %d rows landed after the table came back; /readyz said %q", run, p.class, permRecords, strings.TrimSpace(permReady))
			case "big":
				line = fmt.Sprintf("%-4s %-26s %d rows of %d bytes landed from %d-byte records", run, p.class, prof.bigCount, prof.bigBytes, len(p.values[0]))
			}
			table = append(table, line)
		}
		if has["grow"] {
			classes = append(classes, "5 compile bombs", "11 admin API")
			for _, a := range apiResults {
				table = append(table, fmt.Sprintf("%-4s 5 upload %-17s %d in %s", run, a.name, a.status, a.took.Round(time.Millisecond)))
				if a.status != http.StatusUnprocessableEntity {
					errorf("5 upload %s: status %d, want 422", a.name, a.status)
				}
			}
			table = append(table, fmt.Sprintf("%-4s 11 a path with .. and no token: %d; wrong tokens: %d of 30 got 429; stalled 8 MiB uploads still held: %d of %d",
				run, dotStatus, wrong429, stalledHeld, prof.stalled))
			if wrong429 < 15 {
				errorf("11 wrong tokens: only %d of 30 rate-limited", wrong429)
			}
			if dotStatus != http.StatusUnauthorized {
				errorf("11 a path with ..: %d without a token, want 401", dotStatus)
			}
		}
		return mixResult{name: run, classes: classes, res: res, peak: peak, bound: bound}
	}
	solo := func(run string) float64 {
		t.Helper()
		r := measure(run, nil, nil)
		r.r.Drain(t)
		checkB(run)
		t.Logf("%s: tenant B alone %.0f rows/s, peak RSS %d MiB", run, r.rate, r.r.PeakRSS()>>20)
		return r.rate
	}

	// Each mix is compared with the solo runs just before and after it,
	// so that a change in what else the machine runs moves both. A mix
	// under 80% runs again, up to twice, each time with a solo run after
	// it: a hostile class that slows B does so every time, a busy moment
	// (B's solo rate varies by 15% between runs on a quiet machine)
	// seldom three times in a row.
	before := solo("solo0")
	var mixes []mixResult
	for mi, names := range mixNames {
		for attempt := 1; ; attempt++ {
			run := fmt.Sprintf("mix%d", mi+1)
			if attempt > 1 {
				run += fmt.Sprintf("-again%d", attempt-1)
			}
			m := runMix(run, names)
			after := solo("solo-after-" + run)
			m.solo = (before + after) / 2
			before = after
			mixes = append(mixes, m)
			ratio := m.res.rate / m.solo
			if ratio >= 0.8 {
				break
			}
			if attempt == 3 {
				errorf("%s: tenant B at %.0f rows/s beside A, below 80%% of its solo %.0f rows/s, three times", run, m.res.rate, m.solo)
				break
			}
			t.Logf("%s: tenant B at %.1f%% of the solo runs beside it; running the mix once more", run, 100*ratio)
		}
	}
	t.Logf("isolation suite, profile %s:", prof.name)
	for _, m := range mixes {
		t.Logf("%s: B beside A %.0f rows/s (%.1f%% of the solo runs beside it, %.0f rows/s), peak RSS %d MiB (bound %d MiB): %s",
			m.name, m.res.rate, 100*m.res.rate/m.solo, m.solo, m.peak>>20, m.bound>>20, strings.Join(m.classes, ", "))
	}
	t.Logf("per class:\n%s", strings.Join(table, "\n"))
}

// isoMixes groups tenant A's hostile pipelines into the runs beside B, a
// few classes a run: on 2 cores, the CPU each hostile pipeline may burn
// (bounded per partition, not per tenant) adds up over A's pipelines.
var isoMixes = [][]string{
	{"grow", "flood", "mem", "stack"}, // and the admin API, on grow's pipeline
	{"crash"},                         // and the second member
	{"big", "logs", "perm"},
	{"initfail", "poison"},
}

type isoAPIResult struct {
	name   string
	status int
	took   time.Duration
}

// abuseAdmin is classes 5 and 11: stalled uploads held open while compile
// bombs are uploaded, a path with "..", and a flood of wrong tokens.
func abuseAdmin(t *testing.T, addr string, adv func(string) string, stalled int) (results []isoAPIResult, wrong429, dotStatus, held int) {
	base := "http://" + addr
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Before the wrong tokens: after them this client's wrong and missing
	// tokens are answered 429 (a right token is still accepted).
	if resp, err := noRedirect.Get(base + "/v1/tenants/acme/../../v1/tenants"); err == nil {
		dotStatus = resp.StatusCode
		resp.Body.Close()
	}
	var conns []net.Conn
	for range stalled {
		c, err := net.Dial("tcp", addr)
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
		start := time.Now()
		req, _ := http.NewRequest("POST", base+"/v1/tenants/acme/pipelines/grow/modules", bytes.NewReader(wasm))
		req.Header.Set("Authorization", "Bearer iso-acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("upload %s: %v", name, err)
			continue
		}
		resp.Body.Close()
		results = append(results, isoAPIResult{name, resp.StatusCode, time.Since(start)})
	}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil {
			held++ // neither answered nor closed: it waits for its body
		}
		c.Close()
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
	return results, wrong429, dotStatus, held
}

// isoConfig is the config of one run of the isolation suite: tenant B's
// pipeline when b, tenant A's hostile pipelines a when given.
func isoConfig(broker, chAddr, run, cacheDir, storeDir, obs, admin, logNormalize string, a []isoPipeline, b bool) *sluiceConfig {
	cfg := &sluiceConfig{
		Kafka: kafkaConfig{
			Brokers: []string{broker}, Group: "iso-" + run, CommitInterval: duration(500 * time.Millisecond),
			SessionTimeout: duration(10 * time.Second), RevokeTimeout: duration(10 * time.Second),
		},
		ClickHouse: clickhouseConfig{Addr: chAddr, RetryMax: duration(time.Second),
			PermanentRetryInterval: duration(time.Second)},
		DeadLetter:      deadLetterConfig{Topic: "dlq-" + run},
		Module:          moduleConfig{CacheDir: cacheDir},
		ShutdownTimeout: duration(30 * time.Second),
		Observability:   observabilityConfig{Listen: obs},
		Admin:           adminConfig{Listen: admin, StoreDir: storeDir, AdminTokens: []string{tokenHash("iso-admin")}},
	}
	if b {
		cfg.Tenants = append(cfg.Tenants, tenantConfig{
			ID: "beta", MaxInflightBytes: isoBudgetB, Limits: limitsConfig{MemoryBytes: isoMemB},
			Pipelines: []pipelineConfig{{Name: "logs", Topics: []string{"b-logs"}, Tables: []string{"logs"},
				Module: pipelineModuleConfig{Path: logNormalize}}},
		})
	}
	if len(a) > 0 {
		acme := tenantConfig{
			ID: "acme", Tokens: []string{tokenHash("iso-acme")}, MaxInflightBytes: isoBudgetA,
			Limits: limitsConfig{MemoryBytes: isoMemA, Deadline: duration(100 * time.Millisecond),
				MaxOutputBytes: isoMaxOutputA, MaxRecordBytes: 2 << 20},
			MaxTrapsPerMinute: 2, TrapCooldown: duration(5 * time.Second),
		}
		for _, p := range a {
			acme.Pipelines = append(acme.Pipelines, pipelineConfig{Name: p.name, Topics: []string{p.topic()}, Tables: []string{p.table},
				Module: pipelineModuleConfig{Path: p.module, Params: p.params}})
		}
		cfg.Tenants = append(cfg.Tenants, acme)
	}
	return cfg
}
