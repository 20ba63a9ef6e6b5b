// Package cnative loads a C guest module built natively (a shared library
// of the same sources as its wasm build, from wasmbuild.BuildC with
// wasmbuild.Native) and drives it with the ABI's payloads, for tests and
// benchmarks that compare the two builds. It needs cgo; without it Load
// returns ErrNoCgo. Nothing outside tests imports it: bin/sluice is built
// with CGO_ENABLED=0.
//
// Concurrency: a library's state is global to the process, so a Module is
// for one goroutine at a time, and there is one Module per library file.
package cnative

import "errors"

// ErrNoCgo is returned by Load in a build without cgo.
var ErrNoCgo = errors.New("cnative: this build has no cgo: run the test with CGO_ENABLED=1 and a C compiler")
