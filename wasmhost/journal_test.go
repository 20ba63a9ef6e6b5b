//go:build linux

package wasmhost

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// spinTransform is a sluice_transform that loops forever: instrumented,
// the deadline stops it.
var spinTransform = []byte{0x03, 0x40, 0x0C, 0x00, 0x0B, 0x42, 0x00, 0x0B} // loop; br 0; end; i64.const 0; end

func spinModule() []byte { return wasmtest.Module{Version: 1, Transform: spinTransform}.Build() }

func sha(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

func openJournal(t *testing.T) (*CallJournal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calls.journal")
	j, err := OpenCallJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, path
}

func openReader(t *testing.T, path string) *JournalReader {
	t.Helper()
	r, err := OpenJournalReader(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// waitCalls reads the journal until pred holds, or fails after a minute.
func waitCalls(t *testing.T, r *JournalReader, what string, pred func(*JournalSnapshot) bool) *JournalSnapshot {
	t.Helper()
	var s JournalSnapshot
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if err := r.Snapshot(&s); err != nil {
			t.Fatal(err)
		}
		if pred(&s) {
			return &s
		}
		if time.Now().After(deadline) {
			t.Fatalf("journal never showed %s; last: %+v", what, s)
		}
	}
}

// TestJournalRecordsCalls: a call in progress is in the journal, read
// through another mapping as the watcher reads it, with the module's name,
// sha256, deadline and start; it leaves when the call ends, and the slot
// is free once the instance closes.
func TestJournalRecordsCalls(t *testing.T) {
	j, path := openJournal(t)
	r := newTestRuntime(t, Config{Journal: j})
	wasm := spinModule()
	m := loadBytes(t, r, "acme/logs", wasm, Limits{Deadline: time.Hour})
	in := instantiate(t, m, InitConfig{})
	rd := openReader(t, path)
	var s JournalSnapshot
	if err := rd.Snapshot(&s); err != nil {
		t.Fatal(err)
	}
	if len(s.Calls) != 0 || s.PID != os.Getpid() || s.Closed || s.Heartbeat == 0 {
		t.Fatalf("idle journal: %+v", s)
	}

	ctx, cancel := context.WithCancel(context.Background())
	before := MonotonicNow()
	done := make(chan error, 1)
	go func() {
		_, err := in.Transform(ctx, values("x"))
		done <- err
	}()
	got := waitCalls(t, rd, "the call", func(s *JournalSnapshot) bool { return len(s.Calls) == 1 })
	c := got.Calls[0]
	if c.Module != "acme/logs" || c.SHA256 != sha(wasm) || c.Deadline != time.Hour {
		t.Errorf("call = %+v, want module acme/logs, sha256 %s, deadline 1h", c, sha(wasm))
	}
	if after := MonotonicNow(); c.Start < before || c.Start > after {
		t.Errorf("call start %d not between %d and %d", c.Start, before, after)
	}
	if w := got.Wall(c.Start); time.Since(w) < 0 || time.Since(w) > time.Minute {
		t.Errorf("call's wall start %v is not just now", w)
	}
	// The heartbeat moves while the call runs.
	first := got.Heartbeat
	waitCalls(t, rd, "a later heartbeat", func(s *JournalSnapshot) bool { return s.Heartbeat > first })

	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call succeeded")
	}
	waitCalls(t, rd, "no call", func(s *JournalSnapshot) bool { return len(s.Calls) == 0 })
	if n := ownedSlots(t, path); n != 1 {
		t.Errorf("%d slots owned with one instance open, want 1", n)
	}
	in.Close(context.Background())
	if n := ownedSlots(t, path); n != 0 {
		t.Errorf("%d slots owned after the instance closed, want 0", n)
	}
}

// ownedSlots counts the slots with an owner in the journal file.
func ownedSlots(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range JournalSlots {
		if raw[journalHeaderSize+i*journalSlotSize] != 0 {
			n++
		}
	}
	return n
}

// TestJournalUninstrumentedCalls: a module loaded without the
// instrumentation (the faultinject build's stuck call) is recorded too.
func TestJournalUninstrumentedCalls(t *testing.T) {
	j, path := openJournal(t)
	r := newTestRuntime(t, Config{Journal: j, uninstrumented: true})
	m := loadBytes(t, r, "m", wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}.Build(), Limits{})
	in := instantiate(t, m, InitConfig{})
	in.watch.arm(context.Background(), time.Second)
	s := waitCalls(t, openReader(t, path), "the call", func(s *JournalSnapshot) bool { return len(s.Calls) == 1 })
	if s.Calls[0].Module != "m" {
		t.Errorf("call = %+v", s.Calls[0])
	}
	in.watch.disarm(true)
	if err := openReader(t, path).Snapshot(s); err != nil || len(s.Calls) != 0 {
		t.Errorf("after disarm: %+v, %v", s, err)
	}
}

