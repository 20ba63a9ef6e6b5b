// Command demo runs the log-normalize example end to end on this machine:
// it starts a private ClickHouse server and Kafka broker, produces sample log
// lines, runs sluice until every line has landed, prints what ClickHouse
// holds, and stops everything it started.
//
// Run it with `go tool -modfile=tools/go.mod task demo`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
)

func main() {
	sluiceBin := flag.String("sluice", "bin/sluice", "path of the sluice binary")
	module := flag.String("module", "examples/log-normalize/log-normalize.wasm", "path of the log-normalize module")
	schema := flag.String("schema", "examples/log-normalize/schema.sql", "DDL of the logs table")
	lines := flag.Int("lines", 100_000, "log lines to produce")
	partitions := flag.Int("partitions", 4, "partitions of the logs topic")
	flag.Parse()
	if err := run(*sluiceBin, *module, *schema, *lines, *partitions); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(sluiceBin, module, schemaPath string, lines, partitions int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	started := time.Now()

	ddl, err := os.ReadFile(schemaPath)
	if err != nil {
		return err
	}
	step("starting ClickHouse and Kafka")
	chs, err := testinfra.StartClickHouse(ctx, testinfra.ClickHouseOptions{})
	if err != nil {
		return err
	}
	defer chs.Close()
	kafka, err := testinfra.StartKafka(ctx, testinfra.KafkaOptions{})
	if err != nil {
		return err
	}
	defer kafka.Close()
	fmt.Printf("    ClickHouse %s (native), Kafka %s\n", chs.Addr, kafka.Addr)

	if err := chs.Exec(ctx, string(ddl)); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	if err := kafka.CreateTopic(ctx, "logs", partitions); err != nil {
		return err
	}

	step("producing %d log lines to topic logs (%d partitions)", lines, partitions)
	if err := produce(ctx, kafka, lines); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "sluice-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	absModule, err := filepath.Abs(module)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "pipeline.yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: sluice-demo
  topics: [logs]
module:
  path: %s
  tables: [logs]
  cache_dir: %s
clickhouse:
  addr: %s
observability:
  listen: 127.0.0.1:0
`, kafka.Addr, absModule, filepath.Join(dir, "wasm-cache"), chs.Addr)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}

	step("running sluice until every line has landed")
	logPath := filepath.Join(dir, "sluice.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(sluiceBin, "run", "-config", cfgPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runStart := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	landed := 0
	for landed < lines {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("sluice exited early (%v):\n%s", err, out)
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d lines landed: %w", landed, lines, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		out, err := chs.Query(ctx, "SELECT count() FROM logs")
		if err != nil {
			return err
		}
		landed, _ = strconv.Atoi(strings.TrimSpace(out))
	}
	elapsed := time.Since(runStart)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("sluice did not stop cleanly (%v):\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("sluice did not drain within 30s")
	}
	fmt.Printf("    %d rows landed in %.1fs (%.0f rows/s)\n", landed, elapsed.Seconds(), float64(landed)/elapsed.Seconds())

	step("top 10 message templates by count (from ClickHouse)")
	out, err := chs.Query(ctx, `SELECT count() AS n, fingerprint, any(template) FROM logs
		GROUP BY fingerprint ORDER BY n DESC, fingerprint LIMIT 10 FORMAT PrettyCompactNoEscapes`)
	if err != nil {
		return err
	}
	fmt.Print(out)
	step("rows per level (from ClickHouse)")
	out, err = chs.Query(ctx, `SELECT level, count() AS n FROM logs GROUP BY level ORDER BY n DESC FORMAT PrettyCompactNoEscapes`)
	if err != nil {
		return err
	}
	fmt.Print(out)
	step("done in %.1fs; stopping ClickHouse and Kafka", time.Since(started).Seconds())
	return nil
}

func produce(ctx context.Context, kafka *testinfra.Kafka, lines int) error {
	cl, err := kafka.NewClient(kgo.DefaultProduceTopic("logs"), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	errs := make(chan error, 1)
	for i := 0; i < lines; i++ {
		line := loggen.Generate(1, i)
		cl.Produce(ctx, &kgo.Record{Value: line.JSON}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errs:
		return fmt.Errorf("produce: %w", err)
	default:
		return nil
	}
}
