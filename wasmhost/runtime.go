package wasmhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/sluicehq/sluice/wasmhost/internal/instrument"
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
	// Limits are the limits of modules loaded with Load. Zero fields take
	// their defaults (see Limits).
	Limits Limits

	// Journal, if set, records every call in progress of the runtime's
	// instances for a watcher outside the process (OpenCallJournal).
	// Default: none.
	Journal *CallJournal

	// For benchmarks: load modules without the interrupt instrumentation
	// (no deadline), or with wazero's WithCloseOnContextDone instead.
	uninstrumented     bool
	closeOnContextDone bool
}

// Runtime compiles and instantiates modules. It is safe for concurrent use.
//
// Why one wazero runtime per memory limit? wazero caps linear memory per
// runtime (WithMemoryLimitPages), so modules with different caps live in
// different wazero runtimes. They share one compilation cache, so a module
// is compiled once whatever its limits.
type Runtime struct {
	cfg   Config
	log   *slog.Logger
	cache wazero.CompilationCache

	mu        sync.Mutex
	sandboxes map[uint32]wazero.Runtime // by memory limit in pages
	modules   map[moduleKey]*Module
	closed    bool
	seq       atomic.Int64
	watchdog  watchdog
	instances sync.Map // instance name → *Module, for sluice.log
	// loaded holds the sha256 of every module in modules. Loaded reads it
	// without mu: PruneCache calls Loaded holding the cache's lock, which
	// a Load takes while holding mu.
	loaded sync.Map
}

// moduleKey names a loaded module. The name is part of it: a Module's
// Name tags its logs, errors and call-journal records, so a binary loaded
// under two names (two tenants' pipelines) is two Modules; wazero's
// compilation cache still compiles it once.
type moduleKey struct {
	sha256 string
	limits Limits
	name   string
}

// NewRuntime creates a runtime with the WASI and sluice host modules.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lim, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("wasmhost config: %w", err)
	}
	cfg.Limits = lim
	r := &Runtime{cfg: cfg, log: cfg.Logger, sandboxes: map[uint32]wazero.Runtime{}, modules: map[moduleKey]*Module{}}
	if cfg.CacheDir != "" {
		if r.cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("wasm compilation cache %s: %w", cfg.CacheDir, err)
		}
	} else {
		r.cache = wazero.NewCompilationCache()
	}
	// Create the default limits' sandbox now, so that a setup error surfaces here.
	r.mu.Lock()
	_, err = r.sandbox(ctx, lim.memoryPages())
	r.mu.Unlock()
	if err != nil {
		_ = r.cache.Close(ctx)
		return nil, err
	}
	return r, nil
}

// Close releases every module and instance.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.watchdog.close()
	var errs []error
	for _, rt := range r.sandboxes {
		errs = append(errs, rt.Close(ctx))
	}
	errs = append(errs, r.cache.Close(ctx))
	return errors.Join(errs...)
}

// sandbox returns the wazero runtime for a memory limit, creating it with
// the WASI and sluice host modules. r.mu is held.
func (r *Runtime) sandbox(ctx context.Context, pages uint32) (wazero.Runtime, error) {
	if rt, ok := r.sandboxes[pages]; ok {
		return rt, nil
	}
	rc := wazero.NewRuntimeConfigCompiler().
		WithCompilationCache(r.cache).
		WithMemoryLimitPages(pages).
		WithCloseOnContextDone(r.cfg.closeOnContextDone)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate WASI: %w", err)
	}
	if _, err := rt.NewHostModuleBuilder(hostModule).
		NewFunctionBuilder().WithFunc(r.guestLog).Export("log").
		Instantiate(ctx); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("instantiate host module: %w", err)
	}
	r.sandboxes[pages] = rt
	return rt, nil
}

const hostModule = "sluice"

