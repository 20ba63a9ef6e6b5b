package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

func readSchema(t *testing.T) string {
	t.Helper()
	ddl, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	return string(ddl)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func produceLines(t *testing.T, k *testinfra.Kafka, topic string, seed uint64, n int) {
	t.Helper()
	cl, err := k.NewClient(kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		r := &kgo.Record{Value: loggen.Generate(seed, i).JSON}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Errorf("produce: %v", err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func queryInt(t *testing.T, ch *testinfra.ClickHouse, sql string) int {
	t.Helper()
	out, err := ch.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("%s: %q is not a number", sql, out)
	}
	return n
}

// TestPipelineEndToEnd moves 200,000 log lines over 4 partitions from a real
// broker through the log-normalize module into a real ClickHouse server, on
// each server of the matrix.
func TestPipelineEndToEnd(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		const (
			records    = 200_000
			partitions = 4
			topic      = "logs"
			seed       = 7
		)
		wasm := wasmbuild.BuildT(t, "examples/log-normalize")
		ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: server})
		kafka := testinfra.KafkaT(t)
		ctx := context.Background()
		if err := ch.Exec(ctx, readSchema(t)); err != nil {
			t.Fatal(err)
		}
		if err := kafka.CreateTopic(ctx, topic, partitions); err != nil {
			t.Fatal(err)
		}
		produceLines(t, kafka, topic, seed, records)

		cfg := engine.Config{
			Kafka:  engine.KafkaConfig{Brokers: []string{kafka.Addr}, Group: "e2e", Topics: []string{topic}},
			Module: engine.ModuleConfig{Path: wasm, Tables: []string{"logs"}, CacheDir: t.TempDir()},
		}
		cfg.ClickHouse.Addr = ch.Addr
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		p, err := engine.New(runCtx, cfg, testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx) }()

		deadline := time.Now().Add(3 * time.Minute)
		landed := 0
		for landed < records && time.Now().Before(deadline) {
			select {
			case err := <-done:
				t.Fatalf("pipeline stopped early: %v", err)
			case <-time.After(250 * time.Millisecond):
			}
			landed = queryInt(t, ch, "SELECT count() FROM logs")
		}
		if landed < records {
			t.Fatalf("only %d of %d rows landed within the deadline", landed, records)
		}
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("drain: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("pipeline did not drain within 60s")
		}

		if n := queryInt(t, ch, "SELECT count() FROM logs"); n != records {
			t.Errorf("rows = %d, want exactly %d", n, records)
		}
		seqExpr := "toUInt64(attrs.value[indexOf(attrs.key, 'seq')])"
		if n := queryInt(t, ch, "SELECT uniqExact("+seqExpr+") FROM logs"); n != records {
			t.Errorf("distinct seq = %d, want %d", n, records)
		}

		// A sample of rows equals the values the generator says normalizing
		// must produce.
		for _, i := range []int{0, 1, 2, 3, 99, 1234, 50_000, 123_457, 199_999} {
			want := loggen.Generate(seed, i)
			out, err := ch.Query(ctx, fmt.Sprintf(
				"SELECT toUnixTimestamp(ts), service, level, template, fingerprint, msg, "+
					"arrayStringConcat(arrayMap((k, v) -> concat(k, '=', v), attrs.key, attrs.value), ',') "+
					"FROM logs WHERE %s = %d FORMAT TSV", seqExpr, i))
			if err != nil {
				t.Fatal(err)
			}
			var attrs []string
			for _, k := range slices.Sorted(maps.Keys(want.Attrs)) {
				attrs = append(attrs, k+"="+want.Attrs[k])
			}
			wantRow := strings.Join([]string{
				strconv.FormatInt(want.TS.Unix(), 10), want.Service, want.Level, want.Template,
				strconv.FormatUint(want.Fingerprint, 10), tsvEscape(want.Msg), tsvEscape(strings.Join(attrs, ",")),
			}, "\t")
			if got := strings.TrimRight(out, "\n"); got != wantRow {
				t.Errorf("row seq=%d:\n got %q\nwant %q", i, got, wantRow)
			}
		}

		// Committed offsets equal each partition's end offset.
		adm := kadm.NewClient(mustClient(t, kafka))
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := adm.FetchOffsets(ctx, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(topic, o.Partition)
			if !ok {
				t.Errorf("partition %d: no committed offset", o.Partition)
				return
			}
			if c.At != o.Offset {
				t.Errorf("partition %d: committed %d, end offset %d", o.Partition, c.At, o.Offset)
			}
			total += o.Offset
		})
		if total != records {
			t.Errorf("end offsets sum to %d, want %d", total, records)
		}
	})
}

func mustClient(t *testing.T, k *testinfra.Kafka) *kgo.Client {
	t.Helper()
	cl, err := k.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func tsvEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`)
	return r.Replace(s)
}
