//go:build wasip1

// Command malformed-rows is an adversarial sluice module that implements the
// guest ABI by hand, without the SDK, so that it can write what the SDK
// refuses to. For the adv table (offset UInt64, value String), a record whose
// value is
//
//   - "bad" gets a row whose RowBinary is short (the offset and no value):
//     the framing is sound, so the batch goes through and the sink's
//     decoder fails that record alone;
//   - "badframe" makes the whole output malformed (the row's length points
//     past the end of the payload): the host fails the instance with a
//     *wasmhost.TrapError wrapping wasmhost.ErrMalformedOutput;
//   - "fanout:N" gets N rows (the host enforces Limits.MaxRowsPerRecord);
//   - "big:N" gets one row whose value is N bytes (Limits.MaxOutputBytes);
//   - "longerr" fails with a 10,000-byte message (the host keeps 4 KiB);
//
// and any other record becomes the row (offset, value). It accepts any init
// configuration and assumes the adv table is the first.
package main

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unsafe"
)

func main() {}

var (
	inBuf []byte
	out   []byte
)

//go:wasmexport sluice_abi_version
func abiVersion() int32 { return 1 }

//go:wasmexport sluice_alloc
func alloc(size int32) unsafe.Pointer {
	if int(size) > cap(inBuf) {
		inBuf = make([]byte, size)
	}
	return unsafe.Pointer(unsafe.SliceData(inBuf))
}

//go:wasmexport sluice_init
func initModule(ptr unsafe.Pointer, n int32) int64 { return 0 }

//go:wasmexport sluice_transform
func transform(ptr unsafe.Pointer, n int32) int64 {
	in := unsafe.Slice((*byte)(ptr), n)
	le := binary.LittleEndian
	p := 4 + int(le.Uint32(in)) + 4 // topic, partition
	nrec := int(le.Uint32(in[p:]))
	p += 4
	out = le.AppendUint32(out[:0], uint32(nrec))
	for range nrec {
		offset := le.Uint64(in[p:])
		p += 16
		p += 4 + int(le.Uint32(in[p:])) // key
		vlen := int(le.Uint32(in[p:]))
		value := string(in[p+4 : p+4+vlen])
		p += 4 + vlen
		nh := int(le.Uint32(in[p:]))
		p += 4
		for range nh {
			p += 4 + int(le.Uint32(in[p:]))
			p += 4 + int(le.Uint32(in[p:]))
		}
		switch {
		case value == "bad":
			out = append(out, 0)
			out = le.AppendUint32(out, 1)
			out = le.AppendUint16(out, 0)
			out = le.AppendUint32(out, 8)
			out = le.AppendUint64(out, offset)
		case value == "badframe":
			out = append(out, 0)
			out = le.AppendUint32(out, 1)
			out = le.AppendUint16(out, 0)
			out = le.AppendUint32(out, 1<<20)
			out = le.AppendUint64(out, offset)
		case strings.HasPrefix(value, "fanout:"):
			rows, _ := strconv.Atoi(value[len("fanout:"):])
			out = append(out, 0)
			out = le.AppendUint32(out, uint32(rows))
			for range rows {
				out = appendRow(out, offset, value)
			}
		case strings.HasPrefix(value, "big:"):
			size, _ := strconv.Atoi(value[len("big:"):])
			out = append(out, 0)
			out = le.AppendUint32(out, 1)
			out = appendRow(out, offset, strings.Repeat("x", size))
		case value == "longerr":
			msg := strings.Repeat("long error ", 1000)[:10000]
			out = append(out, 1)
			out = le.AppendUint32(out, uint32(len(msg)))
			out = append(out, msg...)
		default:
			out = append(out, 0)
			out = le.AppendUint32(out, 1)
			out = appendRow(out, offset, value)
		}
	}
	return int64(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(out))))<<32 | uint64(len(out)))
}

// appendRow appends a row of table 0: (offset UInt64, value String).
func appendRow(b []byte, offset uint64, value string) []byte {
	le := binary.LittleEndian
	b = le.AppendUint16(b, 0)
	lenAt := len(b)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, offset)
	b = binary.AppendUvarint(b, uint64(len(value)))
	b = append(b, value...)
	le.PutUint32(b[lenAt:], uint32(len(b)-lenAt-4))
	return b
}
