package wasmhost

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// A call journal is a file, mapped into memory, that records every module
// call in progress: which module (name and sha256), when it started and
// its deadline, plus a heartbeat. A process outside this one reads it to
// notice a call its deadline did not stop, which no goroutine of this
// process can be trusted to notice: a guest spinning in compiled code
// cannot be preempted, so the Go runtime's next stop-the-world waits for
// it and every goroutine stops, the deadline's watchdog included. See
// docs/adr/0007-stuck-call-detection.md.
//
// Each instance owns a slot from its start to its Close; a call writes one
// word when it starts (its start time) and one when it ends (zero): no
// lock, no syscall, no allocation. Times are CLOCK_MONOTONIC nanoseconds,
// which every process on the host reads alike.

// Journal file layout, in the host's byte order: a header of
// journalHeaderSize bytes, then the slots of journalSlotSize bytes.
const (
	journalMagic      = "SLUICECJ"
	journalVersion    = 1
	journalHeaderSize = 256
	journalSlotSize   = 256
	// JournalSlots is how many instances a call journal records at once; an
	// instance started when every slot is taken runs unrecorded, and the
	// journal counts it (JournalSnapshot.Unrecorded).
	JournalSlots = 4096
	// journalNameMax is the most bytes of a module name a slot keeps.
	journalNameMax = journalSlotSize - 57
	// HeartbeatInterval is how often a journal's heartbeat is written.
	HeartbeatInterval = 100 * time.Millisecond
)

// journalHeader is the start of the file.
type journalHeader struct {
	magic    [8]byte
	version  uint32
	slotSize uint32
	slots    uint32
	// closed is 1 once the journal was closed: the process ended its
	// calls and is exiting.
	closed   atomic.Uint32
	pid      int64
	monoBase int64 // CLOCK_MONOTONIC when the journal was opened
	wallBase int64 // the wall clock then, Unix nanoseconds
	// heartbeat is CLOCK_MONOTONIC as of the last beat.
	heartbeat atomic.Int64
	// unrecorded counts the live instances that found no free slot.
	unrecorded atomic.Int64
	// used is one past the highest slot ever claimed: readers scan no
	// further.
	used atomic.Uint32
}

// journalSlot is one instance's record.
type journalSlot struct {
	// state is 1 while an instance owns the slot.
	state atomic.Uint32
	// seq is odd while the owner writes the fields below start.
	seq atomic.Uint32
	// start is CLOCK_MONOTONIC when the call in progress started, 0 when
	// no call is.
	start    atomic.Int64
	deadline int64 // nanoseconds
	sha256   [32]byte
	nameLen  uint8
	name     [journalNameMax]byte
}

var (
	_ [journalHeaderSize - unsafe.Sizeof(journalHeader{})]byte
	_ [unsafe.Sizeof(journalSlot{}) - journalSlotSize]byte
	_ [journalSlotSize - unsafe.Sizeof(journalSlot{})]byte
)

// journalSize is the size of a journal file of n slots.
func journalSize(n int) int { return journalHeaderSize + n*journalSlotSize }

// CallJournal records the module calls in progress of this process (see
// above). Give it to every Runtime through Config.Journal; it is safe for
// concurrent use. Open it with OpenCallJournal.
type CallJournal struct {
	mem   []byte
	head  *journalHeader
	slots []journalSlot
	// mu orders claims and releases with Close, which unmaps the file
	// once no slot is owned. Calls write their slot without it.
	mu     sync.Mutex
	hint   uint32
	owned  int // slots claimed now
	closed bool

	// base is the wall clock, with Go's monotonic reading, taken with
	// head.monoBase: a time.Time's monotonic offset from it converts to
	// CLOCK_MONOTONIC without a syscall.
	base time.Time

	prev     *JournalSnapshot
	closeMem func() error
	stop     chan struct{}
	done     chan struct{}
}

// mono converts t (which carries Go's monotonic reading) to
// CLOCK_MONOTONIC nanoseconds.
func (j *CallJournal) mono(t time.Time) int64 {
	m := j.head.monoBase + int64(t.Sub(j.base))
	if m == 0 {
		m = 1 // 0 means "no call"
	}
	return m
}

