// Package wasmhost runs tenant normalization modules in a wazero sandbox
// and implements the host side of the sluice guest ABI (guest-sdk/ABI.md):
// compilation (once per module and limits, cached), the sandbox, limits,
// instances and the classification of their failures.
//
// Concurrency: a Runtime and its Modules are safe for concurrent use; an
// Instance belongs to one goroutine (a partition worker). A Runtime owns one
// goroutine, the watchdog that interrupts calls past their deadline; Close
// stops it.
//
// # Limits
//
// Each module has Limits (memory, per-call deadline, rows per record, output
// bytes per batch, input record size), from Config.Limits or
// LoadWithLimits. A breach fails the instance with a *TrapError whose Limit
// says which; an oversized input record is instead a record error in its
// place in the Output, and the module never sees it. Whatever the Limits,
// Load refuses a module whose structure would make compiling it costly
// (functions, body size, nesting, br_table targets, an estimated compile
// cost) or whose tables declare more than MaxTableElements, and the
// instrumentation bounds table.grow and the call stack (LimitStack). Guest
// memory is mapped per instance and returned when it closes; stdout and
// stderr take at most MaxStdioBytesPerCall per call. docs/tenancy.md states
// what an instance costs the host, in numbers.
//
// # Deadline
//
// Load rewrites every module before compiling it (package
// wasmhost/internal/instrument) so that loop headers and calls count down a
// budget and, every few thousand steps, check an interrupt flag and yield
// to the Go scheduler. The watchdog sets the flag when a call passes its
// deadline or its context ends. This costs a Go guest 16–19% where wazero's
// WithCloseOnContextDone costs 6–7×; see docs/adr/0002-batch-deadline.md
// and BenchmarkDeadline.
//
// # Call journal
//
// Should that guard fail, a guest spinning in compiled code blocks the Go
// runtime's next stop-the-world and every goroutine of the process with
// it, the watchdog included. Config.Journal (a CallJournal, a file mapped
// shared) records every call in progress, one store when it starts and
// one when it ends, for a process outside this one to watch; see
// docs/adr/0007-stuck-call-detection.md. A CallJournal owns one
// goroutine, its heartbeat; Close stops it.
//
// # Sandbox
//
// An instance has no filesystem, no arguments, no environment, a real clock,
// crypto/rand randomness, stdout and stderr logged (rate-limited), and WASI
// sleeps that end at the deadline. It may import the WASI preview 1
// functions but sockets (AllowedWASI) and sluice.log; Load refuses any other
// import, naming it. proc_exit fails the instance with an ExitError.
package wasmhost
