package sensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"unsafe"
)

// SchemaID is the Confluent schema id of SensorBatch (there is no schema
// registry in the benchmark: the id is fixed, and checked).
const SchemaID = 1

// AvroDecoder decodes a Confluent-framed Avro SensorBatch: byte 0, the
// big-endian schema id, then the datum in Avro binary encoding, of the
// schema in the workload's sensor_batch.avsc:
//
//	batch_id long, sensor string, region [null, string], batch_ts_ms long,
//	send_ts_us long, events array<{seq int, name string, unit string,
//	value long, quality [null, double], tags array<string>}>
//
// Reset decodes the header; Next decodes the events one at a time, so a
// batch is never materialised. Arrays may come in several blocks, with
// negative block counts (followed by the block's byte size) as the Avro
// spec allows.
type AvroDecoder struct {
	p    []byte
	off  int
	left int64 // events left in the current block
	done bool
	err  error
	slow int // calls of nextSlow since Reset: the tests see the fast path's share
}

// Reset starts decoding msg and decodes its header into h. The decoder and
// h alias msg.
func (d *AvroDecoder) Reset(msg []byte, h *Header) error {
	*d = AvroDecoder{p: msg}
	if len(msg) < 5 || msg[0] != 0 {
		if len(msg) == 0 {
			return fmt.Errorf("avro: empty message, want Confluent wire format (0x00, schema id, datum)")
		}
		return fmt.Errorf("avro: not Confluent wire format: first byte 0x%02x of %d, want 0x00 and a 4-byte schema id", msg[0], len(msg))
	}
	if id := binary.BigEndian.Uint32(msg[1:5]); id != SchemaID {
		return fmt.Errorf("avro: schema id %d, want %d (SensorBatch)", id, SchemaID)
	}
	d.off = 5
	h.BatchID = d.long("batch_id")
	h.Sensor = d.bytes("sensor")
	switch d.long("region union index") {
	case 0:
		h.Region, h.RegionNull = nil, true
	case 1:
		h.Region, h.RegionNull = d.bytes("region"), false
	default:
		d.fail(d.off, "region: union index is neither 0 (null) nor 1 (string)")
	}
	h.BatchTsMs = d.long("batch_ts_ms")
	h.SendTsUs = d.long("send_ts_us")
	return d.err
}

// Next decodes the next event into e and reports whether there was one.
// After it returns false, Err says whether the datum ended cleanly.
//
// Most events are decoded by Next's fast path: while at least 8 bytes of
// the message are left past every varint it reads, each varint of up to 8
// bytes is one load and some arithmetic (varint8), with no loop, and its
// checks fall through. On wasm a taken branch costs dearly in Go's code:
// every jump goes through the function's dispatch loop, where the host's
// deadline counts, and a varint's byte loop takes one or more per byte. Anything the fast
// path does not take as it is (the end of the message, a block boundary,
// a varint of more than 8 bytes, a negative block count, a bad value) is
// decoded again from the event's start by nextSlow, byte by byte, which
// also reports what is wrong. Both decode an event the same way
// (TestAvroFastPathMatchesSlow).
//
// The fast path is taken on wasm only (wordVarints).
func (d *AvroDecoder) Next(e *Event) bool {
	p, i := d.p, d.off
	base := unsafe.Pointer(unsafe.SliceData(p))
	lim := len(p) - 8                                                       // a varint8 at i <= lim reads within p
	if !wordVarints || d.left == 0 || d.err != nil || d.done || i > lim-9 { // a varint8 ends by i+9
		return d.nextSlow(e)
	}
	seq, j := varint8(base, i)
	n, k := varint8(base, j)
	if j-i > 8 || k-j > 8 || seq != int64(int32(seq)) || n < 0 || n > int64(lim-k) {
		return d.nextSlow(e)
	}
	e.Seq, e.Name, i = int32(seq), p[k:k+int(n):k+int(n)], k+int(n)
	n, k = varint8(base, i)
	if k-i > 8 || n < 0 || n > int64(lim-k) {
		return d.nextSlow(e)
	}
	e.Unit, i = p[k:k+int(n):k+int(n)], k+int(n)
	v, j := varint8(base, i)
	if j-i > 8 || j > lim {
		return d.nextSlow(e)
	}
	e.Value = v
	switch u, k := varint8(base, j); {
	case k-j > 8 || k > lim:
		return d.nextSlow(e)
	case u == 0:
		e.QualityNull, e.Quality, i = true, 0, k
	case u == 1 && k <= lim-8: // the double, and the next varint8
		e.QualityNull, e.Quality, i = false, math.Float64frombits(le64(base, k)), k+8
	default:
		return d.nextSlow(e)
	}
	e.Tags = e.Tags[:0]
	for {
		c, j := varint8(base, i)
		if j-i > 8 || c < 0 || c > 0 && j > lim {
			return d.nextSlow(e)
		}
		if i = j; c == 0 {
			break
		}
		for ; c > 0; c-- {
			n, k := varint8(base, i)
			if k-i > 8 || n < 0 || n > int64(lim-k) {
				return d.nextSlow(e)
			}
			e.Tags, i = append(e.Tags, p[k:k+int(n):k+int(n)]), k+int(n)
		}
	}
	d.left--
	d.off = i
	return true
}