// TestJournalLocked: a second process (here, a second open) cannot take a
// journal in use; once it is closed, the next open finds an orderly end
// (no Previous).
func TestJournalLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.journal")
	j, err := OpenCallJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenCallJournal(path); err == nil || !strings.Contains(err.Error(), "another process has it open") {
		t.Fatalf("second open: %v, want it refused", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := OpenCallJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if p := j2.Previous(); p != nil {
		t.Errorf("Previous after a clean close = %+v, want nil", p)
	}
}

// TestJournalFull: an instance that finds no free slot runs unrecorded and
// is counted, so that a reader knows its view is partial; the count goes
// when it closes.
func TestJournalFull(t *testing.T) {
	j := memJournal(2)
	a := j.entry("a", "", time.Second)
	b := j.entry("b", "", time.Second)
	c := j.entry("c", "", time.Second)
	if a.slot == nil || b.slot == nil || c.slot != nil {
		t.Fatalf("slots: %v %v %v, want two and nil", a.slot, b.slot, c.slot)
	}
	var s JournalSnapshot
	if err := decodeJournal(j.mem, &s); err != nil || s.Unrecorded != 1 {
		t.Fatalf("snapshot %+v, %v: want 1 unrecorded", s, err)
	}
	c.release()
	a.release()
	if err := decodeJournal(j.mem, &s); err != nil || s.Unrecorded != 0 {
		t.Fatalf("snapshot %+v, %v: want 0 unrecorded", s, err)
	}
	// The freed slot is taken again.
	if d := j.entry("d", "", time.Second); d.slot == nil {
		t.Fatal("no slot after one was released")
	}
}

// memJournal is a journal of n slots in memory, without a file or a
// heartbeat.
func memJournal(n int) *CallJournal {
	mem := alignedBytes(journalSize(n))
	j := &CallJournal{closeMem: func() error { return nil }}
	j.init(mem, 42, 1_000_000_000, time.Now())
	return j
}

func alignedBytes(n int) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(make([]uint64, (n+7)/8)))), n)
}

// TestJournalDecode: decoding trusts nothing in the bytes: a slot caught
// mid-write is counted as torn and skipped, and a short, foreign or
// inconsistent file is refused.
func TestJournalDecode(t *testing.T) {
	j := memJournal(4)
	e := j.entry("acme/logs", strings.Repeat("ab", 32), 2*time.Second)
	e.begin(time.Now())
	torn := j.entry("torn", "", time.Second)
	torn.begin(time.Now())
	torn.slot.seq.Add(1) // as if its process died writing it

	var s JournalSnapshot
	if err := decodeJournal(j.mem, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Calls) != 1 || s.Torn != 1 || s.PID != 42 {
		t.Fatalf("snapshot %+v, want one call and one torn slot", s)
	}
	if c := s.Calls[0]; c.Module != "acme/logs" || c.SHA256 != strings.Repeat("ab", 32) || c.Deadline != 2*time.Second || c.Slot != 0 {
		t.Errorf("call %+v", c)
	}
	// An unaligned copy decodes the same.
	buf := make([]byte, len(j.mem)+1)
	copy(buf[1:], j.mem)
	var u JournalSnapshot
	if err := decodeJournal(buf[1:], &u); err != nil || len(u.Calls) != 1 || u.Calls[0] != s.Calls[0] {
		t.Errorf("unaligned: %+v, %v", u, err)
	}

	bad := func(name string, mem []byte, want string) {
		t.Helper()
		var s JournalSnapshot
		err := decodeJournal(mem, &s)
		if !errors.Is(err, ErrNotJournal) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrNotJournal saying %q", name, err, want)
		}
	}
	bad("short", j.mem[:100], "shorter than its header")
	foreign := append([]byte(nil), j.mem...)
	copy(foreign, "SQLite f")
	bad("foreign", foreign, "bad magic")
	bad("truncated slots", j.mem[:journalSize(2)], "4 slots in")
	other := append(alignedBytes(0), j.mem...)
	(*journalHeader)(unsafe.Pointer(&other[0])).version = 9
	bad("version", other, "version 9")
}

// FuzzJournalDecode: any bytes (a file a crash, a disk or another program
// left) decode to an error or a snapshot, never a panic, and a snapshot's
// calls name at most the slots the bytes hold.
func FuzzJournalDecode(f *testing.F) {
	j := memJournal(3)
	e := j.entry("acme/logs", strings.Repeat("0f", 32), time.Second)
	e.begin(time.Now())
	f.Add(append([]byte(nil), j.mem...))
	f.Add(append([]byte(nil), j.mem[:journalHeaderSize]...))
	f.Add([]byte(journalMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s JournalSnapshot
		if err := decodeJournal(b, &s); err != nil {
			return
		}
		for _, c := range s.Calls {
			if c.Slot < 0 || journalSize(c.Slot+1) > len(b) || len(c.Module) > journalNameMax || len(c.SHA256) != 64 {
				t.Fatalf("call %+v from %d bytes", c, len(b))
			}
		}
	})
}

