package wasmhost

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sluicehq/sluice/wasmhost/internal/instrument"
)

// Instance is one running copy of a module, owned by one goroutine.
type Instance struct {
	module *Module
	mod    api.Module
	mem    api.Memory
	lim    Limits

	fnVersion, fnAlloc, fnInit, fnTransform api.Function
	stack                                   []uint64

	// oom is set by the instrumented memory.grow when a grow fails.
	oom api.Global
	// stackHit is set by the instrumentation when the call stack passes
	// its bound.
	stackHit api.Global
	watch    callWatch
	// failed is the TrapError that ended the instance; later calls return it.
	failed error

	// inPtr and inSize are the last buffer sluice_alloc handed out: inputs up
	// to inSize bytes are written there without calling sluice_alloc again.
	inPtr, inSize uint32

	sub      Batch     // the batch without its oversized records
	oversize []skipped // the records taken out of the current batch

	// stdioLeft is how many bytes the guest may still write to stdout and
	// stderr in the call in progress (see MaxStdioBytesPerCall).
	stdioLeft int
}

// MaxStdioBytesPerCall bounds what one call into a module may write to
// stdout and stderr together; past it, and once the call's deadline has
// passed, a write fails (fd_write returns EIO) without doing any work, so
// that one fd_write of many iovecs over one large buffer costs at most
// this much logging.
const MaxStdioBytesPerCall = 1 << 20

// randChunk is how many random bytes random_get produces between two
// looks at the call's deadline.
const randChunk = 64 << 10

// errHostCallBudget fails a guest's write past MaxStdioBytesPerCall.
var errHostCallBudget = errors.New("the call's stdout and stderr budget is spent")

// errHostCallInterrupted fails a host call made after the call's deadline
// passed or its context ended.
var errHostCallInterrupted = errors.New("the call was interrupted")

// guestStdio is an instance's stdout or stderr: bounded per call, and
// refusing work once the call is interrupted.
type guestStdio struct {
	in  *Instance
	log *lineLogger
}

func (g guestStdio) Write(p []byte) (int, error) {
	in := g.in
	if in.watch.interrupted() {
		return 0, errHostCallInterrupted
	}
	if in.stdioLeft <= 0 {
		return 0, errHostCallBudget
	}
	n := min(len(p), in.stdioLeft)
	in.stdioLeft -= n
	_, _ = g.log.Write(p[:n])
	if n < len(p) {
		return n, errHostCallBudget
	}
	return n, nil
}

// guestRand is an instance's random_get source: crypto/rand, in chunks,
// stopping once the call is interrupted (random_get returns EIO).
type guestRand struct{ in *Instance }

