package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
		var tables []wasmtest.Table
		for range 8 {
			tables = append(tables, wasmtest.Table{Min: 1 << 27})
		}
		return loadChild(ctx, tableModule(tables...), Limits{MemoryBytes: 4 << 20})
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

// tableModule is a sluice module with the given tables and an export
// "grow" that grows table 0 by 4096 elements at a time until it fails and
// returns the table's size.
func tableModule(tables ...wasmtest.Table) []byte {
	grow := []byte{
		0x03, 0x40, // loop
		0xD0, 0x70, // ref.null func
		0x41, 0x80, 0x20, // i32.const 4096
		0xFC, 0x0F, 0x00, // table.grow 0
		0x41, 0x7F, // i32.const -1
		0x47,       // i32.ne
		0x0D, 0x00, // br_if 0
		0x0B,             // end
		0xFC, 0x10, 0x00, // table.size 0
		0x0B,
	}
	return wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Tables: tables,
		Extra: []wasmtest.Func{{Type: wasmtest.TypeI32, Body: grow, Export: "grow"}}}.Build()
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
	m, err := r.LoadWithLimits(ctx, "hostile", tableModule(t), Limits{MemoryBytes: 4 << 20, Deadline: time.Minute})
	if err != nil {
		return "", err
	}
	in, err := m.instantiate(ctx)
	if err != nil {
		return "", err
	}
	defer in.Close(ctx)
	n, err := in.call(ctx, in.mod.ExportedFunction("grow"), "grow")
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

// nested is inner inside depth blocks.
func nested(depth int, inner []byte) []byte {
	var b []byte
	for range depth {
		b = append(b, 0x02, 0x40) // block
	}
	b = append(b, inner...)
	for range depth {
		b = append(b, 0x0B)
	}
	return b
}

// brTable is a br_table of n targets to the enclosing depth blocks.
func brTable(n, depth int) []byte {
	b := append([]byte{0x41, 0x00, 0x0E}, wasmtest.U32(uint32(n))...) // i32.const 0; br_table
	for i := range n {
		b = append(b, wasmtest.U32(uint32(i%depth))...)
	}
	return append(b, 0x00)
}

// funcs is a module with n functions of body code (without its end).
func funcs(n int, code []byte) []byte {
	f := wasmtest.Func{Type: wasmtest.TypeVoid, Body: append(append([]byte{}, code...), 0x0B)}
	extra := make([]wasmtest.Func, n)
	for i := range extra {
		extra[i] = f
	}
	return wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Extra: extra}.Build()
}

// Compile bombs: small binaries that wazero would compile for seconds to
// minutes, or with gigabytes, are refused before compiling, quickly.
func TestCompileBombsAreRefusedBeforeCompiling(t *testing.T) {
	straight := make([]byte, 0, 600<<10)
	for len(straight) < 600<<10 {
		straight = append(straight, 0x41, 0x01, 0x1A) // i32.const 1; drop
	}
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"deep nesting", funcs(1, nested(1025, nil)), "blocks nest more than 1024 deep"},
		{"huge br_table", funcs(1, nested(64, brTable(4097, 64))), "a br_table of 4097 targets; at most 4096 are allowed"},
		{"many functions", funcs(100_001, nil), "defines 100005 functions; at most 100000 are allowed"},
		{"huge function", funcs(1, straight), "has a body of 614402 bytes; at most 524288 are allowed"},
		{"costly function", funcs(1, nested(1000, bytes.Repeat(brTable(4096, 1000), 13))), "would cost 2"},
		// Each function is within the limits, and costs 80,000: 20 s of
		// compiling for 450 of them (1.4 MB) with wazero 1.12 here.
		{"costly module", funcs(450, nested(1000, nil)), "would cost more than 32000000 to compile"},
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

