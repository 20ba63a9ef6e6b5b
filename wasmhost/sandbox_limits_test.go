package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// The modules of these tests are hand-assembled (wasmtest); each attacks
// one of the host's limits with the worst input for it.

func init() {
	childScenarios["table-min"] = func(ctx context.Context) (string, error) {
		// Eight tables declaring 2^27 elements each (wazero's largest):
		// 8 GiB of host memory if instantiated, in a module of 100 bytes.
		return loadChild(ctx, wasmtest.TableBomb(), Limits{MemoryBytes: 4 << 20})
	}
	childScenarios["table-max"] = func(ctx context.Context) (string, error) {
		// A table whose declared maximum is huge, grown in a loop.
		return growTableChild(ctx, wasmtest.Table{Min: 1, Max: 0xFFFFFFFF, HasMax: true})
	}
	childScenarios["table-grow"] = func(ctx context.Context) (string, error) {
		// A table with no maximum, grown in a loop.
		return growTableChild(ctx, wasmtest.Table{Min: 1})
	}
}

func loadChild(ctx context.Context, wasm []byte, lim Limits) (string, error) {
	r, err := NewRuntime(ctx, Config{Logger: quietLogger})
	if err != nil {
		return "", err
	}
	defer r.Close(ctx)
	_, err = r.LoadWithLimits(ctx, "hostile", wasm, lim)
	return fmt.Sprintf("load: %v", err), nil
}

func growTableChild(ctx context.Context, t wasmtest.Table) (string, error) {
	r, err := NewRuntime(ctx, Config{Logger: quietLogger})
	if err != nil {
		return "", err
	}
	defer r.Close(ctx)
	m, err := r.LoadWithLimits(ctx, "hostile", wasmtest.TableGrow(t), Limits{MemoryBytes: 4 << 20, Deadline: time.Minute})
	if err != nil {
		return "", err
	}
	in, err := m.instantiate(ctx)
	if err != nil {
		return "", err
	}
	defer in.Close(ctx)
	n, err := in.call(ctx, in.mod.ExportedFunction("hostile"), "hostile")
	return fmt.Sprintf("size %d, err %v", uint32(n), err), nil
}

// tableBoundMB is what a child running a 4 MiB module may reach: the test
// binary (about 10 MB), its memory, the tables (MaxTableElements, twice
// while table.grow copies) and slack.
const tableBoundMB = 64

func TestTableDeclaredTooLargeIsRefusedAtLoad(t *testing.T) {
	res := mustRunChild(t, "table-min")
	want := fmt.Sprintf("tables declare %d elements at least; at most %d are allowed", 8<<27, uint32(MaxTableElements))
	if !strings.Contains(res.result, want) {
		t.Errorf("load of a module declaring 8 tables of 2^27 elements: %s; want an error saying %q", res.result, want)
	}
	if res.peakMB > tableBoundMB {
		t.Errorf("peak RSS %.0f MB, want at most %d MB", res.peakMB, tableBoundMB)
	}
	t.Logf("peak RSS %.0f MB: %s", res.peakMB, res.result)
}

func TestTableGrowIsBounded(t *testing.T) {
	limit := uint32(MaxTableElements)
	for _, name := range []string{"table-grow", "table-max"} {
		t.Run(name, func(t *testing.T) {
			res := mustRunChild(t, name)
			// From 1 element by 4096 at a time, as far as the limit allows.
			if want := fmt.Sprintf("size %d, err <nil>", 1+(limit-1)/4096*4096); res.result != want {
				t.Errorf("growing the table until refused: %s, want %s", res.result, want)
			}
			if res.peakMB > tableBoundMB {
				t.Errorf("peak RSS %.0f MB, want at most %d MB", res.peakMB, tableBoundMB)
			}
			t.Logf("peak RSS %.0f MB: %s", res.peakMB, res.result)
		})
	}
}

// Compile bombs: small binaries that wazero would compile for seconds to
// minutes, or with gigabytes, are refused before compiling, quickly.
func TestCompileBombsAreRefusedBeforeCompiling(t *testing.T) {
	straight := wasmtest.StraightCode(600 << 10)
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"deep nesting", wasmtest.Funcs(1, wasmtest.Nested(1025, nil)), "blocks nest more than 1024 deep"},
		{"huge br_table", wasmtest.Funcs(1, wasmtest.Nested(64, wasmtest.BrTable(4097, 64))), "a br_table of 4097 targets; at most 4096 are allowed"},
		{"many functions", wasmtest.Funcs(100_001, nil), "defines 100005 functions; at most 100000 are allowed"},
		{"huge function", wasmtest.Funcs(1, straight), "has a body of 614402 bytes; at most 524288 are allowed"},
		{"costly function", wasmtest.Funcs(1, wasmtest.Nested(1000, bytes.Repeat(wasmtest.BrTable(4096, 1000), 13))), "would cost 2"},
		// Each function is within the limits, and costs 80,000: 20 s of
		// compiling for 450 of them (1.4 MB) with wazero 1.12 here.
		{"costly module", wasmtest.Funcs(450, wasmtest.Nested(1000, nil)), "would cost more than 32000000 to compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRuntime(t, Config{})
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := r.Load(context.Background(), "bomb", tc.wasm)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Load of a %d-byte module: %v; want an error saying %q", len(tc.wasm), err, tc.want)
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Errorf("refused after %v", took)
				}
				t.Logf("%d bytes refused in %v: %v", len(tc.wasm), time.Since(start), err)
			case <-time.After(20 * time.Second):
				t.Fatalf("Load of a %d-byte module still running after 20s", len(tc.wasm))
			}
		})
	}
}

