package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// chaosEnv is what every seed shares: the servers, the binary, the modules.
type chaosEnv struct {
	*env
	v1       string // engine/testdata/versioned, version v1
	initFail string // examples/adversarial/init-fails-later
	cacheDir string
}

const (
	chaosAcmeToken = "chaos-acme-token"
	chaosAdmToken  = "chaos-admin-token"
	// chaosBigValue is the size of the record the dead-letter producer
	// cannot send as is: over franz-go's default 1,000,012-byte batch limit,
	// under the source topic's max.message.bytes.
	chaosBigValue = 1_500_000
)

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
	for _, tn := range []chaosTenant{r.acme, r.beta} {
		ddl := fmt.Sprintf(eventsDDL, tn.table)
		if prof.eo {
			ddl = withDedupWindow(ddl)
		}
		env.exec(t, "DROP TABLE IF EXISTS "+tn.table, ddl)
		env.createTopic(t, tn.topic, 4)
	}
	env.createTopic(t, r.dlq, 1)
	r.admin = env.admin(t, kgo.RequestRetries(2), kgo.RetryTimeout(5*time.Second))
	// beta's topic takes the oversized record.
	env.allowRecordBytes(t, r.admin, r.beta.topic, 4<<20)
	var err error
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

// config is instance name's config: both tenants, the admin API on
// adminAddr.
func (r *chaosRun) config(name, adminAddr string) *sluiceConfig {
	pipeline := func(tn chaosTenant) []pipelineConfig {
		return []pipelineConfig{{Name: "events", Topics: []string{tn.topic}, Tables: []string{tn.table},
			Module: pipelineModuleConfig{Path: r.env.v1, Params: map[string]string{"table": tn.table}}}}
	}
	cfg := &sluiceConfig{
		Kafka: kafkaConfig{
			Brokers: []string{r.env.kafka.Addr}, Group: r.group, InstanceID: "chaos-" + name,
			SessionTimeout: duration(6 * time.Second), CommitInterval: duration(250 * time.Millisecond),
			RevokeTimeout: duration(10 * time.Second), MaxInflightBytes: 32 << 20,
		},
		ClickHouse:      clickhouseConfig{Addr: r.env.ch.Addr, RetryMax: duration(time.Second)},
		DeadLetter:      deadLetterConfig{Topic: r.dlq},
		Module:          moduleConfig{CacheDir: r.env.cacheDir},
		Observability:   observabilityConfig{Listen: "off"},
		ShutdownTimeout: duration(r.prof.shutdown),
		Admin: adminConfig{Listen: adminAddr, StoreDir: filepath.Join(r.dir, "store-"+name),
			AdminTokens: []string{tokenHash(chaosAdmToken)}},
		Tenants: []tenantConfig{
			{ID: r.acme.id, Tokens: []string{tokenHash(chaosAcmeToken)}, Limits: limitsConfig{Deadline: duration(2 * time.Second)},
				MaxTrapsPerMinute: 5, TrapCooldown: duration(3 * time.Second), Pipelines: pipeline(r.acme)},
			{ID: r.beta.id, Limits: limitsConfig{MaxRecordBytes: 1 << 20}, Pipelines: pipeline(r.beta)},
		},
	}
	if r.prof.eo {
		cfg.Delivery = "exactly_once"
	}
	return cfg
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
	if ok, last := waitGroup(r.admin, r.group, d, nil, func(g groupState) bool { return g.members >= n && g.state == "Stable" }); ok {
		r.logf("group %s: %s", r.group, last)
	} else {
		r.logf("group %s: not %d stable members within %s: %s", r.group, n, d, last)
	}
}
