// Command quotes runs the quotes example (examples/quotes/README.md) on
// this machine: it builds the module, starts a Kafka broker and a
// two-shard ClickHouse 26.9 cluster whose link to shard 2 has a fixed
// latency, runs sluice twice over the same quotes (routing distributed,
// synchronous, then routing shards), checks what landed, and prints both
// runs' lag percentiles from sluice's /metrics and their ratio. -svg
// writes the chart.
//
// Run it from the repository root with `go tool -modfile=tools/go.mod task quotes`, or
//
//	go run ./examples/quotes/cmd/quotes -svg examples/quotes/lag.svg
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/examples/quotes"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

func main() {
	n := flag.Int("quotes", 60_000, "quotes produced per run")
	rate := flag.Int("rate", 1000, "quotes produced per second")
	warmup := flag.Int("warmup", 5000, "first quotes of each run left out of the lag figures")
	latency := flag.Duration("latency", 25*time.Millisecond, "one-way delay of the link from shard 1 to shard 2")
	svg := flag.String("svg", "", "write the chart to this file (SVG)")
	verbose := flag.Bool("v", false, "print sluice's log (info and above; warnings otherwise)")
	flag.Parse()
	if *n <= 0 || *rate <= 0 || *warmup < 0 || *warmup >= *n || *latency < 0 {
		fmt.Fprintln(os.Stderr, "quotes: want -quotes > 0, -rate > 0, 0 <= -warmup < -quotes and -latency >= 0")
		os.Exit(2)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *n, *rate, *warmup, *latency, *svg, log); err != nil {
		fmt.Fprintln(os.Stderr, "quotes:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(ctx context.Context, n, rate, warmup int, latency time.Duration, svg string, log *slog.Logger) error {
	dir, err := os.MkdirTemp("", "sluice-quotes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	step("building the module (examples/quotes/module)")
	module := filepath.Join(dir, "quotes.wasm")
	if err := wasmbuild.Build(ctx, filepath.Join(wasmbuild.RepoRoot(), "examples/quotes/module"), module); err != nil {
		return err
	}
	step("starting Kafka and two ClickHouse 26.9 servers; shard 1 reaches shard 2 through a link adding %v each way", latency)
	c, err := quotes.StartCluster(ctx, latency)
	if err != nil {
		return err
	}
	defer c.Close()
	loadBefore := loadAverage()
	rep := &quotes.Report{Server: c.Shard1.Version.String(), CPUs: runtime.NumCPU(), Latency: latency, Quotes: n, Rate: rate, Warmup: warmup}
	for _, routing := range []string{clickhouse.RoutingDistributed, clickhouse.RoutingShards} {
		res, err := c.Run(ctx, quotes.RunOptions{Routing: routing, Quotes: n, Rate: rate, Warmup: warmup,
			Module: module, CacheDir: filepath.Join(dir, "wasm-cache"), Log: log, Progress: step})
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, res)
	}
	if loadBefore != "" {
		rep.Load = loadBefore + " → " + loadAverage()
	}
	step("every quote landed once in each table, on its shard, with exact end-of-day sums")
	fmt.Println()
	if err := rep.WriteText(os.Stdout); err != nil {
		return err
	}
	if svg != "" {
		f, err := os.Create(svg)
		if err != nil {
			return err
		}
		if err := rep.WriteSVG(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Printf("\nchart: %s\n", svg)
	}
	return nil
}

// loadAverage is the machine's 1-minute load average, "" where there is no
// /proc/loadavg: other work on a shared machine shows in the figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