func init() {
	childScenarios["journal-killed"] = func(ctx context.Context) (string, error) {
		path := os.Getenv("WASMHOST_TEST_JOURNAL")
		j, err := OpenCallJournal(path)
		if err != nil {
			return "", err
		}
		r, err := NewRuntime(ctx, Config{Journal: j, Logger: quietLogger})
		if err != nil {
			return "", err
		}
		m, err := r.LoadWithLimits(ctx, "acme/logs", spinModule(), Limits{Deadline: time.Hour})
		if err != nil {
			return "", err
		}
		in, err := m.Instantiate(ctx, InitConfig{})
		if err != nil {
			return "", err
		}
		fmt.Println("CHILD-CALLING")
		_, err = in.Transform(ctx, values("x")) // until killed
		return "", fmt.Errorf("the call returned: %v", err)
	}
}

// killChildMidCall runs a child process that opens the journal at path
// and spins in a call, waits until the journal shows the call, kills the
// child (SIGKILL) and returns the call as it was seen live and the
// child's pid.
func killChildMidCall(t *testing.T, path string) (JournalCall, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=journal-killed", "WASMHOST_TEST_JOURNAL="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "CHILD-CALLING" {
	}
	rd := openReader(t, path)
	live := waitCalls(t, rd, "the child's call", func(s *JournalSnapshot) bool { return len(s.Calls) == 1 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return live.Calls[0], cmd.Process.Pid
}

// TestJournalOfKilledProcess: a process killed (SIGKILL) in the middle of
// a call leaves the journal as it was: the next process to open it finds
// the call in Previous, with its module, sha256 and deadline, and the
// journal not closed.
func TestJournalOfKilledProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.journal")
	live, pid := killChildMidCall(t, path)
	j, err := OpenCallJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	prev := j.Previous()
	if prev == nil {
		t.Fatal("Previous is nil after the writer was killed")
	}
	if prev.Closed || prev.PID != pid || len(prev.Calls) != 1 || prev.Heartbeat == 0 {
		t.Fatalf("previous journal %+v, want pid %d, not closed, one call", prev, pid)
	}
	if c := prev.Calls[0]; c != live || c.Module != "acme/logs" || c.SHA256 != sha(spinModule()) || c.Deadline != time.Hour {
		t.Errorf("the killed process's call %+v, want %+v (module acme/logs, sha256 %s, 1h)", c, live, sha(spinModule()))
	}
	// The new process's own journal starts empty.
	var s JournalSnapshot
	if err := openReader(t, path).Snapshot(&s); err != nil || len(s.Calls) != 0 || s.PID != os.Getpid() {
		t.Errorf("the reopened journal: %+v, %v", s, err)
	}
}

// TestReclaimJournals: in a directory several processes share, the
// journals of dead processes are removed, those a process was killed with
// returned, and a live one (locked) left alone.
func TestReclaimJournals(t *testing.T) {
	dir := t.TempDir()
	live, pid := killChildMidCall(t, filepath.Join(dir, "1.journal"))
	clean, err := OpenCallJournal(filepath.Join(dir, "2.journal"))
	if err != nil {
		t.Fatal(err)
	}
	clean.Close() // an orderly end: nothing to report
	mine, err := OpenCallJournal(filepath.Join(dir, "3.journal"))
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	got, err := ReclaimJournals(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].PID != pid || len(got[0].Calls) != 1 || got[0].Calls[0] != live {
		t.Fatalf("reclaimed %+v, want the killed child's journal with its call", got)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.journal"))
	if len(left) != 1 || filepath.Base(left[0]) != "3.journal" {
		t.Errorf("journals left: %v, want only the live one", left)
	}
}

// TestJournalNamesEachLoad: one binary loaded under two names (two
// tenants' pipelines) records each instance's calls under its own name,
// so that a stuck call is put down to the pipeline it ran for.
func TestJournalNamesEachLoad(t *testing.T) {
	j, path := openJournal(t)
	r := newTestRuntime(t, Config{Journal: j})
	wasm := spinModule()
	a := loadBytes(t, r, "acme/logs", wasm, Limits{Deadline: time.Hour})
	b := loadBytes(t, r, "bravo/events", wasm, Limits{Deadline: time.Hour})
	if a == b || a.Name != "acme/logs" || b.Name != "bravo/events" {
		t.Fatalf("modules %q and %q: want one per name", a.Name, b.Name)
	}
	in := instantiate(t, b, InitConfig{})
	in.watch.arm(context.Background(), time.Hour)
	defer in.watch.disarm(true)
	s := waitCalls(t, openReader(t, path), "the call", func(s *JournalSnapshot) bool { return len(s.Calls) == 1 })
	if s.Calls[0].Module != "bravo/events" {
		t.Errorf("the call is recorded as %q's, want bravo/events'", s.Calls[0].Module)
	}
}
