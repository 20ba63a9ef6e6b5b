package testinfra

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestMissingSoftwareErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := StartClickHouse(ctx, ClickHouseOptions{Binary: "/nonexistent/clickhouse-server"})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "scripts/deps.sh") {
		t.Fatalf("StartClickHouse with a missing binary: err = %v", err)
	}
	_, err = StartClickHouse(ctx, ClickHouseOptions{Server: Modern, Chdb: t.TempDir()})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task deps") || !strings.Contains(err.Error(), "chdb-core") {
		t.Fatalf("StartClickHouse 26.9 without chdb-core: err = %v", err)
	}
	_, err = StartClickHouse(ctx, ClickHouseOptions{Server: "19.1"})
	if err == nil || !strings.Contains(err.Error(), `unknown ClickHouse server "19.1"`) {
		t.Fatalf("StartClickHouse of an unknown server: err = %v", err)
	}
	_, err = StartKafka(ctx, KafkaOptions{Libs: t.TempDir()})
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task deps") {
		t.Fatalf("StartKafka with no jars: err = %v", err)
	}
	_, err = StartKafka(ctx, KafkaOptions{Java: "/nonexistent/java"})
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("StartKafka with a missing java: err = %v", err)
	}
}

// outcomeTB is a testing.TB that records whether a helper skipped or
// failed; like testing.T, both end the goroutine that called them.
type outcomeTB struct {
	testing.TB
	skipped, failed string
}

func (o *outcomeTB) Helper() {}

func (o *outcomeTB) Skip(args ...any) {
	o.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}

func (o *outcomeTB) Fatalf(format string, args ...any) {
	o.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestHelpersSkipOnlyUnderShort: under -short ClickHouseT and KafkaT skip
// before looking for any software; without it, missing software fails the
// test with the install hint, as strictly as ever. It sets test.short, so
// it must not run in parallel: t.Parallel tests wait for it to return.
func TestHelpersSkipOnlyUnderShort(t *testing.T) {
	short := flag.Lookup("test.short").Value
	was := short.String()
	t.Cleanup(func() { _ = short.Set(was) })
	helpers := map[string]func(testing.TB){
		"ClickHouseT": func(tb testing.TB) { ClickHouseT(tb, ClickHouseOptions{Binary: "/nonexistent/clickhouse-server"}) },
		"KafkaT":      func(tb testing.TB) { KafkaT(tb, KafkaOptions{Java: "/nonexistent/java"}) },
	}
	for name, start := range helpers {
		for _, tc := range []struct {
			short    string
			wantSkip bool
		}{{"true", true}, {"false", false}} {
			if err := short.Set(tc.short); err != nil {
				t.Fatal(err)
			}
			o := &outcomeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				start(o)
			}()
			<-done
			switch {
			case tc.wantSkip && (o.skipped == "" || o.failed != ""):
				t.Errorf("%s with -short=%s: skipped %q, failed %q; want a skip", name, tc.short, o.skipped, o.failed)
			case !tc.wantSkip && (o.skipped != "" || !strings.Contains(o.failed, "go tool -modfile=tools/go.mod task deps")):
				t.Errorf("%s with -short=%s: skipped %q, failed %q; want a failure with the install hint", name, tc.short, o.skipped, o.failed)
			}
		}
	}
}

// TestParseStat: the command name may hold spaces and parentheses; utime
// and stime are counted from after its last closing parenthesis.
func TestParseStat(t *testing.T) {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	stat := []byte("42 (Bg (pool) 1) S 1 1 1 0 -1 4194560 10 0 0 0 250 50 0 0 20 0 1 0\n")
	name, d, err := parseStat("stat", stat)
	if err != nil || name != "Bg (pool) 1" || d != 3*time.Second {
		t.Fatalf("parseStat = %q, %v, %v; want \"Bg (pool) 1\", 3s, nil", name, d, err)
	}
	if _, _, err := parseStat("stat", []byte("42 no name S 1")); err == nil {
		t.Error("parseStat took a stat without a command name")
	}
	threads, err := ThreadCPUTimes(os.Getpid())
	if err != nil || len(threads) == 0 {
		t.Fatalf("ThreadCPUTimes of this process: %d threads, %v", len(threads), err)
	}
}
