package wasmhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sluicehq/sluice/wasmhost/internal/instrument"
)

// ModuleInfo describes a module binary, for operators (sluice module
// inspect). Which tables a module writes is not in the binary: the host
// declares the target tables at init, and the module accepts or refuses
// them then.
type ModuleInfo struct {
	SHA256 string
	Size   int
	// ABIVersion is what sluice_abi_version returned, 0 if the module could
	// not be loaded.
	ABIVersion int
	// Imports and Exports are "module.name(params) -> results" and
	// "name(params) -> results" (or "name (memory)"), sorted.
	Imports []string
	Exports []string
	// LoadErr is why Load refuses the module with r's limits, nil if it
	// loads.
	LoadErr error
}

// Inspect decodes a module and tries to load it with r's limits. It fails
// only if the binary does not decode; a module Load refuses is described,
// with LoadErr set.
func (r *Runtime) Inspect(ctx context.Context, name string, wasm []byte) (*ModuleInfo, error) {
	if !IsWasm(wasm) {
		return nil, fmt.Errorf("module %s: not a WebAssembly binary (no \\0asm magic)", name)
	}
	sum := sha256.Sum256(wasm)
	info := &ModuleInfo{SHA256: hex.EncodeToString(sum[:]), Size: len(wasm)}
	// A module over the structure limits would cost wazero's decoder too:
	// describe it by the refusal alone.
	if _, _, err := instrument.RewriteWithLimits(wasm, structureLimits); err != nil {
		info.LoadErr = fmt.Errorf("module %s: %w", name, err)
		return info, nil
	}
	// The interpreter decodes without compiling: quick, and enough to list.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer rt.Close(ctx)
	code, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", name, err)
	}
	for _, f := range code.ImportedFunctions() {
		mod, fn, _ := f.Import()
		info.Imports = append(info.Imports, mod+"."+fn+signature(f))
	}
	for _, m := range code.ImportedMemories() {
		mod, n, _ := m.Import()
		info.Imports = append(info.Imports, mod+"."+n+" (memory)")
	}
	for n, f := range code.ExportedFunctions() {
		info.Exports = append(info.Exports, n+signature(f))
	}
	for n := range code.ExportedMemories() {
		info.Exports = append(info.Exports, n+" (memory)")
	}
	sort.Strings(info.Imports)
	sort.Strings(info.Exports)
	if m, err := r.Load(ctx, name, wasm); err != nil {
		info.LoadErr = err
	} else {
		info.ABIVersion = m.Version
	}
	return info, nil
}

func signature(f api.FunctionDefinition) string {
	types := func(ts []api.ValueType) string {
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = api.ValueTypeName(t)
		}
		return strings.Join(names, ", ")
	}
	s := "(" + types(f.ParamTypes()) + ")"
	if res := f.ResultTypes(); len(res) > 0 {
		s += " -> " + types(res)
	}
	return s
}
