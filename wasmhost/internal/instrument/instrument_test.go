package instrument

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	wt "github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// countTo is (func (param $n i32) (result i32) (local $i i32)
// loop: i++; br_if loop (i < n); return i), exported as "count".
var countTo = wt.Func{
	Type:   wt.TypeI32ToI32,
	Locals: wt.Vec(append(wt.U32(1), wt.I32)),
	Body: []byte{
		0x03, 0x40, // loop
		0x20, 0x01, 0x41, 0x01, 0x6A, 0x21, 0x01, // i = i + 1
		0x20, 0x01, 0x20, 0x00, 0x48, 0x0D, 0x00, // br_if 0 (i < n)
		0x0B,       // end
		0x20, 0x01, // local.get i
		0x0B,
	},
	Export: "count",
}

// spin loops forever: (loop br 0).
var spin = wt.Func{Type: wt.TypeVoid, Body: []byte{0x03, 0x40, 0x0C, 0x00, 0x0B, 0x0B}, Export: "spin"}

// grow is memory.grow of its argument, exported as "grow".
var grow = wt.Func{Type: wt.TypeI32ToI32, Body: []byte{0x20, 0x00, 0x40, 0x00, 0x0B}, Export: "grow"}

// callSpin calls spin: a function without a loop that makes a call.
var callSpin = wt.Func{Type: wt.TypeVoid, Body: []byte{0x10, 0x05, 0x0B}, Export: "callspin"}

func testModule(extra ...wt.Func) []byte {
	return wt.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Extra: extra}.Build()
}