// allowedWASI are the wasi_snapshot_preview1 functions a module may import:
// all of preview1 but sockets. The sandbox gives them no preopened
// directory, no arguments and no environment, so the fd_* and path_*
// functions can reach only stdin (empty), stdout and stderr (logged by the
// host, rate-limited); clocks are real, random_get is crypto/rand,
// poll_oneoff and sched_yield sleep at most until the call's deadline, and
// proc_exit fails the instance (ExitError).
var allowedWASI = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_res_get": true, "clock_time_get": true,
	"fd_advise": true, "fd_allocate": true, "fd_close": true, "fd_datasync": true,
	"fd_fdstat_get": true, "fd_fdstat_set_flags": true, "fd_fdstat_set_rights": true,
	"fd_filestat_get": true, "fd_filestat_set_size": true, "fd_filestat_set_times": true,
	"fd_pread": true, "fd_prestat_dir_name": true, "fd_prestat_get": true, "fd_pwrite": true,
	"fd_read": true, "fd_readdir": true, "fd_renumber": true, "fd_seek": true, "fd_sync": true,
	"fd_tell": true, "fd_write": true,
	"path_create_directory": true, "path_filestat_get": true, "path_filestat_set_times": true,
	"path_link": true, "path_open": true, "path_readlink": true, "path_remove_directory": true,
	"path_rename": true, "path_symlink": true, "path_unlink_file": true,
	"poll_oneoff": true, "proc_exit": true, "proc_raise": true, "random_get": true, "sched_yield": true,
}

// AllowedWASI lists the wasi_snapshot_preview1 functions a module may import.
func AllowedWASI() []string {
	out := make([]string, 0, len(allowedWASI))
	for name := range allowedWASI {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Module is a compiled, validated module with its limits. It is safe for
// concurrent use; each Instance belongs to one goroutine.
type Module struct {
	Name    string
	SHA256  string // of the module as uploaded
	Version int    // ABI version the module reports
	Limits  Limits // with defaults applied
	Size    int    // bytes, as uploaded

	rt             *Runtime
	sandbox        wazero.Runtime
	code           wazero.CompiledModule
	instrumented   bool
	stdout, stderr *lineLogger // shared by the module's instances
	logs           *lineLogger // sluice.log lines, likewise
}

// Load compiles a module (once per sha256, limits and name) with the Runtime's
// limits (Config.Limits), and validates its imports, exports and ABI
// version. name tags the module in logs and errors.
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Module, error) {
	return r.LoadWithLimits(ctx, name, wasm, r.cfg.Limits)
}

// Loaded reports whether the runtime holds a module whose binary has this
// sha256 (hex), with any limits: its compiled code is in use, and a
// PruneCache that removed it would make the next process compile it again.
func (r *Runtime) Loaded(sha256 string) bool {
	_, ok := r.loaded.Load(sha256)
	return ok
}

// LoadWithLimits is Load with the module's own limits; zero fields take the
// defaults of Limits (not the Runtime's).
func (r *Runtime) LoadWithLimits(ctx context.Context, name string, wasm []byte, lim Limits) (*Module, error) {
	if !IsWasm(wasm) {
		return nil, fmt.Errorf("module %s: not a WebAssembly binary (no \\0asm magic)", name)
	}
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", name, err)
	}
	sum := sha256.Sum256(wasm)
	key := moduleKey{sha256: hex.EncodeToString(sum[:]), limits: lim, name: name}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("module %s: the runtime is closed", name)
	}
	if m, ok := r.modules[key]; ok {
		return m, nil
	}
	sb, err := r.sandbox(ctx, lim.memoryPages())
	if err != nil {
		return nil, err
	}
	bin := wasm
	instrumented := !r.cfg.uninstrumented && !loadUninstrumented(wasm)
	if !instrumented && !r.cfg.uninstrumented {
		r.log.Warn("fault injection: loading the module without its deadline instrumentation", "module", name)
	}
	if instrumented {
		if bin, _, err = instrument.RewriteWithLimits(wasm, structureLimits); err != nil {
			return nil, fmt.Errorf("module %s: %w", name, err)
		}
	}
	// Two workers: wazero's compiler looks at ctx only between the
	// functions its workers take, and with one worker never.
	var cached map[string]bool
	if r.cfg.CacheDir != "" {
		mu := cacheLock(r.cfg.CacheDir)
		mu.Lock()
		cached, _ = cacheFiles(r.cfg.CacheDir)
		defer func() {
			if cached != nil {
				if err := recordCacheFiles(r.cfg.CacheDir, key.sha256, cached); err != nil {
					r.log.Warn("recording the compilation cache's files", "module", name, "err", err)
				}
			}
			mu.Unlock()
		}()
	}
	code, err := sb.CompileModule(experimental.WithCompilationWorkers(ctx, 2), bin)
	if err != nil {
		if cerr := context.Cause(ctx); cerr != nil {
			return nil, fmt.Errorf("module %s: compile: stopped: %w", name, cerr)
		}
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
	m := &Module{Name: name, SHA256: key.sha256, Limits: lim, Size: len(wasm),
		rt: r, sandbox: sb, code: code, instrumented: instrumented,
		stdout: newLineLogger(r.log, slog.LevelInfo, name, "stdout"),
		stderr: newLineLogger(r.log, slog.LevelWarn, name, "stderr"),
		logs:   newLineLogger(r.log, slog.LevelInfo, name, "log")}
	// The version handshake needs a running instance.
	inst, err := m.instantiate(ctx)
	if err != nil {
		_ = code.Close(ctx)
		return nil, err
	}
	v, err := inst.call(ctx, inst.fnVersion, "sluice_abi_version")
	_ = inst.Close(ctx)
	if err != nil {
		_ = code.Close(ctx)
		// err names the module and the call already.
		if _, command := exports["_start"]; command {
			// How to build it first, then the trap without the module's name again.
			cause := err
			if te := (*TrapError)(nil); errors.As(err, &te) {
				cause = te.Err
			}
			return nil, fmt.Errorf("module %s: %w: %w", name, ErrCommandModule, cause)
		}
		return nil, err
	}
	m.Version = int(int32(v))
	if !supported(m.Version) {
		_ = code.Close(ctx)
		return nil, fmt.Errorf("module %s: built for guest ABI version %d; this host supports %v", name, m.Version, SupportedABIVersions)
	}
	r.modules[key] = m
	r.loaded.Store(key.sha256, true)
	return m, nil
}

