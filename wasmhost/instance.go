package wasmhost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Instance is one running copy of a module, owned by one goroutine.
type Instance struct {
	module *Module
	mod    api.Module
	mem    api.Memory

	fnVersion, fnAlloc, fnInit, fnTransform api.Function
	stack                                   []uint64
}

// TableSchema is a target table handed to a module at init: the columns its
// rows must carry, in order.
type TableSchema struct {
	Name    string
	Columns []ColumnSchema
}

// ColumnSchema is one column's name and ClickHouse type.
type ColumnSchema struct{ Name, Type string }

// InitConfig is what a module is initialised with.
type InitConfig struct {
	Params map[string]string
	Tables []TableSchema
}

// ErrRefused wraps a module's refusal of its init configuration.
var ErrRefused = errors.New("module refused its configuration")

// Instantiate starts an instance and initialises it with cfg.
func (m *Module) Instantiate(ctx context.Context, cfg InitConfig) (*Instance, error) {
	in, err := m.instantiate(ctx)
	if err != nil {
		return nil, err
	}
	if err := in.init(ctx, cfg); err != nil {
		_ = in.Close(ctx)
		return nil, err
	}
	return in, nil
}

func (m *Module) instantiate(ctx context.Context) (*Instance, error) {
	r := m.rt
	name := fmt.Sprintf("%s#%d", m.Name, r.seq.Add(1))
	out := newLineLogger(r.log, slog.LevelInfo, m.Name, "stdout")
	errw := newLineLogger(r.log, slog.LevelWarn, m.Name, "stderr")
	mod, err := r.rt.InstantiateModule(ctx, m.code, r.sandboxConfig(name, out, errw))
	if err != nil {
		return nil, fmt.Errorf("module %s: instantiate: %w", m.Name, err)
	}
	in := &Instance{
		module:      m,
		mod:         mod,
		mem:         mod.Memory(),
		fnVersion:   mod.ExportedFunction("sluice_abi_version"),
		fnAlloc:     mod.ExportedFunction("sluice_alloc"),
		fnInit:      mod.ExportedFunction("sluice_init"),
		fnTransform: mod.ExportedFunction("sluice_transform"),
		stack:       make([]uint64, 2),
	}
	if in.mem == nil {
		_ = mod.Close(ctx)
		return nil, fmt.Errorf("module %s: exports no memory", m.Name)
	}
	return in, nil
}

// Module is the instance's module.
func (in *Instance) Module() *Module { return in.module }

// Close discards the instance.
func (in *Instance) Close(ctx context.Context) error { return in.mod.Close(ctx) }

// call invokes fn with the instance's reusable stack.
func (in *Instance) call(ctx context.Context, fn api.Function, params ...uint64) (uint64, error) {
	copy(in.stack, params)
	if err := fn.CallWithStack(ctx, in.stack); err != nil {
		return 0, trapError(in.module.Name, err)
	}
	return in.stack[0], nil
}

// TrapError is an instance failure: a trap, proc_exit, a limit, or output
// that breaks the ABI. The instance must be discarded.
type TrapError struct {
	Module string
	Err    error
}

func (e *TrapError) Error() string { return fmt.Sprintf("module %s: %v", e.Module, e.Err) }
func (e *TrapError) Unwrap() error { return e.Err }

func trapError(module string, err error) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		return &TrapError{Module: module, Err: fmt.Errorf("proc_exit(%d)", exit.ExitCode())}
	}
	return &TrapError{Module: module, Err: err}
}

// input returns a guest buffer of n bytes for the next call.
func (in *Instance) input(ctx context.Context, n int) (uint32, []byte, error) {
	if n > 1<<30 {
		return 0, nil, fmt.Errorf("input of %d bytes is too large", n)
	}
	ptr, err := in.call(ctx, in.fnAlloc, uint64(n))
	if err != nil {
		return 0, nil, err
	}
	p := uint32(ptr)
	buf, ok := in.mem.Read(p, uint32(n))
	if !ok {
		return 0, nil, &TrapError{Module: in.module.Name, Err: fmt.Errorf("sluice_alloc(%d) returned %#x, outside memory", n, p)}
	}
	return p, buf, nil
}