// init writes a fresh header over mem, which is zeroed.
func (j *CallJournal) init(mem []byte, pid int, monoNow int64, now time.Time) {
	j.mem = mem
	j.head = (*journalHeader)(unsafe.Pointer(&mem[0]))
	n := (len(mem) - journalHeaderSize) / journalSlotSize
	j.slots = unsafe.Slice((*journalSlot)(unsafe.Pointer(&mem[journalHeaderSize])), n)
	j.base = now
	h := j.head
	copy(h.magic[:], journalMagic)
	h.version, h.slotSize, h.slots = journalVersion, journalSlotSize, uint32(n)
	h.pid, h.monoBase, h.wallBase = int64(pid), monoNow, now.UnixNano()
	h.heartbeat.Store(monoNow)
}

// beat writes the heartbeat every HeartbeatInterval until Close.
func (j *CallJournal) beat() {
	defer close(j.done)
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case now := <-t.C:
			j.head.heartbeat.Store(j.mono(now))
		}
	}
}

// Previous is what the journal file held when it was opened, if a process
// left it without closing it (it was killed, or crashed): the calls that
// were in progress when it died. Nil otherwise.
func (j *CallJournal) Previous() *JournalSnapshot { return j.prev }

// Close stops the heartbeat and marks the journal closed: a reader takes
// it as the process's orderly end. The mapping stays while an instance
// still owns a slot, so that a late call cannot fault.
func (j *CallJournal) Close() error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	close(j.stop)
	<-j.done
	j.head.closed.Store(1)
	if j.owned > 0 {
		return nil
	}
	return j.closeMem()
}

// claim gives an instance of the module a slot, or nil when every slot is
// taken (counted in the header); ok is false once the journal is closed.
func (j *CallJournal) claim(name, sha string, deadline time.Duration) (slot *journalSlot, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil, false
	}
	n := uint32(len(j.slots))
	h := j.hint
	for i := range n {
		idx := (h + i) % n
		s := &j.slots[idx]
		if !s.state.CompareAndSwap(0, 1) {
			continue
		}
		s.seq.Add(1)
		s.start.Store(0)
		s.deadline = int64(deadline)
		if _, err := hex.Decode(s.sha256[:], []byte(sha)); err != nil {
			s.sha256 = [32]byte{}
		}
		s.nameLen = uint8(copy(s.name[:], name))
		s.seq.Add(1)
		for {
			used := j.head.used.Load()
			if idx < used || j.head.used.CompareAndSwap(used, idx+1) {
				break
			}
		}
		j.hint = idx + 1
		j.owned++
		return s, true
	}
	j.head.unrecorded.Add(1)
	return nil, true
}

// release gives the slot back; s nil means the instance had none.
func (j *CallJournal) release(s *journalSlot) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if s == nil {
		if !j.closed || j.owned > 0 {
			j.head.unrecorded.Add(-1)
		}
		return
	}
	s.start.Store(0)
	s.state.Store(0)
	j.owned--
	if j.owned == 0 && j.closed {
		_ = j.closeMem()
	}
}

// entry claims a slot for an instance of the module (see claim). j may
// be nil: no journal.
func (j *CallJournal) entry(name, sha string, deadline time.Duration) journalEntry {
	if j == nil {
		return journalEntry{}
	}
	slot, ok := j.claim(name, sha, deadline)
	if !ok {
		return journalEntry{}
	}
	return journalEntry{j: j, slot: slot}
}

// release gives the instance's slot back, once.
func (e *journalEntry) release() {
	if e.j != nil {
		e.j.release(e.slot)
		e.j, e.slot = nil, nil
	}
}

// journalEntry is an instance's handle on its slot.
type journalEntry struct {
	j    *CallJournal
	slot *journalSlot // nil: every slot was taken
}

// begin records that a call started at now. It is one store.
func (e *journalEntry) begin(now time.Time) {
	if e.slot != nil {
		e.slot.start.Store(e.j.mono(now))
	}
}

// end records that the call ended.
func (e *journalEntry) end() {
	if e.slot != nil {
		e.slot.start.Store(0)
	}
}

