package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// The fault suite runs the real sluice binary against the real broker and
// server and breaks things mid-stream. `go tool -modfile=tools/go.mod task faults` runs the full
// profile (SLUICE_FAULTS=full); `go test` runs a reduced one with the same
// scenarios and smaller volumes.
type faultProfile struct {
	records       int           // per scenario
	rate          int           // records/s while producing
	chOutage      time.Duration // ClickHouse down
	backlog       int           // records of the throttled-backlog scenario
	throttleBytes int64         // bytes/s to ClickHouse in that scenario
}

func faultProfileFromEnv() (string, faultProfile) {
	if os.Getenv("SLUICE_FAULTS") == "full" {
		return "full", faultProfile{records: 300_000, rate: 25_000, chOutage: 30 * time.Second, backlog: 5_000_000, throttleBytes: 4 << 20}
	}
	return "ci", faultProfile{records: 60_000, rate: 10_000, chOutage: 30 * time.Second, backlog: 400_000, throttleBytes: 2 << 20}
}

// The in-flight budget the fault runs use, and the RSS bound it implies:
// sluice sets the Go runtime's soft memory limit to 2 × budget + 192 MiB
// (memory_limit in docs/config.md), and 64 MiB more covers what lives
// outside the Go heap (compiled module code, thread stacks).
const (
	faultBudget   = 32 << 20
	faultRSSBound = 2*faultBudget + 192<<20 + 64<<20
)

type faultEnv struct {
	*env
	// eo runs the suite with delivery: exactly_once, into tables that keep
	// a deduplication window: every scenario must land each record once.
	eo   bool
	wasm string
	// report collects each scenario's line for the suite's summary.
	report []string
}

// scenario is one fault run: its own topic, table and consumer group.
type scenario struct {
	e      *faultEnv
	t      *testing.T
	name   string
	topic  string
	table  string
	dir    string
	chAddr string

	produced atomic.Int64
	procs    []*sluiceProc // every process started, for the peak RSS
}

func (e *faultEnv) scenario(t *testing.T, name string, partitions int) *scenario {
	t.Helper()
	s := &scenario{e: e, t: t, name: name, topic: "t_" + name, table: "logs_" + name, dir: t.TempDir(), chAddr: e.ch.Addr}
	ddl := logsDDL(t, s.table)
	if e.eo {
		ddl = withDedupWindow(ddl)
	}
	e.exec(t, ddl)
	e.createTopic(t, s.topic, partitions)
	return s
}

// faultConfig is a fault scenario's config for one instance.
func faultConfig(broker, chAddr, name, topic, table, wasm, cacheDir, instance string, eo bool) *sluiceConfig {
	cfg := &sluiceConfig{
		Kafka: kafkaConfig{
			Brokers: []string{broker}, Group: "g_" + name, Topics: []string{topic},
			MaxInflightBytes: faultBudget, CommitInterval: duration(500 * time.Millisecond),
			InstanceID: instance, SessionTimeout: duration(10 * time.Second),
		},
		Module:          moduleConfig{Path: wasm, Tables: []string{table}, Params: map[string]string{"table": table}, CacheDir: cacheDir},
		ClickHouse:      clickhouseConfig{Addr: chAddr, RetryMax: duration(time.Second)},
		ShutdownTimeout: duration(30 * time.Second),
		Observability:   observabilityConfig{Listen: "127.0.0.1:0"},
	}
	if eo {
		cfg.Delivery = "exactly_once"
	}
	return cfg
}

// start starts instance on the scenario's config, its output appended to
// the instance's log across restarts.
func (s *scenario) start(instance string) *sluiceProc {
	s.t.Helper()
	cfg := faultConfig(s.e.kafka.Addr, s.chAddr, s.name, s.topic, s.table, s.e.wasm, filepath.Join(s.dir, "cache"), instance, s.e.eo)
	p := runSluice(s.t, s.e.bin, s.dir, instance, cfg, false)
	s.procs = append(s.procs, p)
	return p
}

// peakRSS is the largest peak RSS of the scenario's processes.
func (s *scenario) peakRSS() int64 {
	var peak int64
	for _, p := range s.procs {
		peak = max(peak, p.PeakRSS())
	}
	return peak
}