// countingHandler counts the bytes of the log lines it gets.
type countingHandler struct{ bytes atomic.Int64 }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.bytes.Add(int64(len(r.Message)))
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// One fd_write of 393,216 iovecs over one 1 MiB buffer asks the host to
// log 384 GiB; it must cost at most MaxStdioBytesPerCall and end well
// within the deadline.
func TestFdWriteIsBoundedPerCall(t *testing.T) {
	h := &countingHandler{}
	r := newTestRuntime(t, Config{Logger: slog.New(h)})
	const pages, buf = 64, 1 << 20
	m := loadBytes(t, r, "flood", wasmtest.StdoutFlood(pages, buf, (pages<<16-buf)/8), Limits{MemoryBytes: pages << 16, Deadline: time.Second})
	in, err := m.instantiate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	var errno uint64
	go func() {
		var err error
		errno, err = in.call(context.Background(), in.mod.ExportedFunction("hostile"), "hostile")
		done <- err
	}()
	select {
	case err := <-done:
		took := time.Since(start)
		if err != nil || errno == 0 {
			t.Errorf("flood: errno %d, err %v; want a failed write (EIO) and a call that ends well", errno, err)
		}
		if took > 2*time.Second {
			t.Errorf("flood took %v; the deadline is 1s", took)
		}
		if n := h.bytes.Load(); n > MaxStdioBytesPerCall {
			t.Errorf("%d bytes logged, want at most %d", n, MaxStdioBytesPerCall)
		}
		t.Logf("flood: errno %d after %v, %d bytes logged", errno, took, h.bytes.Load())
	case <-time.After(15 * time.Second):
		t.Fatalf("flood still running after 15s; the deadline is 1s")
	}
}

func init() {
	childScenarios["stack-overflow"] = func(ctx context.Context) (string, error) {
		// An export that calls itself until the stack runs out.
		return callChild(ctx, wasmtest.StackOverflow(), Limits{MemoryBytes: 2 << 20}, "hostile")
	}
	childScenarios["memory-grow"] = func(ctx context.Context) (string, error) {
		return callChild(ctx, wasmtest.MemoryGrow(), Limits{MemoryBytes: memoryGrowCap}, "hostile")
	}
}

const memoryGrowCap = 128 << 20

// callChild loads wasm with lim and calls its export fn on a fresh
// instance.
func callChild(ctx context.Context, wasm []byte, lim Limits, fn string) (string, error) {
	r, err := NewRuntime(ctx, Config{Logger: quietLogger})
	if err != nil {
		return "", err
	}
	defer r.Close(ctx)
	m, err := r.LoadWithLimits(ctx, "hostile", wasm, lim)
	if err != nil {
		return "", err
	}
	in, err := m.instantiate(ctx)
	if err != nil {
		return "", err
	}
	defer in.Close(ctx)
	v, err := in.call(ctx, in.mod.ExportedFunction(fn), fn)
	return fmt.Sprintf("%s = %d, err %v", fn, uint32(v), err), nil
}

// A guest growing its memory until refused, touching every page, costs
// the host its cap, not a multiple of it.
func TestMemoryGrowthCostsTheCap(t *testing.T) {
	res := mustRunChild(t, "memory-grow")
	if want := fmt.Sprintf("hostile = %d, err <nil>", memoryGrowCap/wasmPage); res.result != want {
		t.Errorf("grow until refused: %s, want %s", res.result, want)
	}
	// The test binary with a runtime and a module is about 15 MB.
	if bound := float64(memoryGrowCap>>20) + 40; res.peakMB > bound {
		t.Errorf("peak RSS %.0f MB for a %d MiB cap, want at most %.0f MB", res.peakMB, memoryGrowCap>>20, bound)
	}
	t.Logf("peak RSS %.0f MB for a %d MiB cap: %s", res.peakMB, memoryGrowCap>>20, res.result)
}