// result reads a packed (ptr<<32 | len) result from guest memory.
func (in *Instance) result(packed uint64) ([]byte, error) {
	ptr, n := uint32(packed>>32), uint32(packed)
	if n == 0 {
		return nil, nil
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return nil, &TrapError{Module: in.module.Name, Err: fmt.Errorf("result [%#x, +%d) is outside memory", ptr, n)}
	}
	return b, nil
}

func (in *Instance) init(ctx context.Context, cfg InitConfig) error {
	payload := encodeInit(cfg)
	ptr, buf, err := in.input(ctx, len(payload))
	if err != nil {
		return err
	}
	copy(buf, payload)
	packed, err := in.call(ctx, in.fnInit, uint64(ptr), uint64(len(payload)))
	if err != nil {
		return err
	}
	msg, err := in.result(packed)
	if err != nil {
		return err
	}
	if len(msg) > 0 {
		return fmt.Errorf("module %s: %w: %s", in.module.Name, ErrRefused, msg)
	}
	return nil
}

// Transform runs one batch through the module. The returned Output reads
// guest memory and is valid until the next call on the instance.
func (in *Instance) Transform(ctx context.Context, b *Batch) (Output, error) {
	ptr, buf, err := in.input(ctx, b.encodedSize())
	if err != nil {
		return Output{}, err
	}
	b.encode(buf)
	packed, err := in.call(ctx, in.fnTransform, uint64(ptr), uint64(len(buf)))
	if err != nil {
		return Output{}, err
	}
	raw, err := in.result(packed)
	if err != nil {
		return Output{}, err
	}
	out, err := parseOutput(raw, len(b.Records))
	if err != nil {
		return Output{}, &TrapError{Module: in.module.Name, Err: fmt.Errorf("malformed output: %w", err)}
	}
	return out, nil
}

func encodeInit(cfg InitConfig) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(cfg.Params)))
	for k, v := range cfg.Params {
		b = appendStr(b, k)
		b = appendStr(b, v)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(cfg.Tables)))
	for _, t := range cfg.Tables {
		b = appendStr(b, t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Columns)))
		for _, c := range t.Columns {
			b = appendStr(b, c.Name)
			b = appendStr(b, c.Type)
		}
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// lineLogger turns a guest's stdout or stderr into host log lines tagged
// with the module, at most logBurst lines per logWindow.
type lineLogger struct {
	log    *slog.Logger
	level  slog.Level
	module string
	stream string

	mu      sync.Mutex
	buf     []byte
	window  time.Time
	lines   int
	dropped int
}

const (
	logBurst  = 100
	logWindow = 10 * time.Second
	logLine   = 4096
)

func newLineLogger(log *slog.Logger, level slog.Level, module, stream string) *lineLogger {
	return &lineLogger{log: log, level: level, module: module, stream: stream}
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if c == '\n' || len(l.buf) >= logLine {
			l.emit()
			continue
		}
		l.buf = append(l.buf, c)
	}
	return len(p), nil
}

func (l *lineLogger) emit() {
	now := time.Now()
	if now.Sub(l.window) > logWindow {
		if l.dropped > 0 {
			l.log.Warn("module log lines dropped by rate limit", "module", l.module, "stream", l.stream, "dropped", l.dropped)
		}
		l.window, l.lines, l.dropped = now, 0, 0
	}
	if l.lines < logBurst {
		l.log.Log(context.Background(), l.level, string(l.buf), "module", l.module, "stream", l.stream)
		l.lines++
	} else {
		l.dropped++
	}
	l.buf = l.buf[:0]
}
