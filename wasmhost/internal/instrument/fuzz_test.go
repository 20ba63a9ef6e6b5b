package instrument

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	wt "github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// The fuzz targets compare the rewrite with wazero's own judgment of a
// module, whatever the bytes. Their corpora (testdata/fuzz/<target>) hold
// random valid modules of wasm-smith, invalid ones (wasm-smith with invalid
// function bodies, and mutations), the repository's modules and the ones
// the fuzzing kept or found; the fuzz:instrument:seeds task (go tool
// -modfile=tools/go.mod task …) makes the generated ones again (it needs
// wasm-tools), fuzz:instrument fuzzes. A plain `go test` replays them.

// fuzzSeeds are the seeds every target starts from, besides its corpus.
func fuzzSeeds(f *testing.F) {
	f.Add(testModule(countTo, spin, grow, callSpin))
	f.Add(wt.Module{Version: 1, Transform: []byte{0x00, 0x0B}, Extra: []wt.Func{spin}, Start: 1}.Build())
	f.Add(wt.Binary())
	for _, fn := range []string{"sluice_abi_version", "sluice_init", "sluice_transform"} {
		f.Add(wt.UndeclaredGlobals(fn))
	}
	for _, tc := range outOfRange {
		f.Add(tc.wasm)
	}
	f.Add(wt.TableGrow(wt.Table{Min: 1}))
	f.Add(wt.StackOverflow())
	f.Add(wt.MemoryGrow())
}

// wazeroErrRecovered is wazeroErr for a module Rewrite refuses: wazero
// may panic on an invalid module (wazero 1.12 does on a function whose
// type index is out of range, when a call names it), which is one more
// reason for the host to check a module before wazero sees it.
func wazeroErrRecovered(rt wazero.Runtime, wasm []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("wazero panics: %v", p)
		}
	}()
	return wazeroErr(rt, wasm)
}

// withoutDropped is wasm without the custom sections the rewrite drops:
// DWARF, whose offsets the rewrite would make wrong, and name sections
// whose lengths are impossible, which wazero would allocate by.
func withoutDropped(wasm []byte) []byte {
	r := &reader{b: wasm, off: 8}
	out := append([]byte{}, wasm[:8]...)
	for r.off < len(r.b) && r.err == nil {
		start := r.off
		id := r.byte()
		body := r.bytes(int(r.u32()))
		if r.err == nil && !(id == secCustom && (isDWARF(body) || !namesOK(body))) {
			out = append(out, wasm[start:r.off]...)
		}
	}
	return out
}

// FuzzRewrite: for any bytes, wazero accepts the module if and only if
// Rewrite rewrites it and wazero accepts the rewritten module, but for the
// limits and features the host refuses (ErrLimit, ErrUnsupported); and
// every rewritten module passes verify (no guest instruction reaches what
// the rewrite adds). A module wazero refuses and Rewrite accepts must
// stay refused once rewritten: that is the widening this target looks for.
func FuzzRewrite(f *testing.F) {
	fuzzSeeds(f)
	rt := newValidator(f)
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, _, invalid, err := rewriteModule(wasm, DefaultLimits)
		if err != nil {
			// Refused before the whole module was read: wazero's decoder
			// is not safe on it (it allocates by declared lengths).
			checkRefusal(t, err)
			return
		}
		if invalid != nil {
			checkRefusal(t, invalid)
			if !errors.Is(invalid, ErrInvalid) {
				t.Fatalf("a refusal after the whole module was read is not ErrInvalid: %v", invalid)
			}
			if wazeroErrRecovered(rt, withoutDropped(wasm)) == nil {
				t.Fatalf("wazero accepts the module; Rewrite calls it invalid: %v", invalid)
			}
			return
		}
		// Rewrite accepts it: a panic of wazero's is a finding.
		origErr := wazeroErr(rt, withoutDropped(wasm))
		if err := verify(wasm, out); err != nil {
			t.Fatalf("verify: %v", err)
		}
		switch outErr := wazeroErr(rt, out); {
		case origErr == nil && outErr != nil:
			t.Fatalf("wazero accepts the module but not its rewrite: %v", outErr)
		case origErr != nil && outErr == nil:
			t.Fatalf("wazero refuses the module (%v) but accepts its rewrite", origErr)
		}
	})
}