func instantiate(t *testing.T, wasm []byte, memLimitPages uint32) api.Module {
	t.Helper()
	ctx := context.Background()
	rc := wazero.NewRuntimeConfigCompiler()
	if memLimitPages > 0 {
		rc = rc.WithMemoryLimitPages(memLimitPages)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	t.Cleanup(func() { rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

func rewrite(t *testing.T, wasm []byte) ([]byte, Stats) {
	t.Helper()
	out, st, err := Rewrite(wasm)
	if err != nil {
		t.Fatal(err)
	}
	return out, st
}

func TestRewriteKeepsBehaviour(t *testing.T) {
	out, st := rewrite(t, testModule(countTo, spin, grow))
	if st.Loops != 2 || st.MemoryGrow != 1 || st.Entries != 0 || st.Start {
		t.Errorf("stats %+v, want 2 loops, 1 grow, 0 entries, no start", st)
	}
	mod := instantiate(t, out, 0)
	res, err := mod.ExportedFunction("count").Call(context.Background(), 1000)
	if err != nil || res[0] != 1000 {
		t.Fatalf("count(1000) = %v, %v", res, err)
	}
	for _, g := range []string{InterruptGlobal, OOMGlobal, BudgetGlobal} {
		if _, ok := mod.ExportedGlobal(g).(api.MutableGlobal); !ok {
			t.Errorf("no mutable global %s", g)
		}
	}
}

func TestInterruptStopsLoopsAndCalls(t *testing.T) {
	out, st := rewrite(t, testModule(countTo, spin, callSpin))
	if st.Entries != 1 {
		t.Errorf("stats %+v: want an entry check in callspin only", st)
	}
	for _, fn := range []string{"spin", "callspin"} {
		t.Run(fn, func(t *testing.T) {
			mod := instantiate(t, out, 0)
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction(fn).Call(context.Background())
				done <- err
			}()
			time.Sleep(20 * time.Millisecond)
			// The guest yields to the Go scheduler: a garbage collection, which
			// stops the world, completes while it spins.
			gc := make(chan struct{})
			go func() { runtime.GC(); close(gc) }()
			select {
			case <-gc:
			case <-time.After(5 * time.Second):
				t.Fatal("runtime.GC did not complete while the guest ran")
			}
			select {
			case err := <-done:
				t.Fatalf("returned before the interrupt: %v", err)
			default:
			}
			interrupt(mod)
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "unreachable") {
					t.Fatalf("err = %v, want an unreachable trap", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the interrupt did not stop the loop")
			}
		})
	}
	// Interrupted, a loop traps at its first iteration.
	mod := instantiate(t, out, 0)
	interrupt(mod)
	if _, err := mod.ExportedFunction("count").Call(context.Background(), 2); err == nil {
		t.Fatal("count ran with the interrupt set")
	}
}

// interrupt does what the host's watchdog does.
func interrupt(mod api.Module) {
	mod.ExportedGlobal(InterruptGlobal).(api.MutableGlobal).Set(1)
	mod.ExportedGlobal(BudgetGlobal).(api.MutableGlobal).Set(1)
}

// The budget runs down and is refilled: a long loop without an interrupt
// runs to its end.
func TestBudgetRefills(t *testing.T) {
	out, _ := rewrite(t, testModule(countTo))
	mod := instantiate(t, out, 0)
	n := uint64(10 * Budget)
	res, err := mod.ExportedFunction("count").Call(context.Background(), n)
	if err != nil || res[0] != n {
		t.Fatalf("count(%d) = %v, %v", n, res, err)
	}
	if b := mod.ExportedGlobal(BudgetGlobal).Get(); b == 0 || b > Budget {
		t.Errorf("budget %d after the call", b)
	}
}

func TestFailedGrowSetsOOM(t *testing.T) {
	out, _ := rewrite(t, testModule(grow))
	mod := instantiate(t, out, 4) // memory: 1 page, at most 4
	oom := mod.ExportedGlobal(OOMGlobal)
	g := mod.ExportedFunction("grow")
	if res, err := g.Call(context.Background(), 2); err != nil || res[0] != 1 || oom.Get() != 0 {
		t.Fatalf("grow(2) = %v, %v, oom %d; want old size 1 and no oom", res, err, oom.Get())
	}
	if res, err := g.Call(context.Background(), 5); err != nil || int32(res[0]) != -1 || oom.Get() != 1 {
		t.Fatalf("grow(5) = %v, %v, oom %d; want -1 and oom 1", res, err, oom.Get())
	}
}

func TestStartBecomesExport(t *testing.T) {
	m := wt.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}, Extra: []wt.Func{spin}, Start: 1}
	out, st := rewrite(t, m.Build())
	if !st.Start {
		t.Fatal("start section not converted")
	}
	// Instantiating no longer runs the endless start function.
	mod := instantiate(t, out, 0)
	if mod.ExportedFunction(StartFunc) == nil {
		t.Fatalf("no %s export", StartFunc)
	}
}

func TestDropsDWARF(t *testing.T) {
	wasm := append(testModule(), wt.Section(0, append(wt.Name(".debug_info"), 1, 2, 3))...)
	funcNames := wt.Vec(append(wt.U32(0), wt.Name("f")...))
	names := append(wt.Name("name"), 1)
	names = append(names, wt.U32(uint32(len(funcNames)))...)
	wasm = append(wasm, wt.Section(0, append(names, funcNames...))...)
	out, _ := rewrite(t, wasm)
	if strings.Contains(string(out), ".debug_info") {
		t.Error("DWARF section kept")
	}
	if !strings.Contains(string(out), "\x04name") {
		t.Error("name section dropped")
	}
}

func TestRefuses(t *testing.T) {
	tests := []struct {
		name string
		wasm []byte
		want string
	}{
		{"not wasm", []byte("hello world"), "not a WebAssembly binary"},
		{"truncated", testModule(countTo)[:40], "unexpected end"},
		{"tail call", testModule(wt.Func{Type: wt.TypeVoid, Body: []byte{0x12, 0x00, 0x0B}}), "unsupported instruction 0x12"},
		{"export clash", testModule(wt.Func{Type: wt.TypeVoid, Body: []byte{0x0B}, Export: InterruptGlobal}), "already exports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Rewrite(tt.wasm)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

// The call-stack count returns to zero whatever way a function that makes
// calls exits (its end, a return, a br_if to its label) and whatever its
// results (one, or several through an added block type): 400,000 calls
// would pass StackUnits otherwise.
func TestStackCountIsBalanced(t *testing.T) {
	leaf := wt.Func{Type: wt.TypeI32ToI32, Body: []byte{0x20, 0x00, 0x0B}}
	exits := wt.Func{Type: wt.TypeI32ToI32, Body: []byte{
		0x20, 0x00, 0x10, 0x04, 0x1A, // call leaf; drop
		0x20, 0x00, 0x41, 0x01, 0x46, 0x04, 0x40, 0x41, 0x0A, 0x0F, 0x0B, // if x == 1: return 10
		0x41, 0x14, 0x20, 0x00, 0x41, 0x02, 0x46, 0x0D, 0x00, // 20; br_if 0 (x == 2)
		0x1A, 0x41, 0x28, 0x0B, // drop; 40
	}}
	loop := wt.Func{Type: wt.TypeI32ToI32, Locals: wt.Vec(append(wt.U32(2), wt.I32)), Export: "loop", Body: []byte{
		0x02, 0x40, 0x03, 0x40,
		0x20, 0x01, 0x20, 0x00, 0x4F, 0x0D, 0x01, // i >= n: out
		0x20, 0x02,
		0x20, 0x01, 0x41, 0x03, 0x71, 0x10, 0x05, 0x6A, // + exits(i & 3)
		0x20, 0x01, 0x41, 0x03, 0x71, 0x10, 0x07, 0x1A, 0x6A, // + first of multi(i & 3)
		0x21, 0x02,
		0x20, 0x01, 0x41, 0x01, 0x6A, 0x21, 0x01, // i++
		0x0C, 0x00, 0x0B, 0x0B,
		0x20, 0x02, 0x0B,
	}}
	multi := wt.Func{Type: wt.TypeExtra, Body: []byte{0x20, 0x00, 0x10, 0x04, 0x42, 0x07, 0x0B}} // (leaf(x), 7)
	wasm := wt.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B},
		Types: [][]byte{wt.FuncType([]byte{wt.I32}, []byte{wt.I32, wt.I64})},
		Extra: []wt.Func{leaf, exits, loop, multi}}.Build()
	out, st, err := Rewrite(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.blockTypes) != 1 {
		t.Errorf("%d block types added, want 1 (for multi's two results)", len(st.blockTypes))
	}
	mod := instantiate(t, out, 0)
	const n = 400_000
	res, err := mod.ExportedFunction("loop").Call(context.Background(), n)
	if err != nil {
		t.Fatalf("loop(%d): %v", n, err)
	}
	if want := uint64(n / 4 * (40 + 10 + 20 + 40 + 0 + 1 + 2 + 3)); res[0] != want {
		t.Errorf("loop(%d) = %d, want %d", n, res[0], want)
	}
	if hit := mod.ExportedGlobal(StackGlobal).Get(); hit != 0 {
		t.Errorf("%s = %d", StackGlobal, hit)
	}
}

// Endless recursion traps on the stack bound, setting StackGlobal.
func TestStackBoundTraps(t *testing.T) {
	rec := wt.Func{Type: wt.TypeVoid, Body: []byte{0x10, 0x04, 0x0B}, Export: "rec"}
	out, _, err := Rewrite(testModule(rec))
	if err != nil {
		t.Fatal(err)
	}
	mod := instantiate(t, out, 0)
	_, err = mod.ExportedFunction("rec").Call(context.Background())
	if err == nil || !strings.Contains(err.Error(), "unreachable") || mod.ExportedGlobal(StackGlobal).Get() != 1 {
		t.Fatalf("endless recursion: %v, %s = %d; want unreachable and 1", err, StackGlobal, mod.ExportedGlobal(StackGlobal).Get())
	}
}

// A module declaring more entries of a kind than Limits allow is refused,
// naming the limit.
func TestRefusesModulesOverCountLimits(t *testing.T) {
	lim := DefaultLimits
	lim.Types, lim.Imports, lim.Globals, lim.Exports = 2, 2, 2, 2
	lim.ElementSegments, lim.ElementItems, lim.DataSegments, lim.Functions = 2, 2, 2, 2
	void := wt.FuncType(nil, nil)
	imp := append(append(wt.Name("m"), wt.Name("f")...), 0x00, 0x00)
	glob := []byte{wt.I32, 0x00, 0x41, 0x00, 0x0B}
	exp := append(wt.Name("x"), 0x00, 0x00)
	passive := []byte{0x01, 0x00, 0x00} // passive, funcref, no items
	code := wt.Code(wt.NoLocals, 0x0B)
	three := func(e []byte) []byte { return wt.Vec(e, e, e) }
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"types", wt.Binary(wt.Section(1, three(void))), "declares 3 types; at most 2"},
		{"imports", wt.Binary(wt.Section(1, wt.Vec(void)), wt.Section(2, three(imp))), "declares 3 imports; at most 2"},
		{"functions", wt.Binary(wt.Section(1, wt.Vec(void)), wt.Section(3, three(wt.U32(0))), wt.Section(10, three(code))),
			"defines 3 functions; at most 2"},
		{"globals", wt.Binary(wt.Section(6, three(glob))), "declares 3 globals; at most 2"},
		{"exports", wt.Binary(wt.Section(1, wt.Vec(void)), wt.Section(3, wt.Vec(wt.U32(0))),
			wt.Section(7, wt.Vec(exp, append(wt.Name("y"), 0x00, 0x00), append(wt.Name("z"), 0x00, 0x00))), wt.Section(10, wt.Vec(code))),
			"declares 3 exports; at most 2"},
		{"element segments", wt.Binary(wt.Section(9, three(passive))), "declares 3 element segments; at most 2"},
		{"element items", wt.Binary(wt.Section(1, wt.Vec(void)), wt.Section(3, wt.Vec(wt.U32(0))),
			wt.Section(9, wt.Vec([]byte{0x01, 0x00, 0x03, 0x00, 0x00, 0x00})), wt.Section(10, wt.Vec(code))),
			"hold more than 2 items; at most 2"},
		{"data segments", wt.Binary(wt.Section(11, three([]byte{0x01, 0x00}))), "declares 3 data segments; at most 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := RewriteWithLimits(tc.wasm, lim)
			if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrLimit saying %q", err, tc.want)
			}
		})
	}
}

// A few MB of minimal types cost wazero's decoder about 480 bytes each, and
// cost the rewrite's own decoding too: 9 MB of them made Rewrite allocate
// 1.6 GB (and wazero 1.45 GB) before Limits.Types. Refused now, cheaply.
func TestTypeBombIsRefusedCheaply(t *testing.T) {
	const n = 3_000_000
	wasm := wt.Binary(wt.Section(1, append(wt.U32(n), bytes.Repeat([]byte{0x60, 0x00, 0x00}, n)...)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := Rewrite(wasm)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("err = %v, want ErrLimit", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("refusing a %d-byte module allocated %d bytes", len(wasm), alloc)
	}
}
