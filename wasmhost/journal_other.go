//go:build !linux

package wasmhost

import "errors"

var errJournalOS = errors.New("call journals need Linux")

// OpenCallJournal fails: call journals need Linux.
func OpenCallJournal(path string) (*CallJournal, error) { return nil, errJournalOS }

// ReclaimJournals finds nothing: call journals need Linux.
func ReclaimJournals(dir string) ([]JournalSnapshot, error) { return nil, nil }

// JournalReader reads a call journal another process writes.
type JournalReader struct{}

// OpenJournalReader fails: call journals need Linux.
func OpenJournalReader(path string) (*JournalReader, error) { return nil, errJournalOS }

// Snapshot fails: call journals need Linux.
func (r *JournalReader) Snapshot(dst *JournalSnapshot) error { return errJournalOS }

// Close does nothing.
func (r *JournalReader) Close() error { return nil }

// MonotonicNow is 0: call journals need Linux.
func MonotonicNow() int64 { return 0 }
