package instrument

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"

	wt "github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// Section bodies for hand-built modules: vectors of entries.
func types(ts ...[]byte) []byte { return wt.Section(secType, wt.Vec(ts...)) }
func funcs(ts ...uint32) []byte { return wt.Section(secFunction, wt.Vec(u32s(ts)...)) }
func memoryOf(pages uint32) []byte {
	return wt.Section(secMemory, wt.Vec(append([]byte{0x00}, wt.U32(pages)...)))
}
func tableOf(min uint32) []byte {
	return wt.Section(secTable, wt.Vec(append([]byte{0x70, 0x00}, wt.U32(min)...)))
}
func start(f uint32) []byte     { return wt.Section(secStart, wt.U32(f)) }
func dataCount(n uint32) []byte { return wt.Section(secDataCnt, wt.U32(n)) }
func code(bodies ...[]byte) []byte {
	var cs [][]byte
	for _, b := range bodies {
		cs = append(cs, wt.Code(wt.NoLocals, b...))
	}
	return wt.Section(secCode, wt.Vec(cs...))
}

func u32s(vs []uint32) [][]byte {
	var out [][]byte
	for _, v := range vs {
		out = append(out, wt.U32(v))
	}
	return out
}

// export is an export entry of kind (0 function, 3 global) and index.
func export(name string, kind byte, idx uint32) []byte {
	return append(append(wt.Name(name), kind), wt.U32(idx)...)
}

func exports(es ...[]byte) []byte { return wt.Section(secExport, wt.Vec(es...)) }

// global is a global entry of type i32, mutable or not, set to 0.
func global(mutable bool) []byte {
	g := []byte{wt.I32, 0x00, 0x41, 0x00, 0x0B}
	if mutable {
		g[1] = 0x01
	}
	return g
}

func globals(gs ...[]byte) []byte { return wt.Section(secGlobal, wt.Vec(gs...)) }

var (
	void     = wt.FuncType(nil, nil)
	i32ToI32 = wt.FuncType([]byte{wt.I32}, []byte{wt.I32})
)

// one is a module of one function of type () -> (), exported as "f", whose
// body is instrs (ending with 0x0B), with more sections.
func one(instrs []byte, more ...[]byte) []byte {
	secs := [][]byte{types(void), funcs(0)}
	secs = append(secs, more...)
	secs = append(secs, exports(export("f", 0, 0)), code(instrs))
	return wt.Binary(sortSections(secs)...)
}