// floodModule's export "flood" makes one fd_write to stdout of iovecs
// iovecs, each of the first bufLen bytes of memory, and returns its errno.
// The iovecs lie after the buffer; memory is pages pages.
func floodModule(pages, bufLen, iovecs uint32) []byte {
	i32 := func(v uint32) []byte { return append([]byte{0x41}, wasmtest.S64(int64(int32(v)))...) }
	var b []byte
	b = append(b, 0x02, 0x40, 0x03, 0x40) // block; loop
	b = append(b, 0x20, 0x00)             // local.get i
	b = append(b, i32(iovecs)...)
	b = append(b, 0x4F, 0x0D, 0x01)                         // i32.ge_u; br_if 1
	b = append(b, 0x20, 0x00, 0x41, 0x03, 0x74)             // local.get i; i32.const 3; i32.shl
	b = append(b, i32(bufLen)...)                           //
	b = append(b, 0x6A)                                     // i32.add: the iovec's address
	b = append(b, i32(bufLen)...)                           // its length
	b = append(b, 0x36, 0x02, 0x04)                         // i32.store offset=4
	b = append(b, 0x20, 0x00, 0x41, 0x01, 0x6A, 0x21, 0x00) // i++
	b = append(b, 0x0C, 0x00, 0x0B, 0x0B)                   // br 0; end; end
	b = append(b, 0x41, 0x01)                               // fd 1
	b = append(b, i32(bufLen)...)                           // iovs
	b = append(b, i32(iovecs)...)                           // iovs_len
	b = append(b, 0x41, 0x10, 0x10, 0x00, 0x0B)             // nwritten at 16; call fd_write; end
	return wasmtest.Module{Version: 1, MemoryPages: pages, Transform: []byte{0x42, 0x00, 0x0B},
		Types:   [][]byte{wasmtest.FuncType([]byte{wasmtest.I32, wasmtest.I32, wasmtest.I32, wasmtest.I32}, []byte{wasmtest.I32})},
		Imports: []wasmtest.Import{{Module: "wasi_snapshot_preview1", Name: "fd_write", Type: wasmtest.TypeExtra}},
		Extra:   []wasmtest.Func{{Type: wasmtest.TypeI32, Locals: []byte{0x01, 0x01, wasmtest.I32}, Body: b, Export: "flood"}},
	}.Build()
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
	m := loadBytes(t, r, "flood", floodModule(pages, buf, (pages<<16-buf)/8), Limits{MemoryBytes: pages << 16, Deadline: time.Second})
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
		errno, err = in.call(context.Background(), in.mod.ExportedFunction("flood"), "flood")
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
		recurse := wasmtest.Func{Type: wasmtest.TypeVoid, Body: []byte{0x10, 0x04, 0x0B}, Export: "recurse"} // call 4 (itself)
		wasm := wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Extra: []wasmtest.Func{recurse}}.Build()
		return callChild(ctx, wasm, Limits{MemoryBytes: 2 << 20}, "recurse")
	}
	childScenarios["memory-grow"] = func(ctx context.Context) (string, error) {
		return callChild(ctx, growMemoryModule(), Limits{MemoryBytes: memoryGrowCap}, "grow")
	}
}

const memoryGrowCap = 128 << 20

// growMemoryModule's export "grow" grows memory a page at a time, filling
// each new page, until a grow fails, and returns the memory's pages.
func growMemoryModule() []byte {
	grow := []byte{
		0x02, 0x40, 0x03, 0x40, // block; loop
		0x41, 0x01, 0x40, 0x00, // i32.const 1; memory.grow
		0x22, 0x00, // local.tee 0
		0x41, 0x7F, 0x46, 0x0D, 0x01, // i32.const -1; i32.eq; br_if 1
		0x20, 0x00, 0x41, 0x10, 0x74, // local.get 0; i32.const 16; i32.shl
		0x41, 0x01, 0x41, 0x80, 0x80, 0x04, // i32.const 1; i32.const 65536
		0xFC, 0x0B, 0x00, // memory.fill: the whole new page
		0x0C, 0x00, 0x0B, 0x0B, // br 0; end; end
		0x3F, 0x00, 0x0B, // memory.size; end
	}
	return wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B},
		Extra: []wasmtest.Func{{Type: wasmtest.TypeI32, Locals: []byte{0x01, 0x01, wasmtest.I32}, Body: grow, Export: "grow"}}}.Build()
}

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
	if want := fmt.Sprintf("grow = %d, err <nil>", memoryGrowCap/wasmPage); res.result != want {
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
	wasm := funcs(350, nested(1000, nil)) // about 7 s of compiling here
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
