package sluice

import "fmt"

// std is the Instance behind the wasm exports.
var std *Instance

// Run registers the module's handler. Call it from an init function of
// package main: a reactor module's main is never run, while init functions
// run in the module's _initialize, before the host's first call.
// Run panics if called twice or with a nil handler.
func Run(h Handler) {
	if h == nil {
		panic("sluice: Run with a nil Handler")
	}
	if std != nil {
		panic("sluice: Run called twice")
	}
	std = NewInstance(h)
}

// Level is the severity of a log line.
type Level int32

// The log levels of the sluice.log import.
const (
	LevelDebug Level = 0
	LevelInfo  Level = 1
	LevelWarn  Level = 2
	LevelError Level = 3
)

func (l Level) String() string {
	switch l {
	case LevelDebug:
		return "debug"
	case LevelInfo:
		return "info"
	case LevelWarn:
		return "warn"
	case LevelError:
		return "error"
	}
	return fmt.Sprintf("Level(%d)", int32(l))
}

// Log sends a log line to the host, which tags it with the module's name and
// rate-limits it. Natively (in tests) it goes to standard error.
func Log(level Level, msg string) {
	if logHook != nil {
		logHook(level, msg)
		return
	}
	writeLog(level, msg)
}

// Logf is Log with formatting.
func Logf(level Level, format string, args ...any) { Log(level, fmt.Sprintf(format, args...)) }

// logHook, when set (by tests), receives the log lines.
var logHook func(Level, string)
