package wasmhost

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// outputBuilder writes output payloads as guest-sdk/ABI.md describes them.
type outputBuilder struct{ b []byte }

func newOutput(records int) *outputBuilder {
	return &outputBuilder{b: binary.LittleEndian.AppendUint32(nil, uint32(records))}
}

func (o *outputBuilder) rows(rows ...[]byte) *outputBuilder {
	o.b = append(o.b, 0)
	o.b = binary.LittleEndian.AppendUint32(o.b, uint32(len(rows)))
	for i, r := range rows {
		o.b = binary.LittleEndian.AppendUint16(o.b, uint16(i))
		o.b = binary.LittleEndian.AppendUint32(o.b, uint32(len(r)))
		o.b = append(o.b, r...)
	}
	return o
}

func (o *outputBuilder) err(msg string) *outputBuilder {
	o.b = append(o.b, 1)
	o.b = binary.LittleEndian.AppendUint32(o.b, uint32(len(msg)))
	o.b = append(o.b, msg...)
	return o
}

var testLimits, _ = Limits{MaxRowsPerRecord: 4, MaxOutputBytes: 1 << 16}.withDefaults()

func TestParseOutput(t *testing.T) {
	valid := newOutput(3).rows([]byte("r0"), []byte("r1")).err("bad").rows().b
	tests := []struct {
		name    string
		raw     []byte
		records int
		want    string // error, "" for none
		limit   Limit
	}{
		{"valid", valid, 3, "", ""},
		{"empty", nil, 0, "malformed output: output ends early", ""},
		{"count mismatch", valid, 2, "malformed output: output has 3 records for 2 input records", ""},
		{"truncated", valid[:len(valid)-1], 3, "malformed output: record 2: output ends early", ""},
		{"trailing", append(append([]byte{}, valid...), 0), 3, "malformed output: 1 bytes after the last record", ""},
		{"no records", newOutput(1).err("x").b[:4:4], 1, "malformed output: record 0: output ends early", ""},
		{"status 2", append(binary.LittleEndian.AppendUint32(nil, 1), 2), 1, "malformed output: record 0: status 2 is neither 0 nor 1", ""},
		{"row past end", append(binary.LittleEndian.AppendUint32(nil, 1), 0, 1, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff), 1,
			"malformed output: record 0 row 0: length 4294967295 past the end", ""},
		{"too many rows", newOutput(1).rows(nil, nil, nil, nil, nil).b, 1,
			"output limit exceeded: record 0 produced 5 rows; the limit is 4 per record", LimitOutputRows},
		{"huge row count", append(binary.LittleEndian.AppendUint32(nil, 1), 0, 0xff, 0xff, 0xff, 0xff), 1,
			"output limit exceeded: record 0 produced 4294967295 rows; the limit is 4 per record", LimitOutputRows},
		{"too many bytes", newOutput(1).rows(make([]byte, 1<<16)).b, 1,
			"output limit exceeded: 65551 bytes of output for 1 records; the limit is 65536", LimitOutputBytes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out Output
			out.total = tt.records
			err := parseOutput(&out, tt.raw, tt.records, testLimits)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			var le *limitError
			gotLimit := Limit("")
			if errors.As(err, &le) {
				gotLimit = le.limit
			}
			if gotLimit != tt.limit {
				t.Errorf("limit %q, want %q", gotLimit, tt.limit)
			}
			wantSentinel := ErrMalformedOutput
			if tt.limit != "" {
				wantSentinel = ErrOutputLimit
			}
			if !errors.Is(err, wantSentinel) {
				t.Errorf("errors.Is(err, %v) is false", wantSentinel)
			}
		})
	}
}

func TestOutputNext(t *testing.T) {
	long := "a" + strings.Repeat("é", MaxErrorMessage) // 2 bytes each: the cut falls inside one
	raw := newOutput(4).rows([]byte("a"), []byte("bc")).err("").err(long).rows().b
	out := Output{total: 5, skip: []skipped{{index: 1, size: 99}}, limit: 50}
	if err := parseOutput(&out, raw, 4, testLimits); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		r, ok := out.Next()
		if !ok {
			break
		}
		if r.Err != "" {
			if len(r.Err) > 1000 {
				got = append(got, fmt.Sprintf("err of %d bytes, valid UTF-8: %v", len(r.Err), strings.ToValidUTF8(r.Err, "?") == r.Err))
			} else {
				got = append(got, "err "+r.Err)
			}
			continue
		}
		s := fmt.Sprintf("%d rows:", r.Rows())
		for {
			table, row, ok := r.NextRow()
			if !ok {
				break
			}
			s += fmt.Sprintf(" %d=%s", table, row)
		}
		got = append(got, s)
	}
	want := []string{
		"2 rows: 0=a 1=bc",
		"err record of 99 bytes is over the module's limit of 50 bytes (key, value and headers); it was not passed to the module",
		"err module reported an error without a message",
		fmt.Sprintf("err of %d bytes, valid UTF-8: true", MaxErrorMessage-1+len(" …(truncated)")),
		"0 rows:",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// FuzzParseOutput feeds arbitrary guest output to the host's parser: it
// must never panic, and what it accepts must iterate in bounds, with one
// result per record and at most MaxRowsPerRecord rows each.
func FuzzParseOutput(f *testing.F) {
	f.Add(newOutput(3).rows([]byte("r0"), []byte("r1")).err("bad").rows().b, uint8(3))
	f.Add(newOutput(1).rows(nil, nil, nil, nil, nil).b, uint8(1))
	f.Add(newOutput(2).err("x").rows(make([]byte, 300)).b, uint8(2))
	f.Add([]byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, records uint8) {
		out := Output{total: int(records)}
		if err := parseOutput(&out, raw, int(records), testLimits); err != nil {
			return
		}
		n := 0
		for {
			r, ok := out.Next()
			if !ok {
				break
			}
			n++
			rows := 0
			for {
				if _, _, ok := r.NextRow(); !ok {
					break
				}
				rows++
			}
			if rows != r.Rows() || rows > testLimits.MaxRowsPerRecord {
				t.Fatalf("record %d: %d rows, Rows() %d", n-1, rows, r.Rows())
			}
		}
		if n != int(records) {
			t.Fatalf("%d results for %d records", n, records)
		}
	})
}