// produce sends records [from, to) at rate records/s, in the background.
func (s *scenario) produce(from, to, rate int) <-chan error {
	done := make(chan error, 1)
	go func() {
		cl, err := s.e.kafka.NewClient(kgo.DefaultProduceTopic(s.topic), kgo.ProducerLinger(5*time.Millisecond),
			kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		if err != nil {
			done <- err
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		var failed atomic.Value
		for i := from; i < to; i++ {
			if rate > 0 && i%100 == 0 {
				due := start.Add(time.Duration(float64(i-from) / float64(rate) * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
			cl.Produce(ctx, &kgo.Record{Value: loggen.Generate(1, i).JSON}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Store(err)
					return
				}
				s.produced.Add(1)
			})
		}
		if err := cl.Flush(ctx); err != nil {
			done <- err
			return
		}
		if err, _ := failed.Load().(error); err != nil {
			done <- err
			return
		}
		done <- nil
	}()
	return done
}

func (s *scenario) count() (rows, distinct int) { return s.e.logRows(s.t, s.table) }

// waitDistinct waits until n distinct records have landed.
func (s *scenario) waitDistinct(n int, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, distinct := s.count()
		if distinct >= n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d of %d distinct records landed within %s", distinct, n, d)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// landed waits for the producer to finish and for its n records to land.
func (s *scenario) landed(produced <-chan error, n int) {
	s.t.Helper()
	if err := <-produced; err != nil {
		s.t.Fatal(err)
	}
	s.waitDistinct(n, 3*time.Minute)
}

// server is a test server that a scenario takes down.
type server interface {
	Stop() error
	Start(context.Context) error
}

// outage stops srv after the pipeline has run for after, and starts it
// again d later.
func (s *scenario) outage(srv server, after, d time.Duration) {
	s.t.Helper()
	time.Sleep(after)
	if err := srv.Stop(); err != nil {
		s.t.Fatal(err)
	}
	time.Sleep(d)
	if err := srv.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// report checks loss and logs the scenario's figures; it returns the
// duplicates.
func (s *scenario) report(want int) int {
	s.t.Helper()
	rows, distinct := s.count()
	dups := rows - distinct
	peak := s.peakRSS()
	line := fmt.Sprintf("%-24s produced %8d  landed distinct %8d  duplicates %6d  dead-lettered %d  peak RSS %4d MiB (budget %d MiB, bound %d MiB)",
		s.name, s.produced.Load(), distinct, dups, 0, peak>>20, faultBudget>>20, faultRSSBound>>20)
	s.t.Log(line)
	s.e.report = append(s.e.report, line)
	if int(s.produced.Load()) != want {
		s.t.Errorf("produced %d, want %d", s.produced.Load(), want)
	}
	if distinct != want {
		s.t.Errorf("LOSS: %d distinct records landed of %d produced", distinct, want)
	}
	if peak > faultRSSBound {
		s.t.Errorf("peak RSS %d MiB over the bound of %d MiB for a %d MiB budget", peak>>20, faultRSSBound>>20, faultBudget>>20)
	}
	return dups
}

func TestFaults(t *testing.T) {
	// Mostly waiting on outages and drains, with servers of their own: the
	// suite runs on each ClickHouse server of the matrix, beside the other
	// server's run and the chaos run.
	t.Parallel()
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		t.Parallel()
		faultSuite(t, server, false)
	})
}

// TestFaultsExactlyOnce is the fault suite with delivery: exactly_once on
// ClickHouse 26.9 (18.16 has no insert_deduplication_token, and the mode
// refuses it), plus a member frozen past its session while another takes
// its partitions: no scenario may land a record twice.
func TestFaultsExactlyOnce(t *testing.T) {
	testinfra.SkipShort(t)
	t.Parallel()
	faultSuite(t, testinfra.Modern, true)
}

func faultSuite(t *testing.T, server testinfra.Server, eo bool) {
	name, prof := faultProfileFromEnv()
	if eo {
		name += ", delivery exactly_once"
	}
	e := &faultEnv{
		eo:   eo,
		wasm: wasmbuild.BuildT(t, "examples/log-normalize"),
		env:  newEnv(t, testinfra.ClickHouseOptions{Server: server}),
	}
	t.Cleanup(func() {
		t.Logf("fault suite, profile %s, ClickHouse %s:\n%s", name, e.ch.Version, strings.Join(e.report, "\n"))
	})
	n := prof.records

	t.Run("kill9_x3", func(t *testing.T) {
		if e.eo {
			s := e.scenario(t, "kill9", 4)
			s.killsInFlight(n, 3)
			return
		}
		s := e.scenario(t, "kill9", 4)
		produced := s.produce(0, n, prof.rate)
		p := s.start("a")
		for i := 0; i < 3; i++ {
			time.Sleep(time.Duration(float64(n)/float64(prof.rate)/4*float64(time.Second)) + time.Second)
			p.Kill9()
			p = s.start("a")
		}
		s.landed(produced, n)
		p.Drain(t)
		dups := s.report(n)
		// Duplicates can only come from what was inserted but not yet
		// committed at each kill: at most three in-flight budgets' worth.
		if dups > 3*prof.rate*2 {
			t.Errorf("%d duplicates is more than three kills' in-flight records could explain", dups)
		}
	})

	t.Run("clickhouse_down", func(t *testing.T) {
		s := e.scenario(t, "chdown", 4)
		produced := s.produce(0, n, prof.rate)
		p := s.start("a")
		s.outage(e.ch, 2*time.Second, prof.chOutage)
		s.landed(produced, n)
		p.Drain(t)
		if dups := s.report(n); dups != 0 {
			if e.eo {
				t.Errorf("%d duplicates after a ClickHouse outage with exactly-once delivery, want 0", dups)
			}
			t.Logf("%d duplicates after the outage (retried inserts whose first attempt had landed)", dups)
		}
	})

	t.Run("broker_restart", func(t *testing.T) {
		s := e.scenario(t, "brokerrestart", 4)
		produced := s.produce(0, n, prof.rate)
		p := s.start("a")
		s.outage(e.kafka, 3*time.Second, 3*time.Second)
		s.landed(produced, n)
		p.Drain(t)
		if dups := s.report(n); dups != 0 && e.eo {
			t.Errorf("%d duplicates after a broker restart with exactly-once delivery, want 0", dups)
		}
	})

	t.Run("scale_out_and_in", func(t *testing.T) {
		s := e.scenario(t, "scaleout", 4)
		produced := s.produce(0, n, prof.rate)
		a := s.start("a")
		time.Sleep(time.Duration(float64(n) / float64(prof.rate) / 3 * float64(time.Second)))
		b := s.start("b")
		// b leaves only once it has joined and owns partitions: on a
		// loaded machine its join can take longer than the sleep.
		s.waitMembersAssigned(2, 2*time.Minute)
		time.Sleep(time.Duration(float64(n) / float64(prof.rate) / 3 * float64(time.Second)))
		b.Drain(t)
		s.landed(produced, n)
		a.Drain(t)
		if dups := s.report(n); dups != 0 {
			t.Errorf("%d duplicates across a clean join and leave, want 0", dups)
		}
	})

	t.Run("sigterm_restart", func(t *testing.T) {
		s := e.scenario(t, "sigterm", 4)
		produced := s.produce(0, n, prof.rate)
		p := s.start("a")
		time.Sleep(time.Duration(float64(n) / float64(prof.rate) / 2 * float64(time.Second)))
		p.Drain(t)
		p = s.start("a")
		s.landed(produced, n)
		p.Drain(t)
		if dups := s.report(n); dups != 0 {
			t.Errorf("%d duplicates across SIGTERM and restart, want 0", dups)
		}
	})

	t.Run("throttled_backlog", func(t *testing.T) {
		s := e.scenario(t, "backlog", 8)
		proxy := s.proxy()
		s.chAddr = proxy.Addr
		if err := <-s.produce(0, prof.backlog, 0); err != nil {
			t.Fatal(err)
		}
		proxy.SetRate(prof.throttleBytes)
		p := s.start("a")
		time.Sleep(15 * time.Second)
		proxy.SetRate(0)
		s.waitDistinct(prof.backlog, 5*time.Minute)
		p.Drain(t)
		if dups := s.report(prof.backlog); dups != 0 && e.eo {
			t.Errorf("%d duplicates after a throttled backlog with exactly-once delivery, want 0", dups)
		}
	})

	if !e.eo {
		return
	}
	t.Run("zombie", func(t *testing.T) {
		// Member a freezes (SIGSTOP) past its 10 s session with rows in
		// flight; b takes its partitions and replays what a recorded;
		// then a resumes, still believing it owns them, and finds itself
		// fenced. Nothing lands twice.
		s := e.scenario(t, "zombie", 4)
		// a's inserts take 1.5 s each way through a proxy, so that when
		// it freezes it has segments recorded and not yet landed: b must
		// replay them, and a's own inserts of them land meanwhile (the
		// proxy delivers what a had sent while a is frozen).
		proxy := s.proxy()
		// Records keep coming for 40 s: past the freeze, the session
		// timeout and the rebalance.
		produced := s.produce(0, n, n/40)
		s.chAddr = proxy.Addr
		a := s.start("a")
		s.chAddr = e.ch.Addr
		b := s.start("b")
		s.waitDistinct(n/40, time.Minute)
		proxy.SetLatency(1500 * time.Millisecond)
		time.Sleep(5 * time.Second)
		if err := a.Freeze(); err != nil {
			t.Fatal(err)
		}
		// Past the session timeout and the rebalance that follows it:
		// b commits every partition, a's included.
		s.waitAllCommitsMove(2 * time.Minute)
		if err := a.Thaw(); err != nil {
			t.Fatal(err)
		}
		s.landed(produced, n)
		a.Drain(t)
		b.Drain(t)
		if dups := s.report(n); dups != 0 {
			t.Errorf("%d duplicates after a member was frozen past its session and resumed, want 0", dups)
		}
		logA, logB := a.Log(), b.Log()
		if !strings.Contains(logA, "partitions lost") {
			t.Errorf("member a, frozen past its session, never logged that it lost its partitions")
		}
		if !strings.Contains(logB, "recorded segments to replay") {
			t.Errorf("member b never found segments a had recorded: the scenario did not test a replay")
		}
		t.Logf("member a: %d fenced commits or workers logged; member b: %d assignments with recorded segments to replay",
			strings.Count(logA, "fenced"), strings.Count(logB, "recorded segments to replay"))
	})
}

// killsInFlight is kill9_x3 for exactly-once delivery: records come for
// 30 s, and each kill -9 strikes once sluice is consuming, with inserts in
// flight (a proxy delays them 0.6 s a round trip) and so with segments
// recorded and not yet committed, which the next start must replay.
func (s *scenario) killsInFlight(n, kills int) {
	t := s.t
	proxy := s.proxy()
	s.chAddr = proxy.Addr
	produced := s.produce(0, n, n/30)
	p := s.start("a")
	open := 0
	for i := 0; i < kills; i++ {
		_, landed := s.count()
		s.waitDistinct(landed+n/30, 2*time.Minute)
		proxy.SetLatency(300 * time.Millisecond)
		time.Sleep(1500 * time.Millisecond)
		p.Kill9()
		proxy.SetLatency(0)
		open += s.recordedSegments()
		p = s.start("a")
	}
	s.landed(produced, n)
	p.Drain(t)
	dups := s.report(n)
	if dups != 0 {
		t.Errorf("%d duplicates after %d kills with exactly-once delivery, want 0", dups, kills)
	}
	// The log holds every start of instance a.
	replays := strings.Count(p.Log(), "recorded segments to replay")
	t.Logf("partitions with recorded segments at the kills: %d; assignments that found segments to replay: %d", open, replays)
	if open == 0 || replays == 0 {
		t.Errorf("no kill left a recorded segment to replay: the scenario did not test a replay")
	}
}

// proxy starts a proxy to ClickHouse for the scenario, closed when it
// ends.
func (s *scenario) proxy() *testinfra.Proxy {
	s.t.Helper()
	p, err := testinfra.StartProxy(s.e.ch.Addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { p.Close() })
	return p
}

// recordedSegments counts the scenario's partitions whose committed
// metadata lists exactly-once segments.
func (s *scenario) recordedSegments() int {
	s.t.Helper()
	adm := s.e.admin(s.t)
	var (
		resps kadm.OffsetResponses
		err   error
	)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if resps, err = adm.FetchOffsets(context.Background(), "g_"+s.name); err == nil {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatal(err)
		}
	}
	n := 0
	resps.Each(func(r kadm.OffsetResponse) {
		// "sluice-eo1|<shas>|<segments>": the list after the second bar.
		if f := strings.Split(r.Metadata, "|"); len(f) == 3 && f[0] == "sluice-eo1" && f[2] != "" {
			n++
		}
	})
	return n
}

// waitAllCommitsMove waits until the committed offset of every partition
// of the scenario's topic has moved past where it was when called.
func (s *scenario) waitAllCommitsMove(d time.Duration) {
	s.t.Helper()
	adm := s.e.admin(s.t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	committed := func() map[int32]int64 {
		out := map[int32]int64{}
		resps, err := adm.FetchOffsets(ctx, "g_"+s.name)
		if err != nil {
			return out
		}
		resps.Each(func(r kadm.OffsetResponse) {
			if r.Topic == s.topic && r.Err == nil {
				out[r.Partition] = r.At
			}
		})
		return out
	}
	start := committed()
	for {
		now := committed()
		moved := 0
		for part, at := range now {
			if at > start[part] {
				moved++
			}
		}
		if moved == len(now) && moved > 0 && moved >= len(start) {
			return
		}
		if ctx.Err() != nil {
			s.t.Fatalf("the committed offsets of %d of %d partitions moved within %s (from %v to %v)", moved, len(now), d, start, now)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitMembersAssigned waits until the scenario's consumer group is stable
// with n members that each own at least one partition.
func (s *scenario) waitMembersAssigned(n int, d time.Duration) {
	s.t.Helper()
	ok, last := waitGroup(s.e.admin(s.t), "g_"+s.name, d, nil, func(g groupState) bool {
		return g.state == "Stable" && g.members == n && g.owning == n
	})
	if !ok {
		s.t.Fatalf("group g_%s did not have %d members owning partitions within %s: %s", s.name, n, d, last)
	}
}
