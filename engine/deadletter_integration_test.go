package engine_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// env is a real broker, a real server with the logs table, and the
// log-normalize module.
type env struct {
	ch    *testinfra.ClickHouse
	kafka *testinfra.Kafka
	wasm  string
}

func newEnv(t *testing.T, topic string, partitions int) *env {
	t.Helper()
	return newEnvOn(t, "", topic, partitions)
}

// newEnvOn is newEnv on the given ClickHouse server ("" for the default).
func newEnvOn(t *testing.T, server testinfra.Server, topic string, partitions int) *env {
	t.Helper()
	e := &env{
		wasm:  wasmbuild.BuildT(t, "examples/log-normalize"),
		ch:    testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: server}),
		kafka: testinfra.KafkaT(t),
	}
	ctx := context.Background()
	if err := e.ch.Exec(ctx, readSchema(t)); err != nil {
		t.Fatal(err)
	}
	if err := e.kafka.CreateTopic(ctx, topic, partitions); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) config(t *testing.T, group, topic string) engine.Config {
	cfg := engine.Config{
		Kafka:  engine.KafkaConfig{Brokers: []string{e.kafka.Addr}, Group: group, Topics: []string{topic}},
		Module: engine.ModuleConfig{Path: e.wasm, Tables: []string{"logs"}, CacheDir: t.TempDir()},
	}
	cfg.ClickHouse.Addr = e.ch.Addr
	return cfg
}