// decodeBatch is an independent decoder of the batch payload of
// guest-sdk/ABI.md, to check the host's encoder against.
func decodeBatch(p []byte) (*Batch, error) {
	off := 0
	errShort := errors.New("short")
	u32 := func() (uint32, error) {
		if len(p)-off < 4 {
			return 0, errShort
		}
		v := binary.LittleEndian.Uint32(p[off:])
		off += 4
		return v, nil
	}
	str := func() ([]byte, error) {
		n, err := u32()
		if err != nil || uint64(len(p)-off) < uint64(n) {
			return nil, errShort
		}
		b := p[off : off+int(n)]
		off += int(n)
		return b, nil
	}
	b := &Batch{}
	topic, err := str()
	if err != nil {
		return nil, err
	}
	b.Topic = string(topic)
	part, err := u32()
	if err != nil {
		return nil, err
	}
	b.Partition = int32(part)
	n, err := u32()
	if err != nil {
		return nil, err
	}
	for range n {
		if len(p)-off < 16 {
			return nil, errShort
		}
		var r Record
		r.Offset = int64(binary.LittleEndian.Uint64(p[off:]))
		r.Timestamp = int64(binary.LittleEndian.Uint64(p[off+8:]))
		off += 16
		if r.Key, err = str(); err != nil {
			return nil, err
		}
		if r.Value, err = str(); err != nil {
			return nil, err
		}
		nh, err := u32()
		if err != nil {
			return nil, err
		}
		for range nh {
			k, err := str()
			if err != nil {
				return nil, err
			}
			v, err := str()
			if err != nil {
				return nil, err
			}
			r.Headers = append(r.Headers, Header{Key: string(k), Value: v})
		}
		b.Records = append(b.Records, r)
	}
	if off != len(p) {
		return nil, fmt.Errorf("%d trailing bytes", len(p)-off)
	}
	return b, nil
}

// batchFromBytes makes a batch out of fuzz input: the bytes are cut into
// topic, keys, values and headers at positions the input itself chooses.
func batchFromBytes(topic string, partition int32, data []byte) *Batch {
	b := &Batch{Topic: topic, Partition: partition}
	take := func() []byte {
		if len(data) == 0 {
			return nil
		}
		n := int(data[0]) % (len(data))
		v := data[1 : 1+min(n, len(data)-1)]
		data = data[1+len(v):]
		return v
	}
	for i := 0; len(data) > 0 && i < 100; i++ {
		r := Record{Offset: int64(i) * 7, Timestamp: -int64(i), Key: take(), Value: take()}
		for nh := len(data) % 3; nh > 0; nh-- {
			r.Headers = append(r.Headers, Header{Key: string(take()), Value: take()})
		}
		b.Records = append(b.Records, r)
	}
	return b
}

// FuzzBatchEncode round-trips the host's batch framing through an
// independent decoder.
func FuzzBatchEncode(f *testing.F) {
	f.Add("logs", int32(3), []byte("\x03key\x05value"))
	f.Add("", int32(-1), []byte{})
	f.Add("t", int32(0), bytes.Repeat([]byte{2, 'a', 'b'}, 50))
	f.Fuzz(func(t *testing.T, topic string, partition int32, data []byte) {
		b := batchFromBytes(topic, partition, data)
		buf := make([]byte, b.encodedSize())
		b.encode(buf)
		got, err := decodeBatch(buf)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		norm := func(b *Batch) {
			for i := range b.Records {
				r := &b.Records[i]
				if len(r.Key) == 0 {
					r.Key = nil
				}
				if len(r.Value) == 0 {
					r.Value = nil
				}
				for j := range r.Headers {
					if len(r.Headers[j].Value) == 0 {
						r.Headers[j].Value = nil
					}
				}
			}
		}
		norm(b)
		norm(got)
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, b)
		}
	})
}
