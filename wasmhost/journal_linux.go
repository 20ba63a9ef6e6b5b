//go:build linux

package wasmhost

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// OpenCallJournal creates the call journal at path, or takes over the one
// a previous process left there (see Previous), and starts its heartbeat.
// The file is locked for this process: a second process given the same
// path is refused.
func OpenCallJournal(path string) (*CallJournal, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("call journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("call journal %s: another process has it open; give each process its own directory", path)
		}
		return nil, fmt.Errorf("call journal %s: lock: %w", path, err)
	}
	j := &CallJournal{stop: make(chan struct{}), done: make(chan struct{})}
	if raw, err := io.ReadAll(io.LimitReader(f, int64(journalSize(JournalSlots)))); err == nil && len(raw) > 0 {
		var old JournalSnapshot
		if decodeJournal(raw, &old) == nil && !old.Closed {
			j.prev = &old
		}
	}
	size := journalSize(JournalSlots)
	if err := f.Truncate(0); err == nil {
		err = f.Truncate(int64(size))
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("call journal %s: %w", path, err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("call journal %s: map: %w", path, err)
	}
	j.init(mem, os.Getpid(), MonotonicNow(), time.Now())
	j.closeMem = func() error {
		err := syscall.Munmap(mem)
		return errors.Join(err, f.Close())
	}
	go j.beat()
	return j, nil
}

// ReclaimJournals removes the call journals in dir (files *.journal) that
// no live process holds, and returns what those a process left without
// closing them held: the calls in progress when it died. Journals in use
// (locked) are left alone, so several processes may share dir, each with
// its own journal file.
func ReclaimJournals(dir string) ([]JournalSnapshot, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.journal"))
	if err != nil {
		return nil, err
	}
	var out []JournalSnapshot
	for _, path := range paths {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue // gone, or not ours
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // its process runs
			continue
		}
		raw, err := io.ReadAll(io.LimitReader(f, int64(journalSize(JournalSlots))))
		if err == nil {
			var s JournalSnapshot
			if decodeJournal(raw, &s) == nil && !s.Closed {
				out = append(out, s)
			}
		}
		err = os.Remove(path)
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return out, fmt.Errorf("call journal: %w", err)
		}
	}
	return out, nil
}

// JournalReader reads a call journal another process writes.
type JournalReader struct{ mem []byte }

// OpenJournalReader maps the call journal at path for reading.
func OpenJournalReader(path string) (*JournalReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("call journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("call journal: %w", err)
	}
	if fi.Size() < journalHeaderSize || fi.Size() > int64(journalSize(JournalSlots)) {
		return nil, fmt.Errorf("call journal %s: %w: %d bytes", path, ErrNotJournal, fi.Size())
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("call journal %s: map: %w", path, err)
	}
	r := &JournalReader{mem: mem}
	var s JournalSnapshot
	if err := decodeJournal(mem, &s); err != nil {
		r.Close()
		return nil, fmt.Errorf("call journal %s: %w", path, err)
	}
	return r, nil
}

// Snapshot reads the journal into dst, reusing dst.Calls.
func (r *JournalReader) Snapshot(dst *JournalSnapshot) error { return decodeJournal(r.mem, dst) }

// Close unmaps the journal.
func (r *JournalReader) Close() error { return syscall.Munmap(r.mem) }

// MonotonicNow is CLOCK_MONOTONIC in nanoseconds: the clock of call
// journals, the same in every process on the host.
func MonotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail with a valid clock and pointer
	}
	return ts.Nano()
}
