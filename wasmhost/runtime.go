package wasmhost

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// ABIVersion is the guest ABI version this host implements.
const ABIVersion = 1

// SupportedABIVersions lists every guest ABI version this host accepts.
var SupportedABIVersions = []int{ABIVersion}

// Config configures a Runtime.
type Config struct {
	// CacheDir holds compiled modules across restarts. Empty disables the
	// on-disk cache (modules are still compiled once per process).
	CacheDir string
	// Logger receives module log lines. Default slog.Default().
	Logger *slog.Logger
}

// Runtime compiles and instantiates modules. It is safe for concurrent use.
type Runtime struct {
	rt  wazero.Runtime
	log *slog.Logger

	mu      sync.Mutex
	modules map[string]*Module // by sha256
	seq     atomic.Int64
}

// NewRuntime creates a runtime with the WASI and sluice host modules.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	rc := wazero.NewRuntimeConfigCompiler()
	if cfg.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm compilation cache %s: %w", cfg.CacheDir, err)
		}
		rc = rc.WithCompilationCache(cache)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runtime{rt: wazero.NewRuntimeWithConfig(ctx, rc), log: cfg.Logger, modules: map[string]*Module{}}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	if _, err := r.rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().WithFunc(r.guestLog).Export("log").
		Instantiate(ctx); err != nil {
		return nil, fmt.Errorf("instantiate host module: %w", err)
	}
	return r, nil
}

// Close releases every module and instance.
func (r *Runtime) Close(ctx context.Context) error { return r.rt.Close(ctx) }

const hostModule = "sluice"

// forbiddenWASI are WASI functions no normalization module needs.
var forbiddenWASI = map[string]bool{
	"sock_accept": true, "sock_recv": true, "sock_send": true, "sock_shutdown": true,
	"sock_open": true, "sock_bind": true, "sock_connect": true, "sock_listen": true,
}

// Module is a compiled, validated module.
type Module struct {
	Name    string
	SHA256  string
	Version int // ABI version the module reports
	rt      *Runtime
	code    wazero.CompiledModule
}

// Load compiles a module (once per sha256) and validates its imports,
// exports and ABI version. name tags the module in logs and errors.
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Module, error) {
	if !IsWasm(wasm) {
		return nil, fmt.Errorf("module %s: not a WebAssembly binary (no \\0asm magic)", name)
	}
	sum := sha256.Sum256(wasm)
	key := hex.EncodeToString(sum[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	if m, ok := r.modules[key]; ok {
		return m, nil
	}
	code, err := r.rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("module %s: compile: %w", name, err)
	}
	if err := checkImports(code); err != nil {
		_ = code.Close(ctx)
		return nil, fmt.Errorf("module %s: %w", name, err)
	}
	exports := code.ExportedFunctions()
	for _, want := range []string{"sluice_abi_version", "sluice_alloc", "sluice_init", "sluice_transform"} {
		if _, ok := exports[want]; !ok {
			_ = code.Close(ctx)
			return nil, fmt.Errorf("module %s: missing export %s: not a sluice module (see guest-sdk/ABI.md)", name, want)
		}
	}
	m := &Module{Name: name, SHA256: key, rt: r, code: code}
	// The version handshake needs a running instance.
	inst, err := m.instantiate(ctx)
	if err != nil {
		_ = code.Close(ctx)
		return nil, err
	}
	v, err := inst.call(ctx, inst.fnVersion)
	_ = inst.Close(ctx)
	if err != nil {
		_ = code.Close(ctx)
		return nil, fmt.Errorf("module %s: sluice_abi_version: %w", name, err)
	}
	m.Version = int(int32(v))
	if !supported(m.Version) {
		_ = code.Close(ctx)
		return nil, fmt.Errorf("module %s: built for guest ABI version %d; this host supports %v", name, m.Version, SupportedABIVersions)
	}
	r.modules[key] = m
	return m, nil
}

// IsWasm reports whether b starts like a WebAssembly binary.
func IsWasm(b []byte) bool { return len(b) >= 8 && string(b[:4]) == "\x00asm" }

func supported(v int) bool {
	for _, s := range SupportedABIVersions {
		if s == v {
			return true
		}
	}
	return false
}

func checkImports(code wazero.CompiledModule) error {
	for _, f := range code.ImportedFunctions() {
		mod, name, _ := f.Import()
		switch mod {
		case wasi_snapshot_preview1.ModuleName:
			if forbiddenWASI[name] {
				return fmt.Errorf("imports %s.%s, which the sandbox does not provide", mod, name)
			}
		case hostModule:
			if name != "log" {
				return fmt.Errorf("imports %s.%s, which is not part of the sluice ABI", mod, name)
			}
		default:
			return fmt.Errorf("imports %s.%s: only %s and %s imports are allowed", mod, name, wasi_snapshot_preview1.ModuleName, hostModule)
		}
	}
	if len(code.ImportedMemories()) > 0 {
		return fmt.Errorf("imports a memory; a module must define its own")
	}
	return nil
}

// Imports lists the module's imports as "module.name".
func (m *Module) Imports() []string {
	var out []string
	for _, f := range m.code.ImportedFunctions() {
		mod, name, _ := f.Import()
		out = append(out, mod+"."+name)
	}
	return out
}

// Exports lists the module's exported functions.
func (m *Module) Exports() []string {
	var out []string
	for name := range m.code.ExportedFunctions() {
		out = append(out, name)
	}
	return out
}

// guestLog implements sluice.log.
func (r *Runtime) guestLog(ctx context.Context, mod api.Module, level, ptr, n uint32) {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	const max = 4096
	if len(b) > max {
		b = b[:max]
	}
	lvl := slog.LevelInfo
	switch level {
	case 0:
		lvl = slog.LevelDebug
	case 2:
		lvl = slog.LevelWarn
	case 3:
		lvl = slog.LevelError
	}
	r.log.Log(ctx, lvl, strings.TrimRight(string(b), "\n"), "module", mod.Name())
}

// sandboxConfig is the module configuration every instance gets: no
// filesystem, no arguments, no environment; a real clock and crypto
// randomness because standard-Go guests need them to start.
func (r *Runtime) sandboxConfig(name string, stdout, stderr *lineLogger) wazero.ModuleConfig {
	return wazero.NewModuleConfig().
		WithName(name).
		WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(stdout).WithStderr(stderr)
}
