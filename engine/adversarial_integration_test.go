package engine_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

const advTable = "CREATE TABLE %s (offset UInt64, value String) ENGINE = MergeTree ORDER BY offset"

// TestAdversarialModules runs each misbehaving module through the real
// pipeline: the good records land, the bad ones are dead-lettered with the
// reason, the process keeps running, and produced = landed + dead-lettered.
func TestAdversarialModules(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	kafka := testinfra.KafkaT(t)
	ctx := context.Background()

	for _, tc := range []struct {
		module string
		bad    func(i int) string // the value of record i if it is bad, else ""
		reason string             // in the dead-letter error header
		// deadline is short for the infinite loop, to keep the test quick,
		// and long for the others so that under load nothing else hits it.
		deadline time.Duration
	}{
		{"infinite-loop", every(250, "loop"), "deadline exceeded", 300 * time.Millisecond},
		{"memory-bomb", every(300, "bomb"), "memory limit", 10 * time.Second},
		{"malformed-rows", every(200, "bad"), "row ends inside a value", 10 * time.Second},
		{"proc-exit", every(400, "exit"), "proc_exit(3)", 10 * time.Second},
		// The module panics on offsets ending in 999, whatever the value.
		{"panic-every-1000", every(1000, "x"), "panic", 10 * time.Second},
	} {
		t.Run(tc.module, func(t *testing.T) {
			const n = 2000
			name := strings.ReplaceAll(tc.module, "-", "_")
			topic, dlq, table := "adv_"+name, "adv_"+name+"_dlq", "adv"
			_ = ch.Exec(ctx, "DROP TABLE IF EXISTS adv")
			if err := ch.Exec(ctx, fmt.Sprintf(advTable, table)); err != nil {
				t.Fatal(err)
			}
			if err := kafka.CreateTopic(ctx, topic, 1); err != nil {
				t.Fatal(err)
			}
			if err := kafka.CreateTopic(ctx, dlq, 1); err != nil {
				t.Fatal(err)
			}
			cl, err := kafka.NewClient(kgo.DefaultProduceTopic(topic))
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for i := 0; i < n; i++ {
				v := fmt.Sprintf("ok-%d", i)
				if b := tc.bad(i); b != "" {
					v = b
					bad++
				}
				cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			cl.Close()

			cfg := engine.Config{
				Kafka: engine.KafkaConfig{Brokers: []string{kafka.Addr}, Group: "g_" + name, Topics: []string{topic}},
				Module: engine.ModuleConfig{
					Path: wasmbuild.BuildT(t, "examples/adversarial/"+tc.module), Tables: []string{table},
					CacheDir: t.TempDir(), MaxTrapsPerMinute: 1000,
					Limits: engine.ModuleLimits{Deadline: tc.deadline, MemoryBytes: 64 << 20},
				},
				DeadLetter: engine.DeadLetterConfig{Topic: dlq},
			}
			cfg.ClickHouse.Addr = ch.Addr
			cfg.Observability.Listen = "off"
			p, stop := run(t, cfg)
			deadline := time.Now().Add(3 * time.Minute)
			for {
				st := p.Stats()
				if st.DeadLettered == int64(bad) && st.Sink.InsertedRows == int64(n-bad) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("stats after 3 minutes: %+v (want %d dead-lettered, %d inserted)", st, bad, n-bad)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err := stop(); err != nil {
				t.Fatalf("pipeline stopped with %v; it must keep running", err)
			}
			landed := queryInt(t, ch, "SELECT count() FROM adv")
			distinct := queryInt(t, ch, "SELECT uniqExact(offset) FROM adv")
			badLanded := queryInt(t, ch, "SELECT count() FROM adv WHERE NOT startsWith(value, 'ok-')")
			if landed != n-bad || distinct != n-bad || badLanded != 0 {
				t.Errorf("landed %d (distinct %d, bad %d), want %d good rows", landed, distinct, badLanded, n-bad)
			}

			consumer, err := kafka.NewClient(kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			got := 0
			for got < bad {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				fs := consumer.PollFetches(pctx)
				cancel()
				if pctx.Err() != nil && fs.NumRecords() == 0 {
					break
				}
				fs.EachRecord(func(r *kgo.Record) {
					got++
					h := map[string]string{}
					for _, kv := range r.Headers {
						h[kv.Key] = string(kv.Value)
					}
					if strings.HasPrefix(string(r.Value), "ok-") {
						t.Errorf("good record dead-lettered: %q (%s)", r.Value, h[engine.HeaderError])
					}
					if !strings.Contains(h[engine.HeaderError], tc.reason) {
						t.Errorf("dead-letter error %q does not mention %q", h[engine.HeaderError], tc.reason)
					}
					if h[engine.HeaderModule] != tc.module || h[engine.HeaderTopic] != topic || h[engine.HeaderOffset] == "" {
						t.Errorf("dead-letter headers: %v", h)
					}
				})
			}
			if got != bad {
				t.Errorf("dead-letter topic has %d records, want %d", got, bad)
			}
			t.Logf("%s: produced %d = landed %d + dead-lettered %d; instance failures %d", tc.module, n, landed, got, p.Stats().Traps)
		})
	}
}

// TestForbiddenImportRefused: a module importing what the sandbox does not
// provide never starts; the pipeline refuses it at startup, naming the import.
func TestForbiddenImportRefused(t *testing.T) {
	ch := testinfra.ClickHouseT(t)
	kafka := testinfra.KafkaT(t)
	if err := ch.Exec(context.Background(), fmt.Sprintf(advTable, "adv")); err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{
		Kafka:  engine.KafkaConfig{Brokers: []string{kafka.Addr}, Group: "g", Topics: []string{"adv"}},
		Module: engine.ModuleConfig{Path: wasmbuild.BuildT(t, "examples/adversarial/forbidden-import"), Tables: []string{"adv"}, CacheDir: "off"},
	}
	cfg.ClickHouse.Addr = ch.Addr
	_, err := engine.New(context.Background(), cfg, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), "imports env.whatever") {
		t.Fatalf("err = %v, want a refusal naming env.whatever", err)
	}
}

func every(k int, v string) func(int) string {
	return func(i int) string {
		if i%k == k-1 {
			return v
		}
		return ""
	}
}
