package wasmhost

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	wt "github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// returnsZero is a sluice_transform body that returns an empty output.
var returnsZero = []byte{0x42, 0x00, 0x0B}

func TestLoadRefuses(t *testing.T) {
	spin := wt.Func{Type: wt.TypeVoid, Body: []byte{0x03, 0x40, 0x0C, 0x00, 0x0B, 0x0B}}
	tests := []struct {
		name string
		wasm []byte
		lim  Limits
		want string
	}{
		{"not wasm", []byte("#!/bin/sh\necho hi\n"), Limits{},
			`module m: not a WebAssembly binary (no \0asm magic)`},
		{"socket import", wt.Module{Version: 1, Transform: returnsZero,
			Imports: []wt.Import{{Module: "wasi_snapshot_preview1", Name: "sock_accept", Type: wt.TypeI32x3ToI32}}}.Build(), Limits{},
			"module m: imports wasi_snapshot_preview1.sock_accept, which the sandbox does not provide"},
		{"unknown sluice import", wt.Module{Version: 1, Transform: returnsZero,
			Imports: []wt.Import{{Module: "sluice", Name: "exec", Type: wt.TypeVoid}}}.Build(), Limits{},
			"module m: imports sluice.exec, which is not part of the sluice ABI"},
		{"other ABI version", wt.Module{Version: 7, Transform: returnsZero}.Build(), Limits{},
			"module m: built for guest ABI version 7; this host supports [1]"},
		{"memory over the cap", wt.Module{Version: 1, Transform: returnsZero, MemoryPages: 20}.Build(), Limits{MemoryBytes: 16 * 65536},
			"module m: compile: section memory: min 20 pages"},
		{"endless start function", wt.Module{Version: 1, Transform: returnsZero, Extra: []wt.Func{spin}, Start: 1}.Build(),
			Limits{Deadline: 100 * time.Millisecond}, "module m: __sluice_start: deadline exceeded: still running after 100ms (interrupted; the call took "},
		{"missing export", wt.Binary(), Limits{}, "module m: missing export sluice_abi_version"},
		// The error names the module and the call once.
		{"version handshake traps", wt.Module{ABIVersion: []byte{0x00, 0x0B}, Transform: returnsZero}.Build(), Limits{},
			"module m: sluice_abi_version: wasm error: unreachable"},
	}
	r := newTestRuntime(t, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.LoadWithLimits(context.Background(), "m", tt.wasm, tt.lim)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestUnreachableTrap(t *testing.T) {
	r := newTestRuntime(t, Config{})
	m, err := r.Load(context.Background(), "trap", wt.Module{Version: 1, Transform: []byte{0x00, 0x0B}}.Build())
	if err != nil {
		t.Fatal(err)
	}
	in := instantiate(t, m, advInit)
	_, err = in.Transform(context.Background(), values("a"))
	te := wantTrap(t, err, "", "module trap: sluice_transform: wasm error: unreachable")
	if errors.Is(te, ErrDeadline) {
		t.Error("a guest's own unreachable classified as a deadline")
	}
}

func TestOutputOutsideMemory(t *testing.T) {
	// sluice_transform returns ptr 0xFFFF0000, len 16: past the one page.
	packed := uint64(0xFFFF0000)<<32 | 16
	body := append([]byte{0x42}, wt.S64(int64(packed))...)
	body = append(body, 0x0B)
	r := newTestRuntime(t, Config{})
	m, err := r.Load(context.Background(), "oob", wt.Module{Version: 1, Transform: body}.Build())
	if err != nil {
		t.Fatal(err)
	}
	in := instantiate(t, m, advInit)
	_, err = in.Transform(context.Background(), values("a"))
	wantTrap(t, err, "", "sluice_transform: malformed output: result [0xffff0000, +16) is outside memory")
	if !errors.Is(err, ErrMalformedOutput) {
		t.Error("not ErrMalformedOutput")
	}
}

func TestLimitsValidation(t *testing.T) {
	for _, tt := range []struct {
		lim  Limits
		want string
	}{
		{Limits{MemoryBytes: 100}, "Limits.MemoryBytes 100: want 64 KiB to 4 GiB"},
		{Limits{Deadline: -time.Second}, "Limits.Deadline -1s is negative"},
		{Limits{MaxRowsPerRecord: -1}, "Limits.MaxRowsPerRecord -1 is negative"},
	} {
		if _, err := tt.lim.withDefaults(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v: err = %v, want %q", tt.lim, err, tt.want)
		}
	}
	l, err := Limits{MemoryBytes: 100000}.withDefaults()
	if err != nil || l.MemoryBytes != 65536 || l.Deadline != DefaultDeadline || l.MaxRowsPerRecord != DefaultMaxRowsPerRecord ||
		l.MaxOutputBytes != DefaultMaxOutputBytes || l.MaxRecordBytes != DefaultMaxRecordBytes {
		t.Errorf("defaults: %+v, %v", l, err)
	}
}

// One loaded module per sha256, limits and name; other names and memory
// caps share the compilation cache.
func TestModuleCache(t *testing.T) {
	r := newTestRuntime(t, Config{})
	wasm := moduleWasm(t, "wasmhost/testdata/noop")
	ctx := context.Background()
	start := time.Now()
	a, err := r.Load(ctx, "a", wasm)
	if err != nil {
		t.Fatal(err)
	}
	compiled := time.Since(start)
	b, err := r.Load(ctx, "a", wasm)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same module, limits and name loaded twice")
	}
	// Under another name (another tenant's pipeline), a Module of its own,
	// so that its logs, errors and call-journal records name it.
	if other, err := r.Load(ctx, "b", wasm); err != nil || other == a || other.Name != "b" {
		t.Errorf("under another name: %v, %v", other, err)
	}
	start = time.Now()
	c, err := r.LoadWithLimits(ctx, "c", wasm, Limits{MemoryBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	reused := time.Since(start)
	if c == a || c.Limits.MemoryBytes != 32<<20 || a.Limits.MemoryBytes != DefaultMemoryBytes {
		t.Errorf("limits not kept apart: %+v / %+v", a.Limits, c.Limits)
	}
	// Both loads rewrite and instantiate the module; only the first compiles it.
	if reused > compiled/2 {
		t.Errorf("loading with another memory cap took %v, the first load %v: the compilation cache was not shared", reused, compiled)
	}
	if len(a.Exports()) == 0 || len(a.Imports()) == 0 {
		t.Error("no exports or imports listed")
	}
	for _, e := range a.Exports() {
		if strings.HasPrefix(e, "__sluice") {
			t.Errorf("instrumentation export %s listed", e)
		}
	}
}

// sluice.log lines are rate-limited per module: 100 per 10 s.
func TestGuestLogRateLimit(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	// sluice_transform: log(1, 1024, 5) 200 times, then return an empty output.
	body := []byte{
		0x03, 0x40, // loop
		0x41, 0x01, 0x41, 0x80, 0x08, 0x41, 0x05, 0x10, 0x00, // log(1, 1024, 5)
		0x20, 0x02, 0x41, 0x01, 0x6A, 0x22, 0x02, // i = i + 1
		0x41, 0xC8, 0x01, 0x49, 0x0D, 0x00, // br_if 0 (i < 200)
		0x0B,             // end
		0x42, 0x00, 0x0B, // i64.const 0
	}
	wasm := wt.Module{Version: 1, Transform: body, TransformLocals: wt.Vec([]byte{0x01, wt.I32}),
		Imports: []wt.Import{{Module: "sluice", Name: "log", Type: wt.TypeI32x3}}}.Build()
	r := newTestRuntime(t, Config{Logger: log})
	mod, err := r.Load(context.Background(), "chatty", wasm)
	if err != nil {
		t.Fatal(err)
	}
	in := instantiate(t, mod, advInit)
	_, err = in.Transform(context.Background(), values("a"))
	wantTrap(t, err, "", "malformed output") // the empty output; the logs are what counts
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "module=chatty stream=log"); n != logBurst {
		t.Errorf("%d log lines, want %d:\n%s", n, logBurst, buf.String()[:min(500, buf.Len())])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