func (g guestRand) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if g.in.watch.interrupted() {
			return n, errHostCallInterrupted
		}
		k, err := rand.Read(p[n:min(len(p), n+randChunk)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
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

// Instantiate starts an instance and initialises it with cfg. A module that
// refuses cfg returns an error wrapping ErrRefused; one that fails while
// starting returns a *TrapError.
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

// instantiate starts an instance and runs its start function and
// _initialize (a Go guest's runtime and package init) under the deadline.
func (m *Module) instantiate(ctx context.Context) (*Instance, error) {
	r := m.rt
	name := fmt.Sprintf("%s#%d", m.Name, r.seq.Add(1))
	in := &Instance{module: m, lim: m.Limits, stack: make([]uint64, 2)}
	in.watch.wake = make(chan struct{}, 1)
	cfg := wazero.NewModuleConfig().
		WithName(name).
		WithStartFunctions(). // run below, under the deadline
		WithSysWalltime().WithSysNanotime().
		WithNanosleep(in.nanosleep).
		WithRandSource(guestRand{in}).
		WithStdout(guestStdio{in, m.stdout}).WithStderr(guestStdio{in, m.stderr})
	mod, err := m.sandbox.InstantiateModule(experimental.WithMemoryAllocator(ctx, guestMemory), m.code, cfg)
	if err != nil {
		return nil, fmt.Errorf("module %s: instantiate: %w", m.Name, err)
	}
	in.mod = mod
	in.watch.journal = r.cfg.Journal.entry(m.Name, m.SHA256, in.lim.Deadline)
	r.instances.Store(name, m)
	fail := func(err error) (*Instance, error) {
		_ = in.Close(ctx)
		return nil, err
	}
	in.mem = mod.Memory()
	in.fnVersion = mod.ExportedFunction("sluice_abi_version")
	in.fnAlloc = mod.ExportedFunction("sluice_alloc")
	in.fnInit = mod.ExportedFunction("sluice_init")
	in.fnTransform = mod.ExportedFunction("sluice_transform")
	if in.mem == nil {
		return fail(fmt.Errorf("module %s: exports no memory", m.Name))
	}
	if m.instrumented {
		var ok bool
		if in.watch.interrupt, ok = mod.ExportedGlobal(instrument.InterruptGlobal).(api.MutableGlobal); !ok {
			return fail(fmt.Errorf("module %s: the instrumentation's interrupt global is missing", m.Name))
		}
		if in.watch.budget, ok = mod.ExportedGlobal(instrument.BudgetGlobal).(api.MutableGlobal); !ok {
			return fail(fmt.Errorf("module %s: the instrumentation's budget global is missing", m.Name))
		}
		in.oom = mod.ExportedGlobal(instrument.OOMGlobal)
		in.stackHit = mod.ExportedGlobal(instrument.StackGlobal)
		r.watchdog.add(&in.watch)
	}
	for _, start := range []string{instrument.StartFunc, "_initialize"} {
		if fn := mod.ExportedFunction(start); fn != nil {
			if _, err := in.call(ctx, fn, start); err != nil {
				return fail(err)
			}
		}
	}
	return in, nil
}

// Module is the instance's module.
func (in *Instance) Module() *Module { return in.module }

// Close discards the instance.
func (in *Instance) Close(ctx context.Context) error {
	in.module.rt.watchdog.remove(&in.watch)
	in.watch.journal.release()
	in.module.rt.instances.Delete(in.mod.Name())
	return in.mod.Close(ctx)
}

// call invokes fn with the instance's reusable stack, under the deadline.
// what names the call in errors.
func (in *Instance) call(ctx context.Context, fn api.Function, what string, params ...uint64) (uint64, error) {
	if in.failed != nil {
		return 0, in.failed
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("module %s: %s: %w", in.module.Name, what, err)
	}
	copy(in.stack, params)
	in.stdioLeft = MaxStdioBytesPerCall
	in.watch.arm(ctx, in.lim.Deadline)
	err := fn.CallWithStack(ctx, in.stack)
	fired := in.watch.disarm(err == nil)
	if err != nil {
		in.failed = in.classify(ctx, err, what, fired)
		return 0, in.failed
	}
	return in.stack[0], nil
}

// classify turns a failed call into a TrapError naming its cause.
func (in *Instance) classify(ctx context.Context, err error, what string, fired interruptCause) error {
	name := in.module.Name
	var exit *sys.ExitError
	isExit := errors.As(err, &exit)
	var cause error = err
	if isExit {
		cause = &ExitError{Code: exit.ExitCode()}
	}
	switch {
	case in.oom != nil && in.oom.Get() != 0:
		// A failed grow the guest survived does not count: the flag stays
		// set only if the call failed, and the instance is not called again.
		return &TrapError{Module: name, Limit: LimitMemory, Err: fmt.Errorf("%s: %w: a memory.grow past %s failed, then: %w",
			what, ErrMemoryLimit, formatBytes(in.lim.MemoryBytes), cause)}
	case in.stackHit != nil && in.stackHit.Get() != 0:
		return &TrapError{Module: name, Limit: LimitStack, Err: fmt.Errorf("%s: %w: more than %d calls deep (or fewer, of large frames)",
			what, ErrStackLimit, structureLimits.StackUnits)}
	case fired == causeDeadline:
		return &TrapError{Module: name, Limit: LimitDeadline, Err: fmt.Errorf("%s: %w: still running after %v (interrupted; the call took %v)",
			what, ErrDeadline, in.lim.Deadline, in.watch.elapsed().Round(time.Millisecond))}
	case fired == causeContext:
		return &TrapError{Module: name, Err: fmt.Errorf("%s: interrupted: %w", what, context.Cause(ctx))}
	case isExit:
		return &TrapError{Module: name, Err: fmt.Errorf("%s: %w", what, cause)}
	}
	return &TrapError{Module: name, Err: fmt.Errorf("%s: %w", what, err)}
}

func formatBytes(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// input returns a guest buffer of n bytes for the next call. sluice_alloc's
// buffer stays the host's until the next sluice_alloc, so it is called only
// when an input outgrows the last one.
func (in *Instance) input(ctx context.Context, n int) (uint32, []byte, error) {
	if n > 1<<30 {
		return 0, nil, fmt.Errorf("module %s: input of %d bytes is too large", in.module.Name, n)
	}
	if uint32(n) > in.inSize || in.inSize == 0 {
		ptr, err := in.call(ctx, in.fnAlloc, "sluice_alloc", uint64(n))
		if err != nil {
			return 0, nil, err
		}
		in.inPtr, in.inSize = uint32(ptr), uint32(n)
	}
	buf, ok := in.mem.Read(in.inPtr, uint32(n))
	if !ok {
		in.failed = &TrapError{Module: in.module.Name, Err: fmt.Errorf("sluice_alloc(%d) returned %#x, outside memory", n, in.inPtr)}
		return 0, nil, in.failed
	}
	return in.inPtr, buf, nil
}

// result reads a packed (ptr<<32 | len) result from guest memory.
func (in *Instance) result(packed uint64, what string) ([]byte, error) {
	ptr, n := uint32(packed>>32), uint32(packed)
	if n == 0 {
		return nil, nil
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		in.failed = &TrapError{Module: in.module.Name, Err: fmt.Errorf("%s: %w: result [%#x, +%d) is outside memory", what, ErrMalformedOutput, ptr, n)}
		return nil, in.failed
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
	packed, err := in.call(ctx, in.fnInit, "sluice_init", uint64(ptr), uint64(len(payload)))
	if err != nil {
		return err
	}
	msg, err := in.result(packed, "sluice_init")
	if err != nil {
		return err
	}
	if len(msg) > 0 {
		return fmt.Errorf("module %s: %w: %s", in.module.Name, ErrRefused, capMessage(msg))
	}
	return nil
}

// capMessage keeps the first MaxErrorMessage bytes of a guest message, cut
// at a character boundary.
func capMessage(b []byte) string {
	if len(b) <= MaxErrorMessage {
		return string(b)
	}
	n := MaxErrorMessage
	for n > MaxErrorMessage-utf8.UTFMax && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + " …(truncated)"
}

// Transform runs one batch through the module. The returned Output has one
// result per record of b, in order, and is valid until the next call on the
// instance (it reads guest memory).
//
// A record over Limits.MaxRecordBytes is not handed to the module: its
// result is a record error. A *TrapError (a trap, a proc_exit, a breached
// limit, malformed output) fails the whole batch and the instance, which
// must be closed; later calls return the same error.
func (in *Instance) Transform(ctx context.Context, b *Batch) (Output, error) {
	if in.failed != nil {
		return Output{}, in.failed
	}
	batch := b
	in.oversize = in.oversize[:0]
	for i := range b.Records {
		if n := b.Records[i].size(); n > in.lim.MaxRecordBytes {
			in.oversize = append(in.oversize, skipped{index: i, size: n})
		}
	}
	if len(in.oversize) > 0 {
		in.sub.Topic, in.sub.Partition = b.Topic, b.Partition
		in.sub.Records = in.sub.Records[:0]
		k := 0
		for i := range b.Records {
			if k < len(in.oversize) && in.oversize[k].index == i {
				k++
				continue
			}
			in.sub.Records = append(in.sub.Records, b.Records[i])
		}
		batch = &in.sub
		defer clear(in.sub.Records) // keep no reference to the caller's bytes
	}
	out := Output{total: len(b.Records), skip: in.oversize, limit: in.lim.MaxRecordBytes}
	if len(batch.Records) == 0 {
		return out, nil
	}
	ptr, buf, err := in.input(ctx, batch.encodedSize())
	if err != nil {
		return Output{}, err
	}
	batch.encode(buf)
	packed, err := in.call(ctx, in.fnTransform, "sluice_transform", uint64(ptr), uint64(len(buf)))
	if err != nil {
		return Output{}, err
	}
	raw, err := in.result(packed, "sluice_transform")
	if err != nil {
		return Output{}, err
	}
	if err := parseOutput(&out, raw, len(batch.Records), in.lim); err != nil {
		te := &TrapError{Module: in.module.Name, Err: fmt.Errorf("sluice_transform: %w", err)}
		var le *limitError
		if errors.As(err, &le) {
			te.Limit = le.limit
		}
		in.failed = te
		return Output{}, te
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
// with the module, at most logBurst lines per logWindow. A Module's
// instances share one per stream, so that a crash loop (a Go guest prints
// a goroutine dump as it dies) cannot flood the log.
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
		if c == '\n' {
			l.emit()
			continue
		}
		if len(l.buf) >= logLine {
			l.emit()
		}
		l.buf = append(l.buf, c)
	}
	return len(p), nil
}

func (l *lineLogger) emit() {
	l.logLine(l.level, l.buf)
	l.buf = l.buf[:0]
}

// logLine logs one line unless the rate limit drops it, copying msg only
// then. l.mu is held.
func (l *lineLogger) logLine(level slog.Level, msg []byte) {
	now := time.Now()
	if now.Sub(l.window) > logWindow {
		if l.dropped > 0 {
			l.log.Warn("module log lines dropped by rate limit", "module", l.module, "stream", l.stream, "dropped", l.dropped)
		}
		l.window, l.lines, l.dropped = now, 0, 0
	}
	if l.lines < logBurst {
		l.log.Log(context.Background(), level, string(msg), "module", l.module, "stream", l.stream)
		l.lines++
	} else {
		l.dropped++
	}
}

// Log logs a line of the sluice.log import at its own level.
func (l *lineLogger) Log(level slog.Level, msg []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logLine(level, msg)
}
