package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// produceTo writes values to topic, round robin over its partitions.
func produceTo(t *testing.T, e *tenantEnv, topic string, values [][]byte, opts ...kgo.Opt) {
	t.Helper()
	opts = append(opts, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	cl, err := e.kafka.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var failed atomic.Value
	for _, v := range values {
		cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func logLines(seed uint64, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = loggen.Generate(seed, i).JSON
	}
	return out
}

// kafkaAdmin returns an admin client of e's broker and a function that
// closes it.
func kafkaAdmin(t *testing.T, e *tenantEnv) (*kadm.Client, func()) {
	t.Helper()
	cl, err := e.kafka.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

// topicOffsets returns the end offsets of topic's partitions and group's
// committed offsets.
func topicOffsets(t *testing.T, e *tenantEnv, group, topic string) (kadm.ListedOffsets, kadm.OffsetResponses) {
	t.Helper()
	adm, done := kafkaAdmin(t, e)
	defer done()
	ctx := context.Background()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	return ends, committed
}

// committedEnd reports whether group has committed every partition of
// topic to its end.
func committedEnd(t *testing.T, e *tenantEnv, group, topic string) bool {
	t.Helper()
	ends, committed := topicOffsets(t, e, group, topic)
	all := true
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.At < o.Offset {
			all = false
		}
	})
	return all
}

// waitProgress calls read every interval until it reports done, failing
// t with stuck's message only when read's value stays the same for stall:
// a loaded machine is slow, not stuck.
func waitProgress[V comparable](t *testing.T, interval, stall time.Duration, read func() (v V, done bool), stuck func(v V) string) {
	t.Helper()
	v, done := read()
	for lastMove := time.Now(); !done; {
		time.Sleep(interval)
		var now V
		if now, done = read(); now != v {
			v, lastMove = now, time.Now()
		}
		if !done && time.Since(lastMove) > stall {
			t.Fatal(stuck(v))
		}
	}
}

// waitCount polls a count query until it reaches want, failing only when
// it stops moving for a minute.
func waitCount(t *testing.T, e *tenantEnv, sql string, want int) {
	t.Helper()
	waitProgress(t, 100*time.Millisecond, time.Minute, func() (int, bool) {
		n := queryInt(t, e.ch, sql)
		return n, n >= want
	}, func(n int) string { return fmt.Sprintf("%s: %d of %d, no progress for a minute", sql, n, want) })
}

// TestContainment runs one tenant's hostile input beside another tenant's
// steady work on the real broker and server, one class at a time: the
// process never fails, the other tenant lands everything it produced, and
// the hostile tenant loses nothing either.
func TestContainment(t *testing.T) {
	topics := map[string]int{"a-logs": 2, "b-logs": 2, "dlq": 1}
	e := newTenantEnv(t, topics, readSchema(t), strings.Replace(readSchema(t), "CREATE TABLE logs", "CREATE TABLE a_logs", 1))
	logNormalize := wasmbuild.BuildT(t, "examples/log-normalize")
	tenant := func(id, topic, table string) engine.TenantConfig {
		return engine.TenantConfig{ID: id, Pipelines: []engine.TenantPipelineConfig{{Name: "logs",
			Topics: []string{topic}, Tables: []string{table},
			Module: engine.TenantModuleConfig{Path: logNormalize, Params: map[string]string{"table": table}}}}}
	}
	const perRun = 20_000

	// A record too large to be dead-lettered as it is (its copy is over the
	// producer's 1 MB batch limit) is dead-lettered cut, with its size and
	// origin; before, MESSAGE_TOO_LARGE stopped every tenant, and again on
	// every restart.
	t.Run("oversized poison record", func(t *testing.T) {
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
		poison := bytes.Repeat([]byte("not json "), 1_500_000/9)
		produceTo(t, e, "a-logs", append(logLines(1, 100), poison), kgo.ProducerBatchMaxBytes(4<<20))
		produceTo(t, e, "b-logs", logLines(2, perRun))

		cfg := e.config(t, "contain-dlq", tenant("acme", "a-logs", "a_logs"), tenant("beta", "b-logs", "logs"))
		p, stop := run(t, cfg)
		waitCount(t, e, "SELECT count() FROM logs", perRun)
		waitCount(t, e, "SELECT count() FROM a_logs", 100)
		for !committedEnd(t, e, "contain-dlq", "a-logs") {
			time.Sleep(100 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		if st := p.Stats(); st.DeadLettered != 1 {
			t.Errorf("dead-lettered %d, want the one poison record", st.DeadLettered)
		}
		recs := consumeAll(t, e, "dlq", 1)
		h := map[string]string{}
		for _, kv := range recs[0].Headers {
			h[kv.Key] = string(kv.Value)
		}
		if h[engine.HeaderTruncated] != strconv.Itoa(len(poison)) || h[engine.HeaderTopic] != "a-logs" ||
			h[engine.HeaderOffset] != "50" || h[engine.HeaderError] == "" {
			t.Errorf("cut copy's headers: %v", h)
		}
		if len(recs[0].Value) == 0 || len(recs[0].Value) >= len(poison) || !bytes.HasPrefix(poison, recs[0].Value) {
			t.Errorf("cut copy's value is %d bytes, want a prefix of the %d-byte record", len(recs[0].Value), len(poison))
		}
	})

	// A permanent insert error on one tenant's table (here: the table is
	// dropped while it runs) holds back only that tenant, visibly; once
	// the table is back, its rows land. Before, the error stopped every
	// tenant.
	t.Run("permanent insert error", func(t *testing.T) {
		ctx := context.Background()
		for _, q := range []string{"TRUNCATE TABLE logs", "TRUNCATE TABLE a_logs"} {
			if err := e.ch.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		cfg := e.config(t, "contain-perm", tenant("acme", "a-logs", "a_logs"), tenant("beta", "b-logs", "logs"))
		cfg.ClickHouse.PermanentRetryInterval = 500 * time.Millisecond
		p, stop := run(t, cfg)
		// The group starts at the beginning: what the first subtest
		// produced lands first.
		waitCount(t, e, "SELECT count() FROM logs", perRun)
		waitCount(t, e, "SELECT count() FROM a_logs", 100)
		if err := e.ch.Exec(ctx, "DROP TABLE a_logs"); err != nil {
			t.Fatal(err)
		}
		produceTo(t, e, "a-logs", logLines(3, 500))
		produceTo(t, e, "b-logs", logLines(4, perRun))
		waitCount(t, e, "SELECT count() FROM logs", 2*perRun)
		for {
			ok, why := p.Ready()
			if !ok && strings.Contains(why, "a_logs") {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if committedEnd(t, e, "contain-perm", "a-logs") {
			t.Fatal("acme's offsets were committed past rows that could not be inserted")
		}
		if err := e.ch.Exec(ctx, strings.Replace(readSchema(t), "CREATE TABLE logs", "CREATE TABLE a_logs", 1)); err != nil {
			t.Fatal(err)
		}
		waitCount(t, e, "SELECT count() FROM a_logs", 500)
		for !committedEnd(t, e, "contain-perm", "a-logs") || !committedEnd(t, e, "contain-perm", "b-logs") {
			time.Sleep(100 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatalf("pipeline: %v", err)
		}
		if got := queryInt(t, e.ch, "SELECT count() FROM a_logs"); got != 500 {
			t.Errorf("a_logs has %d rows after it came back, want the 500 produced while it was gone", got)
		}
	})
}

// consumeAll reads n records from topic from the start.
func consumeAll(t *testing.T, e *tenantEnv, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := e.kafka.NewClient(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("%d of %d records from %s: %v", len(out), n, topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) != n {
		t.Fatalf("%s has %d records, want %d", topic, len(out), n)
	}
	return out
}

// TestPoisonRecordsDoNotTripCrashLoop: 10 records that trap, among 10,000,
// are found by bisection and dead-lettered without pausing the partition:
// the crash-loop budget counts poison records, not bisection steps. Before,
// every step counted, and the ten took five 30-second cool-downs.
func TestPoisonRecordsDoNotTripCrashLoop(t *testing.T) {
	const n = 10_000
	e := newTenantEnv(t, map[string]int{"adv": 1, "dlq": 1},
		"CREATE TABLE adv (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset")
	panicky := wasmbuild.BuildT(t, "examples/adversarial/panic-every-1000")
	values := make([][]byte, n)
	traps := 0
	for i := range values {
		values[i] = []byte(fmt.Sprintf("record %d", i))
		if i%1000 == 500 {
			values[i] = []byte("trap")
			traps++
		}
	}
	produceTo(t, e, "adv", values)
	cfg := e.config(t, "poison", engine.TenantConfig{ID: "acme", Pipelines: []engine.TenantPipelineConfig{{Name: "adv",
		Topics: []string{"adv"}, Tables: []string{"adv"}, Module: engine.TenantModuleConfig{Path: panicky}}}})
	cfg.Module.MaxTrapsPerMinute = 20
	p, stop := run(t, cfg)
	// Offsets 999 mod 1000 are record errors (a recovered panic), the
	// "trap" records real traps: both are dead-lettered, the rest lands.
	want := n - traps - n/1000
	waitCount(t, e, "SELECT count() FROM adv", want)
	for !committedEnd(t, e, "poison", "adv") {
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if st.ModulePauses != 0 {
		t.Errorf("the partition cooled down %d times for %d poison records under a budget of 20", st.ModulePauses, traps)
	}
	if st.DeadLettered != int64(traps+n/1000) {
		t.Errorf("dead-lettered %d, want %d", st.DeadLettered, traps+n/1000)
	}
	if st.Traps < int64(traps) {
		t.Errorf("%d instance failures counted, want at least the %d traps", st.Traps, traps)
	}
	if got := queryInt(t, e.ch, "SELECT count() FROM adv WHERE value = 'trap'"); got != 0 {
		t.Errorf("%d trap records landed", got)
	}
	if got := queryInt(t, e.ch, "SELECT uniqExact(offset) FROM adv"); got != want {
		t.Errorf("%d distinct offsets landed, want %d", got, want)
	}
}

// TestReadinessNamesMissingTopic: a configured topic that does not exist
// makes /readyz say so (before: 200, and nothing logged, while nothing was
// consumed from it); once it is created, it is consumed.
func TestReadinessNamesMissingTopic(t *testing.T) {
	e := newEnv(t, "logs", 1)
	cfg := e.config(t, "missing-topic", "logs")
	cfg.Kafka.Topics = []string{"logs", "later"}
	p, stop := run(t, cfg)
	for {
		ok, why := p.Ready()
		if !ok && strings.Contains(why, "topics do not exist: later") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := e.kafka.CreateTopic(context.Background(), "later", 1); err != nil {
		t.Fatal(err)
	}
	produceLines(t, e.kafka, "later", 5, 1000)
	waitRows(t, e.ch, 1000, time.Minute)
	for {
		if _, why := p.Ready(); !strings.Contains(why, "topics do not exist") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
