package wasmhost

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/wasmhost/internal/instrument"
)

// Limits bound what one module instance may use. The zero value of a field
// means its default; a Runtime applies Config.Limits to modules loaded with
// Load, and LoadWithLimits takes a module's own (a tenant's) limits.
type Limits struct {
	// MemoryBytes caps the instance's linear memory, rounded down to whole
	// 64 KiB pages. A module whose initial memory is larger is refused at
	// Load; a memory.grow past the cap fails, and an instance that fails
	// after that in the same call (a Go guest's runtime prints "out of
	// memory" and aborts with unreachable) is a LimitMemory trap. A guest
	// that survives a failed grow is not failed. Default DefaultMemoryBytes
	// (128 MiB).
	MemoryBytes uint64

	// Deadline bounds each call into the module: one batch, init, and the
	// module's start-up. A guest still running then is interrupted at its next
	// loop iteration or call (see docs/adr/0002-batch-deadline.md); a WASI
	// sleep wakes at the deadline. Default DefaultDeadline (5s).
	Deadline time.Duration

	// MaxRowsPerRecord caps the rows one input record may produce. Default
	// DefaultMaxRowsPerRecord (1000).
	MaxRowsPerRecord int

	// MaxOutputBytes caps one batch's output payload (rows and framing).
	// Default DefaultMaxOutputBytes (64 MiB).
	MaxOutputBytes int

	// MaxRecordBytes caps one input record: its key, value and header keys
	// and values together. A larger record is not handed to the module; its
	// result is a record error, in its place in the Output. Default
	// DefaultMaxRecordBytes (4 MiB).
	MaxRecordBytes int
}

// The defaults of Limits.
const (
	DefaultMemoryBytes      = 128 << 20
	DefaultDeadline         = 5 * time.Second
	DefaultMaxRowsPerRecord = 1000
	DefaultMaxOutputBytes   = 64 << 20
	DefaultMaxRecordBytes   = 4 << 20
)

// MaxErrorMessage is how many bytes of a module's error message (a record
// error or an init refusal) the host keeps, as guest-sdk/ABI.md says.
const MaxErrorMessage = 4096

const wasmPage = 65536

// withDefaults returns l with every zero field set to its default, or an
// error naming the first invalid field.
func (l Limits) withDefaults() (Limits, error) {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.Deadline == 0 {
		l.Deadline = DefaultDeadline
	}
	if l.MaxRowsPerRecord == 0 {
		l.MaxRowsPerRecord = DefaultMaxRowsPerRecord
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if l.MaxRecordBytes == 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	switch {
	case l.MemoryBytes < wasmPage || l.MemoryBytes > 1<<32:
		return l, fmt.Errorf("Limits.MemoryBytes %d: want 64 KiB to 4 GiB", l.MemoryBytes)
	case l.Deadline < 0:
		return l, fmt.Errorf("Limits.Deadline %v is negative", l.Deadline)
	case l.MaxRowsPerRecord < 0:
		return l, fmt.Errorf("Limits.MaxRowsPerRecord %d is negative", l.MaxRowsPerRecord)
	case l.MaxOutputBytes < 0:
		return l, fmt.Errorf("Limits.MaxOutputBytes %d is negative", l.MaxOutputBytes)
	case l.MaxRecordBytes < 0 || l.MaxRecordBytes > 1<<30:
		return l, fmt.Errorf("Limits.MaxRecordBytes %d: want 0 to 1 GiB", l.MaxRecordBytes)
	}
	l.MemoryBytes -= l.MemoryBytes % wasmPage
	return l, nil
}

func (l Limits) memoryPages() uint32 { return uint32(l.MemoryBytes / wasmPage) }

// MaxTableElements is how many elements a module's tables may hold
// together, whatever its limits: at TableElementBytes each, 1 MiB of host
// memory (twice that while table.grow copies a table). A standard Go guest
// of 3 MB has 6,012. It does not depend on MemoryBytes so that a module
// compiles to the same code, and shares the compilation cache, under any
// memory cap.
const MaxTableElements = 1 << 17

// TableElementBytes is what wazero keeps per table element.
const TableElementBytes = 8

// structureLimits is what the instrumentation enforces on a module's
// structure, whatever its Limits.
var structureLimits = func() instrument.Limits {
	s := instrument.DefaultLimits
	s.TableElements = MaxTableElements
	return s
}()

// Limit names a limit a module breached.
type Limit string

// The limits a TrapError can name.
const (
	LimitMemory      Limit = "memory"
	LimitDeadline    Limit = "deadline"
	LimitOutputRows  Limit = "output_rows"
	LimitOutputBytes Limit = "output_bytes"
	LimitStack       Limit = "stack"
)

// Sentinel errors, wrapped by TrapError.Err so that errors.Is tells the
// class of an instance failure.
var (
	// ErrDeadline: a call ran past Limits.Deadline and was interrupted.
	ErrDeadline = errors.New("deadline exceeded")
	// ErrMemoryLimit: the instance failed after its memory reached
	// Limits.MemoryBytes.
	ErrMemoryLimit = errors.New("memory limit reached")
	// ErrStackLimit: the call stack grew past its bound (see
	// docs/tenancy.md): a recursion too deep.
	ErrStackLimit = errors.New("call stack limit reached")
	// ErrOutputLimit: a batch's output broke Limits.MaxRowsPerRecord or
	// Limits.MaxOutputBytes.
	ErrOutputLimit = errors.New("output limit exceeded")
	// ErrMalformedOutput: the output payload does not follow the ABI's
	// framing (the rows inside it are validated by the sink, per record).
	ErrMalformedOutput = errors.New("malformed output")
)

// TrapError is an instance failure: a trap, a proc_exit, a limit, or output
// that breaks the ABI. It surfaces from Instance.Transform and
// Module.Instantiate; the instance must be discarded (Close) and a fresh one
// started. The records of the batch are not to blame individually: isolate
// the ones that fail on their own by running them again.
type TrapError struct {
	Module string
	// Limit is the limit the module breached, or "" for a trap, a
	// proc_exit or malformed output.
	Limit Limit
	Err   error
}

func (e *TrapError) Error() string { return fmt.Sprintf("module %s: %v", e.Module, e.Err) }
func (e *TrapError) Unwrap() error { return e.Err }

// ExitError is a module calling WASI proc_exit (os.Exit in Go, or the Go
// runtime after a fatal error), wrapped in a TrapError.
type ExitError struct{ Code uint32 }

func (e *ExitError) Error() string { return fmt.Sprintf("proc_exit(%d)", e.Code) }

// MappedMemoryBytes is the linear memory of the process's open instances
// that lies outside the Go heap, in bytes: the sum of their memories'
// sizes, which is at least what they have touched. The Go runtime's memory
// limit (runtime/debug.SetMemoryLimit) does not see it; a host that holds
// the whole process to a budget gives the Go heap the budget less this.
// Where instances cannot be mapped (not unix), their memory is on the Go
// heap and this is 0.
func MappedMemoryBytes() int64 { return mappedMemoryBytes() }
