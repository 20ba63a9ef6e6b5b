package benchmarks

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// BenchmarkTracingOverhead drains the same prefilled topic through the
// pipeline with tracing off, at 1% sampling and at 100%, interleaved in one
// run, and reports for each the median landed rows/s and the median CPU
// time the benchmark process (the pipeline, in-process) spent per row. On
// a shared machine the CPU figure is the steadier measure of the cost.
// Spans go to a discarding exporter through the SDK's batch span processor,
// as in production, with a queue large enough that 100% drops none.
func BenchmarkTracingOverhead(b *testing.B) {
	const records, partitions = 200_000, 4
	ch := testinfra.ClickHouseT(b)
	kafka := testinfra.KafkaT(b)
	wasm := wasmbuild.BuildT(b, "examples/log-normalize")
	ddl, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), "examples/log-normalize/schema.sql"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := kafka.CreateTopic(ctx, "logs", partitions); err != nil {
		b.Fatal(err)
	}
	cl, err := kafka.NewClient(kgo.DefaultProduceTopic("logs"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < records; i++ {
		cl.Produce(ctx, &kgo.Record{Value: loggen.Generate(9, i).JSON}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	cache := b.TempDir()

	modes := []struct {
		name  string
		ratio float64 // <0: tracing off
	}{{"off", -1}, {"1pct", 0.01}, {"100pct", 1}}
	results := map[string][]float64{}
	cpuPerRow := map[string][]float64{}
	var batches []float64 // consume spans of each 100% run
	run := 0
	for i := 0; i < b.N; i++ {
		// Each round starts with the next mode, so that no mode always
		// runs right after the same one.
		for j := range modes {
			m := modes[(i+j)%len(modes)]
			run++
			table := fmt.Sprintf("logs_%d", run)
			if err := ch.Exec(ctx, strings.Replace(string(ddl), "CREATE TABLE logs", "CREATE TABLE "+table, 1)); err != nil {
				b.Fatal(err)
			}
			cfg := engine.Config{
				Kafka:  engine.KafkaConfig{Brokers: []string{kafka.Addr}, Group: table, Topics: []string{"logs"}},
				Module: engine.ModuleConfig{Path: wasm, Tables: []string{table}, Params: map[string]string{"table": table}, CacheDir: cache},
			}
			cfg.ClickHouse.Addr = ch.Addr
			cfg.Observability.Listen = "off"
			var opts []engine.Option
			var consumes atomic.Int64
			var tp *trace.TracerProvider
			if m.ratio < 0 {
				opts = append(opts, engine.WithTracerProvider(noop.NewTracerProvider()))
			} else {
				tp = trace.NewTracerProvider(
					trace.WithBatcher(discard{&consumes}, trace.WithMaxQueueSize(1<<16)),
					trace.WithSampler(trace.ParentBased(trace.TraceIDRatioBased(m.ratio))))
				opts = append(opts, engine.WithTracerProvider(tp))
			}
			runCtx, cancel := context.WithCancel(ctx)
			p, err := engine.New(runCtx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan error, 1)
			cpuStart := processCPU(b)
			start := time.Now()
			go func() { done <- p.Run(runCtx) }()
			for {
				out, err := ch.Query(ctx, "SELECT count() FROM "+table)
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := strconv.Atoi(strings.TrimSpace(out)); n >= records {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			elapsed := time.Since(start)
			cpu := processCPU(b) - cpuStart
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			if tp != nil {
				_ = tp.Shutdown(ctx)
			}
			if m.ratio == 1 {
				batches = append(batches, float64(consumes.Load()))
			}
			results[m.name] = append(results[m.name], float64(records)/elapsed.Seconds())
			cpuPerRow[m.name] = append(cpuPerRow[m.name], float64(cpu.Nanoseconds())/1e3/records)
			b.Logf("round %d %s: %.0f rows/s, %.2f µs CPU/row", i+1, m.name, float64(records)/elapsed.Seconds(), float64(cpu.Nanoseconds())/1e3/records)
		}
	}
	base, baseCPU := median(results["off"]), median(cpuPerRow["off"])
	for _, m := range modes {
		v, c := median(results[m.name]), median(cpuPerRow[m.name])
		b.ReportMetric(v, m.name+"_rows/s")
		b.ReportMetric(c, m.name+"_cpu_us/row")
		if m.name == "off" {
			continue
		}
		b.ReportMetric(100*(base-v)/base, m.name+"_cost_%")
		b.ReportMetric(100*(c-baseCPU)/baseCPU, m.name+"_cpu_cost_%")
		// Against the same round's off run, next to it in time: steadier
		// while the machine's load drifts.
		var paired []float64
		for i := range results[m.name] {
			paired = append(paired, 100*(results["off"][i]-results[m.name][i])/results["off"][i])
		}
		b.ReportMetric(median(paired), m.name+"_paired_cost_%")
	}
	// At 100% every polled batch has a consume span: the batches per run.
	b.ReportMetric(median(batches), "batches/run")
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// discard is a span exporter that drops spans after the SDK has built
// them, counting the consume spans.
type discard struct{ consumes *atomic.Int64 }

func (d discard) ExportSpans(_ context.Context, spans []trace.ReadOnlySpan) error {
	for _, s := range spans {
		if strings.HasPrefix(s.Name(), "process ") {
			d.consumes.Add(1)
		}
	}
	return nil
}
func (discard) Shutdown(context.Context) error { return nil }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