// wordVarints is whether Next takes its fast path: on wasm, where it is
// much faster. Natively the byte-by-byte decoder is faster: the CPU
// predicts its branches and runs ahead of them, where each varint8 waits
// for the one before (BenchmarkAvroNext). The tests turn it on natively
// to check the fast path against the other.
var wordVarints = runtime.GOARCH == "wasm"

// varint8 decodes the zigzag varint at p[i:] of up to 8 bytes, which
// i <= len(p)-8 lets it read in one load, and returns it and the offset
// after it. The stop byte is found with a count of trailing zeros, the
// bytes past it masked off, and the 7-bit groups packed in three steps.
// When none of the 8 bytes ends the varint, next is i+9 and v is not the
// varint's value. It inlines.
func varint8(p unsafe.Pointer, i int) (v int64, next int) {
	x := le64(p, i)
	m := ^x & 0x8080808080808080 // the stop bits of the bytes that end a varint
	x &= m - 1                   // the bits before the first: the varint's
	x = x&0x007f007f007f007f | x&0x7f007f007f007f00>>1
	x = x&0x00003fff00003fff | x&0x3fff00003fff0000>>2
	x = x&0x000000000fffffff | x&0x0fffffff00000000>>4
	return int64(x>>1 ^ -(x & 1)), i + (bits.TrailingZeros64(m)+8)>>3
}

// nextSlow is Next byte by byte, from the event's start: the way every
// event is decoded where the fast path does not go, and the one that
// finds a batch's errors.
func (d *AvroDecoder) nextSlow(e *Event) bool {
	d.slow++
	if d.err != nil || d.done {
		return false
	}
	if d.left == 0 {
		d.left = d.blockCount("events")
		if d.left == 0 {
			d.done = true
			if d.err == nil && d.off != len(d.p) {
				d.fail(d.off, fmt.Sprintf("%d trailing bytes after the datum", len(d.p)-d.off))
			}
			return false
		}
	}
	d.left--
	p, i := d.p, d.off
	seq, j := varint(p, i)
	if j < 0 || seq < math.MinInt32 || seq > math.MaxInt32 {
		return d.failVarint(i, j, "seq", "seq: out of the range of an Avro int")
	}
	e.Seq = int32(seq)
	n, k := varint(p, j)
	if k < 0 || uint64(n) > uint64(len(p)-k) {
		return d.failString(j, k, n, "name")
	}
	e.Name, i = p[k:k+int(n):k+int(n)], k+int(n)
	n, k = varint(p, i)
	if k < 0 || uint64(n) > uint64(len(p)-k) {
		return d.failString(i, k, n, "unit")
	}
	e.Unit, i = p[k:k+int(n):k+int(n)], k+int(n)
	if e.Value, j = varint(p, i); j < 0 {
		return d.failVarint(i, j, "value", "")
	}
	switch u, k := varint(p, j); {
	case k < 0:
		return d.failVarint(j, k, "quality union index", "")
	case u == 0:
		e.QualityNull, e.Quality, i = true, 0, k
	case u == 1 && k <= len(p)-8:
		e.QualityNull, i = false, k+8
		e.Quality = math.Float64frombits(binary.LittleEndian.Uint64(p[k:]))
	case u == 1:
		return d.failAt(k, "truncated reading quality")
	default:
		return d.failAt(j, "quality: union index is neither 0 (null) nor 1 (double)")
	}
	e.Tags = e.Tags[:0]
	for {
		c, j := varint(p, i)
		if j < 0 {
			return d.failVarint(i, j, "tags block count", "")
		}
		if c < 0 { // a negative count is followed by the block's size in bytes
			if c == math.MinInt64 {
				return d.failAt(i, "tags: block count out of range")
			}
			size, k := varint(p, j)
			if k < 0 || size < 0 {
				return d.failVarint(j, k, "tags block size", "tags: negative block size")
			}
			c, j = -c, k
		}
		i = j
		if c == 0 {
			break
		}
		for ; c > 0; c-- {
			n, k := varint(p, i)
			if k < 0 || uint64(n) > uint64(len(p)-k) {
				return d.failString(i, k, n, "tag")
			}
			e.Tags, i = append(e.Tags, p[k:k+int(n):k+int(n)]), k+int(n)
		}
	}
	d.off = i
	return true
}

