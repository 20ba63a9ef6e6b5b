package tenancy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/wasmhost"
)

// CheckWasm is the static part of Validator.CheckUpload: it loads the
// module in a throwaway wasmhost runtime with cfg (its limits, and its
// CacheDir so that the compilation is reused when the module is
// activated), which decodes and compiles it, checks its imports and
// exports and asks its ABI version. The error says what is wrong.
//
// Why a throwaway runtime? A Runtime keeps every module it loads; the
// engine's would accumulate every upload, activated or not.
func CheckWasm(ctx context.Context, cfg wasmhost.Config, wasm []byte) error {
	sum := sha256.Sum256(wasm)
	return CheckWasmAs(ctx, cfg, hex.EncodeToString(sum[:6]), wasm)
}

// CheckWasmAs is CheckWasm naming the module name in errors and in the
// call journal (cfg.Journal).
func CheckWasmAs(ctx context.Context, cfg wasmhost.Config, name string, wasm []byte) error {
	if !wasmhost.IsWasm(wasm) {
		return errors.New("not a WebAssembly binary (no \\0asm magic); upload the .wasm file the build produced")
	}
	rt, err := wasmhost.NewRuntime(ctx, cfg)
	if err != nil {
		return fmt.Errorf("check module: %w", err)
	}
	defer rt.Close(ctx)
	_, err = rt.Load(ctx, name, wasm)
	return err
}