// JournalSnapshot is what a call journal held at one moment.
type JournalSnapshot struct {
	// PID is the process that wrote the journal.
	PID int
	// MonoBase and WallBase are CLOCK_MONOTONIC and the wall clock (Unix
	// nanoseconds) when the journal was opened: Wall converts with them.
	MonoBase, WallBase int64
	// Heartbeat is CLOCK_MONOTONIC as of the last heartbeat.
	Heartbeat int64
	// Closed is set once the process closed the journal (an orderly end).
	Closed bool
	// Unrecorded is how many live instances found no free slot: their
	// calls are not among Calls.
	Unrecorded int64
	// Calls are the calls in progress.
	Calls []JournalCall
	// Torn counts slots caught mid-write (always, for a slot its process
	// died writing): they are not among Calls.
	Torn int
}

// JournalCall is one call in progress.
type JournalCall struct {
	Slot int
	// Module is the module's name (Module.Name) and SHA256 its hash, hex.
	Module, SHA256 string
	// Start is CLOCK_MONOTONIC when the call started.
	Start int64
	// Deadline is the module's Limits.Deadline.
	Deadline time.Duration
}

// Wall converts a CLOCK_MONOTONIC time of the snapshot's process to the
// wall clock.
func (s *JournalSnapshot) Wall(mono int64) time.Time {
	return time.Unix(0, s.WallBase+(mono-s.MonoBase))
}

// ErrNotJournal is returned for a file that is not a call journal of this
// version.
var ErrNotJournal = errors.New("not a sluice call journal")

// decodeJournal reads a journal from mem into dst, reusing dst.Calls. mem
// may be a live mapping another process writes, or any bytes: nothing in
// it is trusted.
func decodeJournal(mem []byte, dst *JournalSnapshot) error {
	calls := dst.Calls[:0]
	*dst = JournalSnapshot{Calls: calls}
	if len(mem) < journalHeaderSize {
		return fmt.Errorf("%w: %d bytes, shorter than its header", ErrNotJournal, len(mem))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		// The header's and slots' words are read atomically: align them.
		aligned := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(make([]uint64, (len(mem)+7)/8)))), len(mem))
		copy(aligned, mem)
		mem = aligned
	}
	if string(mem[:8]) != journalMagic {
		return fmt.Errorf("%w: bad magic", ErrNotJournal)
	}
	h := (*journalHeader)(unsafe.Pointer(&mem[0]))
	if h.version != journalVersion || h.slotSize != journalSlotSize {
		return fmt.Errorf("%w: version %d with slots of %d bytes; this sluice writes version %d, %d",
			ErrNotJournal, h.version, h.slotSize, journalVersion, journalSlotSize)
	}
	n := int(h.slots)
	if have := (len(mem) - journalHeaderSize) / journalSlotSize; n > have {
		return fmt.Errorf("%w: %d slots in %d bytes", ErrNotJournal, n, len(mem))
	}
	dst.PID, dst.MonoBase, dst.WallBase = int(h.pid), h.monoBase, h.wallBase
	dst.Heartbeat = h.heartbeat.Load()
	dst.Closed = h.closed.Load() != 0
	dst.Unrecorded = h.unrecorded.Load()
	used := min(int(h.used.Load()), n)
	if used == 0 {
		return nil
	}
	slots := unsafe.Slice((*journalSlot)(unsafe.Pointer(&mem[journalHeaderSize])), used)
	var sha [32]byte
	var name [journalNameMax]byte
	for i := range slots {
		s := &slots[i]
		if s.state.Load() != 1 || s.start.Load() == 0 {
			continue
		}
		ok := false
		var start int64
		var deadline int64
		var nameLen int
		for range 4 {
			seq := s.seq.Load()
			if seq&1 != 0 {
				continue
			}
			start = s.start.Load()
			deadline = s.deadline
			sha = s.sha256
			nameLen = min(int(s.nameLen), journalNameMax)
			copy(name[:nameLen], s.name[:nameLen])
			if s.seq.Load() == seq {
				ok = true
				break
			}
		}
		switch {
		case !ok:
			dst.Torn++
		case start != 0:
			dst.Calls = append(dst.Calls, JournalCall{Slot: i, Module: string(name[:nameLen]),
				SHA256: hex.EncodeToString(sha[:]), Start: start, Deadline: time.Duration(deadline)})
		}
	}
	return nil
}