// ErrCommandModule is the load error of a module built as a WASI command
// (it exports _start) whose exports cannot run before _start, which the host
// never calls: a Go module built without -buildmode=c-shared traps in
// runtime.notInitialized.
var ErrCommandModule = errors.New("the module is a WASI command (it exports _start), not a reactor, and its exports " +
	"fail before _start, which the host never calls: build a Go module with " +
	"`GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared`, a Rust module as a cdylib (crate-type = [\"cdylib\"]), " +
	"a C module with -mexec-model=reactor, an AssemblyScript module with --exportStart _initialize (sluice module init writes these builds)")

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
			if !allowedWASI[name] {
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

// Imports lists the module's imported functions as "module.name".
func (m *Module) Imports() []string {
	var out []string
	for _, f := range m.code.ImportedFunctions() {
		mod, name, _ := f.Import()
		out = append(out, mod+"."+name)
	}
	return out
}

// Exports lists the module's exported functions, sorted, without the ones
// the host's instrumentation adds.
func (m *Module) Exports() []string {
	var out []string
	for name := range m.code.ExportedFunctions() {
		if !strings.HasPrefix(name, "__sluice_") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// guestLog implements sluice.log: a line of at most MaxErrorMessage bytes,
// tagged with the module, at most 100 lines per 10 s per module.
func (r *Runtime) guestLog(ctx context.Context, mod api.Module, level, ptr, n uint32) {
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return
	}
	if len(b) > MaxErrorMessage {
		b = b[:MaxErrorMessage]
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
	msg := bytes.TrimRight(b, "\n")
	if m, ok := r.instances.Load(mod.Name()); ok {
		m.(*Module).logs.Log(lvl, msg) // rate-limited per module
		return
	}
	r.log.Log(ctx, lvl, string(msg), "module", mod.Name())
}