// run starts the pipeline and returns a stop function that drains it and
// returns Run's error.
func run(t *testing.T, cfg engine.Config, opts ...engine.Option) (*engine.Pipeline, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := engine.New(ctx, cfg, testLogger(t), opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatal("pipeline did not drain within 60s")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return p, stop
}

// waitRows waits until the logs table has want rows, giving up when none
// lands for d: a loaded machine is slow, not stuck.
func waitRows(t *testing.T, ch *testinfra.ClickHouse, want int, d time.Duration) int {
	t.Helper()
	var n int
	waitProgress(t, 200*time.Millisecond, d, func() (int, bool) {
		n = queryInt(t, ch, "SELECT count() FROM logs")
		return n, n >= want
	}, func(n int) string { return fmt.Sprintf("%d of %d rows landed, none for %s", n, want, d) })
	return n
}

// TestDeadLetter sends records the module rejects to the dead-letter topic
// with the reason and origin in headers, while every other record lands.
func TestDeadLetter(t *testing.T) {
	const topic, dlqTopic, n = "logs", "logs-dlq", 5000
	e := newEnv(t, topic, 2)
	ctx := context.Background()
	if err := e.kafka.CreateTopic(ctx, dlqTopic, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := e.kafka.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string]bool{}
	for i := 0; i < n; i++ {
		v := loggen.Generate(3, i).JSON
		if i%100 == 7 {
			v = []byte("not json #" + strconv.Itoa(i))
			bad[string(v)] = true
		}
		r := &kgo.Record{Value: v, Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()

	cfg := e.config(t, "dlq-test", topic)
	cfg.DeadLetter.Topic = dlqTopic
	p, stop := run(t, cfg)
	waitRows(t, e.ch, n-len(bad), 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if got := queryInt(t, e.ch, "SELECT count() FROM logs"); got != n-len(bad) {
		t.Errorf("landed %d rows, want %d", got, n-len(bad))
	}
	if st := p.Stats(); st.DeadLettered != int64(len(bad)) || st.RecordsIn != n {
		t.Errorf("stats: dead-lettered %d (want %d), records in %d (want %d)", st.DeadLettered, len(bad), st.RecordsIn, n)
	}

	// Read the dead-letter topic back.
	consumer, err := e.kafka.NewClient(kgo.ConsumeTopics(dlqTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < len(bad) && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := consumer.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got++
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if !bad[string(r.Value)] {
				t.Errorf("dead-lettered a good record: %q", r.Value)
			}
			if h[engine.HeaderError] == "" || h[engine.HeaderModule] != "log-normalize" ||
				len(h[engine.HeaderModuleVersion]) != 64 || h[engine.HeaderTopic] != topic ||
				h[engine.HeaderPartition] == "" || h[engine.HeaderOffset] == "" || h[engine.HeaderTimestamp] == "" {
				t.Errorf("headers incomplete: %v", h)
			}
			if h["traceparent"] == "" {
				t.Errorf("trace context lost: %v", h)
			}
		})
	}
	if got != len(bad) {
		t.Errorf("dead-letter topic has %d records, want %d", got, len(bad))
	}
}

// TestBackpressureBoundsInflight stops ClickHouse while records keep
// arriving: fetching pauses at the in-flight budget instead of buffering,
// and everything lands once the server is back.
func TestBackpressureBoundsInflight(t *testing.T) {
	const topic, n = "logs", 60_000
	e := newEnv(t, topic, 4)
	cfg := e.config(t, "bp-test", topic)
	cfg.Kafka.MaxInflightBytes = 2 << 20
	cfg.Kafka.FetchMaxBytes = 256 << 10
	cfg.Kafka.MaxPollRecords = 500
	cfg.ClickHouse.QueueCapacity = 2
	cfg.ClickHouse.ChunkBytes = 128 << 10
	cfg.ClickHouse.RetryMax = 500 * time.Millisecond

	if err := e.ch.Stop(); err != nil {
		t.Fatal(err)
	}
	// Start with the server down: New needs it, so start it, build the
	// pipeline, then stop it before producing.
	if err := e.ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, stop := run(t, cfg)
	if err := e.ch.Stop(); err != nil {
		t.Fatal(err)
	}
	produceLines(t, e.kafka, topic, 11, n)
	time.Sleep(3 * time.Second)
	st := p.Stats()
	if st.Pauses == 0 {
		t.Errorf("fetching never paused while ClickHouse was down: %+v", st)
	}
	// The budget is checked after each poll, so the records taken in exceed
	// it by at most one poll: 500 log lines of under 300 bytes, each
	// counted 2× + 256. The rows the module makes of the records taken in
	// count too, as they are made: log-normalize's rows of a line (its
	// message, template and attributes) are under twice the line.
	limit := cfg.Kafka.MaxInflightBytes + 500*(2*300+256) + st.RecordsIn*2*300
	if st.PeakInflightBytes > limit {
		t.Errorf("peak in-flight %d bytes, over budget %d + one poll + the rows of %d records (%d)", st.PeakInflightBytes, cfg.Kafka.MaxInflightBytes, st.RecordsIn, limit)
	}
	// A record counts its data twice and 256 bytes until its batch is
	// transformed, then its data once until every batch fetched with it
	// is transformed (fetchGroup), and its rows until they land. With
	// the server down the rows stay, and log-normalize's rows of a line
	// (its message twice, as message and template, and its attributes)
	// are no shorter than the line, so no record counts less than its
	// value: the records taken in are at most what the budget and one
	// poll hold of the shortest line.
	shortest := math.MaxInt
	for i := range n {
		shortest = min(shortest, len(loggen.Generate(11, i).JSON))
	}
	if admits := (cfg.Kafka.MaxInflightBytes + 500*(2*300+256)) / int64(shortest); st.RecordsIn > admits {
		t.Errorf("%d records taken in: more than the budget admits (%d of %d bytes or more)", st.RecordsIn, admits, shortest)
	}
	if st.RecordsIn >= n {
		t.Errorf("all %d records were taken in while the server was down; nothing held back", st.RecordsIn)
	}
	t.Logf("while down: records in %d, peak in-flight %d bytes (budget %d), pauses %d", st.RecordsIn, st.PeakInflightBytes, cfg.Kafka.MaxInflightBytes, st.Pauses)
	if err := e.ch.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitRows(t, e.ch, n, 2*time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	seq := "toUInt64(attrs.value[indexOf(attrs.key, 'seq')])"
	if got := queryInt(t, e.ch, "SELECT uniqExact("+seq+") FROM logs"); got != n {
		t.Errorf("distinct rows %d, want %d", got, n)
	}
	if st := p.Stats(); st.Resumes == 0 {
		t.Errorf("fetching never resumed: %+v", st)
	}
}