// FuzzRewriteRuns: a module without imports that wazero accepts behaves
// the same rewritten, where that is cheap to see: each exported function,
// called in turn with zero arguments, returns the same results or traps
// in both, and the memory ends the same. Calls that take too long, and
// traps of the rewrite's stack bound, are not compared. The original runs
// in wazero's interpreter, the rewrite in its compiler, as the host runs
// it (so a panic of the compiler on a rewritten module is a finding too).
func FuzzRewriteRuns(f *testing.F) {
	fuzzSeeds(f)
	// Memories of at most 16 MiB: a module may declare 4 GiB, which the
	// interpreter would allocate at once (a worker once reached 3 GB).
	const pages = 256
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().
		WithDebugInfoEnabled(false).WithCloseOnContextDone(true).WithMemoryLimitPages(pages))
	compiler := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().
		WithDebugInfoEnabled(false).WithCloseOnContextDone(true).WithMemoryLimitPages(pages))
	f.Cleanup(func() {
		rt.Close(ctx)
		compiler.Close(ctx)
	})
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, _, err := Rewrite(wasm)
		if err != nil {
			return
		}
		orig, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			return
		}
		defer orig.Close(ctx)
		if len(orig.ImportedFunctions()) > 0 || len(orig.ImportedMemories()) > 0 {
			return
		}
		rewritten, err := compiler.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero's compiler refuses the rewrite: %v", err)
		}
		defer rewritten.Close(ctx)
		a, ok := runExports(rt, orig, false)
		if !ok {
			return
		}
		b, ok := runExports(compiler, rewritten, true)
		if !ok {
			return
		}
		if a != b {
			t.Fatalf("the rewrite behaves otherwise:\noriginal:  %s\nrewritten: %s", a, b)
		}
	})
}

// runExports instantiates m and calls its exported functions, in name
// order, with zero arguments, and describes what they did; ok is false if
// a call ran out of time, the module cannot be instantiated without
// imports, or the rewrite's stack bound stopped a call.
func runExports(rt wazero.Runtime, m wazero.CompiledModule, rewritten bool) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out strings.Builder
	inst, err := rt.InstantiateModule(ctx, m, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err == nil && rewritten {
		if start := inst.ExportedFunction(StartFunc); start != nil {
			_, err = start.Call(ctx)
		}
	}
	if ctx.Err() != nil {
		return "", false
	}
	if err != nil {
		if !strings.Contains(err.Error(), "wasm error") && !strings.Contains(err.Error(), "start function") {
			return "", false // an import wazero cannot provide, or the like
		}
		return "start traps", true
	}
	defer inst.Close(context.Background())
	names := make([]string, 0, len(m.ExportedFunctions()))
	for name := range m.ExportedFunctions() {
		if !strings.HasPrefix(name, "__sluice_") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		fn := inst.ExportedFunction(name)
		res, err := fn.Call(ctx, make([]uint64, len(fn.Definition().ParamTypes()))...)
		if ctx.Err() != nil {
			return "", false
		}
		if err != nil {
			if rewritten && inst.ExportedGlobal(StackGlobal).Get() != 0 {
				return "", false
			}
			if errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "wasm error") {
				return "", false
			}
			fmt.Fprintf(&out, "%s traps; ", name)
			if strings.Contains(err.Error(), "stack overflow") {
				return "", false // where the rewrite's bound and wazero's differ
			}
			continue
		}
		fmt.Fprintf(&out, "%s = %v; ", name, canonical(fn.Definition().ResultTypes(), res))
	}
	for name := range m.ExportedMemories() {
		mem := inst.ExportedMemory(name)
		if size := mem.Size(); size <= 1<<20 {
			b, _ := mem.Read(0, size)
			fmt.Fprintf(&out, "memory %d bytes %x", size, sha256.Sum256(b))
		}
		break // a module has one memory
	}
	return out.String(), true
}

// canonical is a call's results with the NaNs made one, so that two runs
// that agree up to a NaN's bits compare equal.
func canonical(types []api.ValueType, res []uint64) []uint64 {
	out := slices.Clone(res)
	for i, t := range types {
		if i >= len(out) {
			break
		}
		switch t {
		case api.ValueTypeF32:
			if v := api.DecodeF32(out[i]); v != v {
				out[i] = 0x7FC00000
			}
		case api.ValueTypeF64:
			if v := api.DecodeF64(out[i]); v != v {
				out[i] = 0x7FF8000000000000
			}
		}
	}
	return out
}

// The corpora must stay small enough for go test to replay them quickly.
func TestFuzzCorpusSize(t *testing.T) {
	var total int
	for _, target := range []string{"FuzzRewrite", "FuzzRewriteRuns"} {
		n, size := corpusSize(t, target)
		t.Logf("%s: %d inputs, %d bytes", target, n, size)
		total += size
	}
	if total > 6<<20 {
		t.Errorf("the fuzz corpora take %d bytes; keep them under 6 MiB", total)
	}
}

// corpusSize is the number and bytes of the inputs of a target's corpus.
func corpusSize(t *testing.T, target string) (n, size int) {
	entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", target))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n++
		size += int(info.Size())
	}
	return n, size
}