// varint decodes the zigzag varint at p[i:] and returns it and the offset
// after it, or next < 0 when it is truncated or overflows 64 bits. It is
// small enough to inline.
func varint(p []byte, i int) (v int64, next int) {
	var u uint64
	for s := uint(0); s < 64; s += 7 {
		if i >= len(p) {
			return 0, -1
		}
		c := p[i]
		i++
		u |= uint64(c&0x7f) << s
		if c < 0x80 {
			if s == 63 && c > 1 {
				return 0, -2
			}
			return int64(u>>1) ^ -int64(u&1), i
		}
	}
	return 0, -2
}

// failVarint records the error of a varint read at off: truncated (next
// -1), overflowing (-2), or, when it decoded, bad with msg. It returns false.
func (d *AvroDecoder) failVarint(off, next int, what, msg string) bool {
	switch next {
	case -1:
		d.fail(off, "truncated reading "+what)
	case -2:
		d.fail(off, what+": varint overflows 64 bits")
	default:
		d.fail(off, msg)
	}
	return false
}

// failString records the error of a string read at off.
func (d *AvroDecoder) failString(off, next int, n int64, what string) bool {
	switch {
	case next < 0:
		return d.failVarint(off, next, what, "")
	case n < 0:
		d.fail(off, fmt.Sprintf("%s: negative length %d", what, n))
	default:
		d.fail(off, fmt.Sprintf("%s: length %d overruns the message", what, n))
	}
	return false
}

func (d *AvroDecoder) failAt(off int, msg string) bool {
	d.fail(off, msg)
	return false
}

// Err is the first decoding error, if any.
func (d *AvroDecoder) Err() error { return d.err }

func (d *AvroDecoder) fail(off int, msg string) {
	if d.err == nil {
		d.err = fmt.Errorf("avro: %s at byte %d", msg, off)
	}
	d.off = len(d.p) // every later read fails fast
	d.left = 0
}

// long reads a zigzag varint. The one-byte case inlines.
func (d *AvroDecoder) long(what string) int64 {
	if i := d.off; i < len(d.p) && d.p[i] < 0x80 {
		d.off = i + 1
		u := uint64(d.p[i])
		return int64(u>>1) ^ -int64(u&1)
	}
	return d.longSlow(what)
}

func (d *AvroDecoder) longSlow(what string) int64 {
	var u uint64
	start := d.off
	for i, shift := d.off, uint(0); i < len(d.p); i, shift = i+1, shift+7 {
		c := d.p[i]
		if shift == 63 && c > 1 {
			d.fail(start, what+": varint overflows 64 bits")
			return 0
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			d.off = i + 1
			return int64(u>>1) ^ -int64(u&1)
		}
	}
	if d.err == nil {
		d.fail(start, "truncated reading "+what)
	}
	return 0
}

// bytes reads an Avro string or bytes: a long length, then the bytes,
// aliased (capacity capped at the length).
func (d *AvroDecoder) bytes(what string) []byte {
	start := d.off
	n := d.long(what)
	if n >= 0 && n <= int64(len(d.p)-d.off) {
		end := d.off + int(n)
		b := d.p[d.off:end:end]
		d.off = end
		return b
	}
	if d.err == nil {
		if n < 0 {
			d.fail(start, fmt.Sprintf("%s: negative length %d", what, n))
		} else {
			d.fail(start, fmt.Sprintf("%s: length %d overruns the message", what, n))
		}
	}
	return nil
}

// blockCount reads an array block's item count; a negative count is
// followed by the block's size in bytes, which is skipped.
func (d *AvroDecoder) blockCount(what string) int64 {
	start := d.off
	n := d.long(what + " block count")
	if n < 0 {
		if n == math.MinInt64 {
			d.fail(start, what+": block count out of range")
			return 0
		}
		n = -n
		if size := d.long(what + " block size"); size < 0 {
			d.fail(start, what+": negative block size")
			return 0
		}
	}
	if d.err != nil {
		return 0
	}
	return n
}
