// Package sensor is the logic of the sensor-batch modules, in plain Go with
// no dependency, so that it runs and is measured natively as well as in
// wasm: the decoded form of a SensorBatch (Header, Event), the Avro decoder
// (Confluent framing, schema id 1), and the workload's transform rules.
//
// Decoding allocates nothing per batch or event once an Event's Tags slice
// has grown: every []byte aliases the message, valid until the next Reset.
// A decoder is not safe for concurrent use.
package sensor

import (
	"fmt"
	"math"
	"slices"
	"unsafe"
)

// The transform's constants.
const (
	DropUnit     = "drop"
	QualityFloor = 0.2
)

// Header is the batch-level fields of a SensorBatch.
type Header struct {
	BatchID    int64
	Sensor     []byte
	Region     []byte // empty when RegionNull
	RegionNull bool
	BatchTsMs  int64 // milliseconds since the Unix epoch
	SendTsUs   int64 // microseconds since the Unix epoch
}

// Event is one event of a batch.
type Event struct {
	Seq         int32
	Name        []byte
	Unit        []byte
	Value       int64
	QualityNull bool
	Quality     float64
	Tags        [][]byte // reused from event to event
}

// Keep reports whether the transform keeps e: steps 1 and 2, drop the
// events whose unit is "drop", then those whose quality is non-null and
// below 0.2.
func Keep(e *Event) bool {
	return string(e.Unit) != DropUnit && (e.QualityNull || !(e.Quality < QualityFloor))
}

// ValueScaled is step 4: value * 1000 / (seq + 1) in Int64 arithmetic,
// the division truncating toward zero (Go's / on int64). seq must have
// passed CheckSeq.
func ValueScaled(e *Event) int64 { return e.Value * 1000 / (int64(e.Seq) + 1) }

// AppendUpper is step 5: appends s with the ASCII letters a-z upper-cased
// and every other byte, including UTF-8 sequences, unchanged.
//
// A string of 8 bytes or more is done 8 bytes at a time (upper8), the last
// 8 overlapping the ones before when the length is not a multiple of 8:
// on wasm a branch costs far more than the arithmetic, and a byte loop
// takes two or three per byte.
func AppendUpper(dst, s []byte) []byte {
	n := len(dst)
	dst = slices.Grow(dst, len(s))[:n+len(s)]
	if len(s) < 8 {
		for i, c := range s {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst[n+i] = c
		}
		return dst
	}
	d, p := unsafe.Pointer(&dst[n]), unsafe.Pointer(unsafe.SliceData(s))
	for i := 0; i < len(s)-8; i += 8 {
		st64(d, i, upper8(le64(p, i)))
	}
	st64(d, len(s)-8, upper8(le64(p, len(s)-8)))
	return dst
}

// upper8 upper-cases the bytes of x that are ASCII a-z. Each byte's low 7
// bits plus 0x80-'a' sets its top bit when it is 'a' or more, plus
// 0x80-'z'-1 when it is past 'z', without a carry into the next byte; a
// byte whose own top bit is set (UTF-8) is left as it is.
func upper8(x uint64) uint64 {
	const ones = 0x0101010101010101
	h := x & (0x7f * ones)
	m := (h + (0x80-'a')*ones) &^ (h + (0x80-'z'-1)*ones) &^ x & (0x80 * ones)
	return x ^ m>>2 // 0x80>>2 is 'a'-'A'
}

// CheckHeader checks what the target table can hold of a header: a
// batch_id that is not negative (UInt64) and a batch_ts_ms within
// DateTime's range (1970 to 2106).
func CheckHeader(h *Header) error {
	if h.BatchID < 0 {
		return fmt.Errorf("batch_id %d is negative", h.BatchID)
	}
	if h.BatchTsMs < 0 || h.BatchTsMs/1000 > math.MaxUint32 {
		return fmt.Errorf("batch_ts_ms %d is outside the range of DateTime (1970 to 2106)", h.BatchTsMs)
	}
	return nil
}

// CheckSeq checks that an event's seq fits event_seq UInt16. It runs per
// event: the error is built out of line so that the check inlines.
func CheckSeq(e *Event) error {
	if uint32(e.Seq) > math.MaxUint16 {
		return seqError(e.Seq)
	}
	return nil
}

func seqError(seq int32) error {
	return fmt.Errorf("event seq %d is outside 0..65535 (event_seq UInt16)", seq)
}

// SplitTs splits batch_ts_ms into the 18.16 table's batch_ts (seconds) and
// batch_ts_ms (the millisecond part). h must have passed CheckHeader.
func SplitTs(h *Header) (sec uint32, ms uint16) {
	return uint32(h.BatchTsMs / 1000), uint16(h.BatchTsMs % 1000)
}

// ModernTicks are the values of the modern layout's DateTime64 columns, as
// RowBinary carries them (Int64 ticks): batch_ts DateTime64(3) in
// milliseconds and send_ts DateTime64(6) in microseconds.
func ModernTicks(h *Header) (batchTs3, sendTs6 int64) { return h.BatchTsMs, h.SendTsUs }
