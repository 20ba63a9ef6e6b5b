// Command sluice moves Kafka records through a tenant's WebAssembly module
// into ClickHouse.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/telemetry"
	"github.com/sluicehq/sluice/wasmhost"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `sluice moves Kafka records through a WebAssembly module into ClickHouse.

Usage:
  sluice run -config pipeline.yaml [-log-level info]
  sluice module test|inspect|init …   (run 'sluice module help')
  sluice module push|ls|activate|rollback|rm …   (the admin API's client)
  sluice token new|hash          (API tokens and the hashes the config keeps)
  sluice trace -spans traces.json -topic T -partition P -offset O
                                 (the spans and INSERT that carried a record)
  sluice status [-metrics URL] [-window 10s]
                                 (where a running instance's lag goes, per stage)
  sluice version

Run 'sluice <command> -h' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "module":
		return cmdModule(args[1:], stdout, stderr)
	case "token":
		return cmdToken(args[1:], stdout, stderr)
	case "trace":
		return cmdTrace(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "watch-calls": // started by sluice run (watchcalls.go)
		return cmdWatchCalls(args[1:], stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "sluice", version)
		return 0
	}
	return helpOrUnknown("sluice", args[0], usage, stdout, stderr)
}

// helpOrUnknown answers a subcommand that prog does not run: a request
// for help prints usage (exit 0), anything else is bad usage (exit 2).
func helpOrUnknown(prog, cmd, usage string, stdout, stderr io.Writer) int {
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "%s: unknown command %q\n\n%s", prog, cmd, usage)
	return 2
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "pipeline config file (YAML)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *configPath == "" {
		fmt.Fprintln(stderr, "sluice run: -config is required")
		return 2
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 2
	}
	cfg, err := engine.LoadConfig(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}

	// The first SIGINT/SIGTERM drains; a second one exits at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sigs
		log.Info("signal received, draining (send it again to exit at once)", "signal", s.String())
		cancel()
		<-sigs
		log.Error("second signal, exiting without draining")
		os.Exit(130)
	}()

	tp, shutdownTraces, err := telemetry.Setup(ctx, cfg.Observability.Traces, version)
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTraces(sctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}()

	if cfg.MemoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		// memory_limit covers the modules' linear memory too (memlimit.go).
		ml := &memoryLimit{budget: cfg.MemoryLimit, outside: wasmhost.MappedMemoryBytes, set: debug.SetMemoryLimit, log: log}
		ml.update()
		mctx, stop := context.WithCancel(context.Background())
		defer stop()
		tick := time.NewTicker(memoryLimitEvery)
		defer tick.Stop()
		go ml.run(mctx, tick.C)
	}
	// The stuck-call watcher starts before any module runs.
	watch, err := startStuckCallWatch(cfg.StuckCalls, log, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	defer watch.stop()
	p, err := engine.New(ctx, cfg, log, engine.WithTracerProvider(tp), engine.WithCallJournal(watch.journal))
	if err != nil {
		if ctx.Err() != nil {
			// A signal during startup: nothing was consumed, nothing to drain.
			log.Info("stopped during startup")
			return 0
		}
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	if addr := cfg.Observability.Listen; addr != "off" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(stderr, "sluice run: observability.listen:", err)
			return 1
		}
		srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	}
	admin, err := p.AdminHandler(log.With("log", "audit"))
	if err != nil {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	if addr := cfg.Admin.Listen; admin != nil && addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(stderr, "sluice run: admin.listen:", err)
			return 1
		}
		scheme := "http"
		if c := cfg.Admin.TLS; c.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
			if err != nil {
				ln.Close()
				fmt.Fprintln(stderr, "sluice run: admin.tls:", err)
				return 1
			}
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
			scheme = "https"
		}
		// Uploads are up to admin.max_module_bytes; a slow client gets a
		// minute to send one, and the answer comes within the check's
		// own bound after that.
		srv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: time.Minute + cfg.Admin.CheckTimeout + 30*time.Second, IdleTimeout: 2 * time.Minute}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("serving the module admin API", "url", scheme+"://"+ln.Addr().String())
	}
	if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "sluice run:", err)
		return 1
	}
	log.Info("stopped cleanly")
	return 0
}
