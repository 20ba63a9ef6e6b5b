// Package conformance holds the guest SDKs' conformance suite: test vectors
// (vectors.json: init payloads, batches and the output every SDK must
// produce, byte for byte) and, per SDK, a module that runs the script each
// record carries with that SDK's writers. The test in this package builds
// every SDK's module with its real toolchain and runs the vectors through
// the host (wasmhost). See README.md.
package conformance
