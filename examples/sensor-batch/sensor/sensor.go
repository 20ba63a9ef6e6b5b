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
func AppendUpper(dst, s []byte) []byte {
	for _, c := range s {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
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
