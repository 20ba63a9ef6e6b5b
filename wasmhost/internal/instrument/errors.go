package instrument

import (
	"errors"
	"fmt"
)

// The classes of Rewrite's refusals; errors.Is tells them apart. Every
// error Rewrite returns is of one of them, unless the rewrite failed its
// own check (see verify), which would be a defect of the host's.
var (
	// ErrInvalid: the binary is not a valid module (it does not decode, or
	// an index is out of range of the module, or its structure is wrong).
	// The rewrite appends to the module's index spaces, so a module that
	// uses an index it does not define would reach what the rewrite adds:
	// it is refused before anything is rewritten.
	ErrInvalid = errors.New("invalid module")
	// ErrUnsupported: the module may be valid, but the host does not run
	// it: a WebAssembly feature beyond 2.0, an imported table, a second
	// memory, or an export named like one the rewrite adds.
	ErrUnsupported = errors.New("unsupported module")
	// ErrLimit: the module is over one of Limits.
	ErrLimit = errors.New("module over a limit")

	// errRewriteCheck: the rewritten module failed verify, a defect of the
	// rewrite (the fuzz tests look for one).
	errRewriteCheck = errors.New("rewrite failed its check")
)

// refusal is an error of one of the classes, whose text is the message
// alone (the class is for errors.Is, not for the reader).
type refusal struct {
	class error
	msg   string
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.class }

func invalidf(format string, a ...any) error {
	return &refusal{ErrInvalid, fmt.Sprintf(format, a...)}
}

func unsupportedf(format string, a ...any) error {
	return &refusal{ErrUnsupported, fmt.Sprintf(format, a...)}
}

func limitf(format string, a ...any) error {
	return &refusal{ErrLimit, fmt.Sprintf(format, a...)}
}

// classified reports whether err is of one of the classes a module may
// earn (not a defect of the rewrite).
func classified(err error) bool {
	return errors.Is(err, ErrInvalid) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrLimit)
}
