// Package stuckcall decides, from outside a sluice process, that a module
// call its deadline did not stop has stuck the process, and which module
// version to blame; and it keeps that decision (a Verdict) on disk for the
// next process to act on. The process records its calls in a call journal
// (wasmhost.CallJournal); the watcher (sluice run's child process) feeds
// what it reads to a Detector. See docs/adr/0007-stuck-call-detection.md.
//
// Concurrency: a Detector belongs to one goroutine; the verdict functions
// are safe to call from any, for one directory per process.
package stuckcall