// sortSections puts sections in the order the binary format wants.
func sortSections(secs [][]byte) [][]byte {
	out := append([][]byte{}, secs...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && order[out[j][0]] < order[out[j-1][0]]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// outOfRange are modules that use an index their own index spaces do not
// have, or are otherwise malformed in their structure. widens says that
// the rewrite, had it not refused the module, would have made it valid:
// the index is one of what the rewrite adds.
var outOfRange = []struct {
	name   string
	wasm   []byte
	want   string
	widens bool
}{
	{"global.get of a global the module lacks", one([]byte{0x23, 0x00, 0x1A, 0x0B}),
		"global.get 0: the module has no global 0 (it has 0 globals)", true},
	{"global.set of a global the module lacks", one([]byte{0x41, 0x00, 0x24, 0x02, 0x0B}),
		"global.set 2: the module has no global 2 (it has 0 globals)", true},
	{"global.set past the module's globals", one([]byte{0x41, 0x00, 0x24, 0x01, 0x0B}, globals(global(true))),
		"global.set 1: the module has no global 1 (it has 1 global)", true},
	{"global.set of an immutable global", one([]byte{0x41, 0x00, 0x24, 0x00, 0x0B}, globals(global(false))),
		"global.set 0: global 0 is immutable", false},
	{"call of a function the module lacks", one([]byte{0x10, 0x01, 0x0B}),
		"call 1: the module has no function 1 (it has 1 function)", true},
	{"ref.func of a function the module lacks", one([]byte{0xD2, 0x01, 0x1A, 0x0B}),
		"ref.func 1: the module has no function 1", false},
	{"ref.func of a function not declared", wt.Binary(types(void), funcs(0, 0), exports(export("f", 0, 0)),
		code([]byte{0xD2, 0x01, 0x1A, 0x0B}, []byte{0x0B})),
		"ref.func 1: function 1 is not declared", false},
	{"ref.func of the start function", wt.Binary(types(void), funcs(0, 0), start(1),
		code([]byte{0xD2, 0x01, 0x1A, 0x0B}, []byte{0x0B})),
		"ref.func 1: function 1 is not declared", true},
	{"call_indirect of a type the module lacks", one([]byte{0x41, 0x00, 0x11, 0x01, 0x00, 0x0B}, tableOf(1)),
		"call_indirect 1: the module has no type 1 (it has 1 type)", true},
	{"block of a type the module lacks", one([]byte{0x02, 0x02, 0x0B, 0x0B}),
		"block: the module has no type 2 (it has 1 type)", false},
	{"local past the function's", one([]byte{0x20, 0x00, 0x1A, 0x0B}),
		"local.get 0: the module has no local 0 (it has 0 locals)", false},
	{"br past the function's label", one([]byte{0x10, 0x00, 0x0C, 0x01, 0x0B}),
		"br 1: no label 1 (1 block open around it, the function's included)", true},
	{"br_table past the labels", one([]byte{0x02, 0x40, 0x41, 0x00, 0x0E, 0x01, 0x00, 0x02, 0x0B, 0x0B}),
		"br_table 2: no label 2", false},
	{"table.get without a table", one([]byte{0x41, 0x00, 0x25, 0x00, 0x1A, 0x0B}),
		"table.get 0: the module has no table 0 (it has 0 tables)", false},
	{"load without a memory", one([]byte{0x41, 0x00, 0x28, 0x02, 0x00, 0x1A, 0x0B}),
		"a load or store, and the module has no memory", false},
	{"memory.grow without a memory", one([]byte{0x41, 0x00, 0x40, 0x00, 0x1A, 0x0B}),
		"memory.grow, and the module has no memory", false},
	{"memory.grow of memory 0 in two bytes", one([]byte{0x41, 0x00, 0x40, 0x80, 0x00, 0x1A, 0x0B}, memoryOf(1)),
		"memory.grow of memory -1: only memory 0 is supported, as one zero byte", true},
	{"elem.drop without element segments", one([]byte{0xFC, 0x0D, 0x00, 0x0B}),
		"elem.drop: the module has no element segment 0 (it has 0 element segments)", false},
	{"data.drop without a data count section", one([]byte{0xFC, 0x09, 0x00, 0x0B}, memoryOf(1)),
		"data.drop without a data count section", false},
	{"memory.init past the data segments", one([]byte{0x41, 0x00, 0x41, 0x00, 0x41, 0x00, 0xFC, 0x08, 0x00, 0x00, 0x0B},
		memoryOf(1), dataCount(0), wt.Section(secData, wt.Vec())),
		"memory.init: the module has no data segment 0 (it has 0 data segments)", false},
	{"export of a global the module lacks", wt.Binary(exports(export("g", 3, 0))),
		`export "g": global 0 out of range (the module has 0 globals)`, true},
	{"export of a function the module lacks", wt.Binary(types(void), funcs(0), exports(export("f", 0, 1)), code([]byte{0x0B})),
		`export "f": function 1 out of range (the module has 1 function)`, true},
	{"start function the module lacks", wt.Binary(types(void), funcs(0), start(1), code([]byte{0x0B})),
		"start section: function 1 out of range", true},
	{"start function with a parameter", wt.Binary(types(i32ToI32), funcs(0), start(0), code([]byte{0x20, 0x00, 0x0B})),
		"start section: function 0 takes parameters or returns results", true},
	{"element segment of a function the module lacks", wt.Binary(types(void), funcs(0), tableOf(1),
		wt.Section(secElement, wt.Vec(append([]byte{0x00, 0x41, 0x00, 0x0B}, wt.Vec(wt.U32(1))...))), code([]byte{0x0B})),
		"element segment 0: function 1 out of range (the module has 1 function)", true},
	{"global initializer of a global the module lacks", wt.Binary(globals([]byte{wt.I32, 0x00, 0x23, 0x00, 0x0B})),
		"a constant expression reads global 0", false},
	{"functions without code", wt.Binary(types(void), funcs(0)),
		"the function section declares 1 functions and there is no code section", false},
	{"data count that is not the data segments'", one([]byte{0x0B}, dataCount(1)),
		"the data count section says 1 data segments; the data section has 0", false},
	{"repeated section", wt.Binary(types(void), types(void)),
		"section 1 out of order or repeated", false},
	{"else outside an if", one([]byte{0x02, 0x40, 0x05, 0x0B, 0x0B}),
		"else outside an if", false},
	{"code after the function's end", one([]byte{0x0B, 0x01, 0x0B}),
		"code after the end of the function", false},
}

// A module whose indices are out of range of its own index spaces is
// refused as invalid, naming the function, the instruction and the index
// — wazero refuses it too — and had it been rewritten, some would have
// been valid, reaching what the rewrite adds.
func TestRefusesIndicesPastTheModule(t *testing.T) {
	rt := newValidator(t)
	for _, tc := range outOfRange {
		t.Run(tc.name, func(t *testing.T) {
			if err := wazeroErr(rt, tc.wasm); err == nil {
				t.Fatal("wazero accepts the module: not a test of an invalid one")
			}
			_, _, err := Rewrite(tc.wasm)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Rewrite: %v; want ErrInvalid saying %q", err, tc.want)
			}
			checkRefusal(t, err)
			out, _, invalid, err := rewriteModule(tc.wasm, DefaultLimits)
			if err != nil || invalid == nil {
				t.Fatalf("rewriteModule: %v, %v; want the module read through and found invalid", err, invalid)
			}
			if widened := wazeroErr(rt, out) == nil; widened != tc.widens {
				t.Errorf("wazero accepts the unchecked rewrite: %v; want %v", widened, tc.widens)
			}
		})
	}
}

// The three modules of issue 46, which froze the process: each is refused,
// naming the function and the global.
func TestUndeclaredGlobalsAreRefused(t *testing.T) {
	rt := newValidator(t)
	for _, tc := range []struct {
		fn    string
		index int
	}{{"sluice_abi_version", 0}, {"sluice_init", 2}, {"sluice_transform", 3}} {
		t.Run(tc.fn, func(t *testing.T) {
			wasm := wt.UndeclaredGlobals(tc.fn)
			_, _, err := Rewrite(wasm)
			want := fmt.Sprintf("function %d (%s): global.set 0: the module has no global 0 (it has 0 globals)", tc.index, tc.fn)
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("Rewrite: %v; want ErrInvalid saying %q", err, want)
			}
			out, _, _, _ := rewriteModule(wasm, DefaultLimits)
			if err := wazeroErr(rt, out); err != nil {
				t.Errorf("the unchecked rewrite is not the valid module the issue describes: %v", err)
			}
			if err := verify(wasm, out); err == nil || !strings.Contains(err.Error(), "global.set of global 0: the original has 0") {
				t.Errorf("verify of the unchecked rewrite: %v; want the guest's global.set 0 caught", err)
			}
		})
	}
}

// newValidator is a wazero runtime that decodes and validates modules
// (the interpreter compiles quickly), with the features the host enables.
func newValidator(tb testing.TB) wazero.Runtime {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().
		WithDebugInfoEnabled(false).WithCloseOnContextDone(true))
	tb.Cleanup(func() { rt.Close(ctx) })
	return rt
}

// wazeroErr is why wazero refuses wasm, nil if it accepts it.
func wazeroErr(rt wazero.Runtime, wasm []byte) error {
	ctx := context.Background()
	m, err := rt.CompileModule(ctx, wasm)
	if err == nil {
		m.Close(ctx)
	}
	return err
}

// checkRefusal fails t unless err is a refusal a user may read: of one
// of the classes, on one line.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	if !classified(err) {
		t.Fatalf("a refusal of no class: %v", err)
	}
	if strings.ContainsAny(msg, "\n\r") || len(msg) > 1000 || strings.Contains(msg, "goroutine") {
		t.Fatalf("a refusal a user cannot read: %q", msg)
	}
}