// A compile within the limits but long is stopped by its context, between
// two functions.
func TestCompileStopsWithItsContext(t *testing.T) {
	wasm := wasmtest.Funcs(350, wasmtest.Nested(1000, nil)) // about 7 s of compiling here
	r := newTestRuntime(t, Config{})
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, errors.New("upload check timed out"))
	defer cancel()
	start := time.Now()
	_, err := r.Load(ctx, "slow", wasm)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "compile: stopped: upload check timed out") {
		t.Fatalf("Load: %v; want it stopped by its context", err)
	}
	if took > 3*time.Second {
		t.Errorf("Load returned %v after its context ended", took-300*time.Millisecond)
	}
	t.Logf("stopped after %v: %v", took, err)
}

// A module that recurses without end traps on the stack limit with a
// host call stack of a few MB, not wazero's 50 MB ceiling doubled.
func TestStackOverflowIsBounded(t *testing.T) {
	res := mustRunChild(t, "stack-overflow")
	if !strings.Contains(res.result, "call stack limit reached") {
		t.Errorf("endless recursion: %s; want the stack limit", res.result)
	}
	// The child's own runtime is most of it (more under -race); wazero's
	// growth to its ceiling cost 173 MB here.
	if res.peakMB > 64 {
		t.Errorf("peak RSS %.0f MB under a 2 MiB cap, want at most 64 MB", res.peakMB)
	}
	t.Logf("peak RSS %.0f MB: %s", res.peakMB, res.result)
}

// Inspect describes a compile bomb by its refusal, without decoding it
// with wazero.
func TestInspectRefusesCompileBombs(t *testing.T) {
	r := newTestRuntime(t, Config{})
	bomb := wasmtest.Funcs(1, wasmtest.StraightCode(8<<20))
	// What Inspect allocates shows whether it decoded the body: wazero's
	// interpreter allocated 2.2 GB for this module (8 MiB), the structure
	// check 10 MB, a copy of the module and its bookkeeping. A time bound
	// would say the same only on an idle machine.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	info, err := r.Inspect(context.Background(), "bomb", bomb)
	runtime.ReadMemStats(&after)
	if err != nil || info.LoadErr == nil || !strings.Contains(info.LoadErr.Error(), "at most 524288 are allowed") {
		t.Fatalf("Inspect: %+v, %v; want LoadErr naming the body limit", info, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*uint64(len(bomb)) {
		t.Errorf("Inspect of a %d-byte bomb allocated %d bytes: it decoded the body", len(bomb), alloc)
	} else {
		t.Logf("Inspect of a %d-byte bomb allocated %d bytes", len(bomb), alloc)
	}
}

// undeclaredGlobals are the exports of issue 46's three modules that write
// globals they do not declare, and their function indices.
var undeclaredGlobals = []struct {
	export string
	index  int
}{{"sluice_abi_version", 0}, {"sluice_init", 2}, {"sluice_transform", 3}}

func init() {
	for _, tc := range undeclaredGlobals {
		childScenarios["undeclared-globals-"+tc.export] = func(ctx context.Context) (string, error) {
			return loadAndCallChild(ctx, wasmtest.UndeclaredGlobals(tc.export), tc.export)
		}
	}
}

// loadAndCallChild loads wasm with a 1 s deadline and, if it loads, calls
// its export fn with zero arguments on a fresh instance.
func loadAndCallChild(ctx context.Context, wasm []byte, fn string) (string, error) {
	r, err := NewRuntime(ctx, Config{Logger: quietLogger})
	if err != nil {
		return "", err
	}
	defer r.Close(ctx)
	m, err := r.LoadWithLimits(ctx, "hostile", wasm, Limits{Deadline: time.Second})
	if err != nil {
		return fmt.Sprintf("load: %v", err), nil
	}
	in, err := m.instantiate(ctx)
	if err != nil {
		return "", err
	}
	defer in.Close(ctx)
	f := in.mod.ExportedFunction(fn)
	_, err = in.call(ctx, f, fn, make([]uint64, len(f.Definition().ParamTypes()))...)
	return fmt.Sprintf("loaded; %s: %v", fn, err), nil
}

// A module that writes globals it does not declare, in a loop, is refused
// at load, naming the function and the global. Instrumented, it would
// overwrite the interrupt flag and the countdown the rewrite appends at
// those indices, and run past every deadline, in compiled code the Go
// runtime cannot preempt: the next garbage collection would wait for it,
// and every goroutine of the process with it. Each module runs in a child
// process, so that only the child would freeze (and be killed after
// childDeadline).
func TestUndeclaredGlobalsAreRefusedAtLoad(t *testing.T) {
	for _, tc := range undeclaredGlobals {
		t.Run(tc.export, func(t *testing.T) {
			res := mustRunChild(t, "undeclared-globals-"+tc.export)
			want := fmt.Sprintf("load: module hostile: code section: function %d (%s): global.set 0: the module has no global 0 (it has 0 globals), at offset ",
				tc.index, tc.export)
			if !strings.HasPrefix(res.result, want) {
				t.Fatalf("%s; want %s…", res.result, want)
			}
			t.Logf("peak RSS %.0f MB: %s", res.peakMB, res.result)
		})
	}
}
