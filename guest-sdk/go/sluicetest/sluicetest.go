// Package sluicetest builds the payloads the sluice host sends a guest and
// decodes what the guest answers, so that a module's Handler can be tested
// natively, without wasm, through sluice.Instance:
//
//	in := sluice.NewInstance(myHandler)
//	if msg := in.Init(sluicetest.InitPayload(params, tables)); msg != "" { … }
//	res, err := sluicetest.DecodeOutput(in.Transform(sluicetest.BatchPayload("topic", 0, recs)))
//	vals, err := sluicetest.DecodeRow(tables[res[0].Rows[0].Table].Columns, res[0].Rows[0].Data)
//
// It follows guest-sdk/ABI.md and checks what it decodes as strictly as the
// host does.
package sluicetest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype/chvalue"
)

// Param is a module parameter.
type Param struct{ Key, Value string }

// Column is a column of a target table.
type Column struct{ Name, Type string }

// Table is a target table.
type Table struct {
	Name    string
	Columns []Column
}

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is a Kafka record of a batch.
type Record struct {
	Offset    int64
	Timestamp int64 // milliseconds since the Unix epoch
	Key       []byte
	Value     []byte
	Headers   []Header
}

func appendStr[T string | []byte](b []byte, s T) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// InitPayload encodes the init payload.
func InitPayload(params []Param, tables []Table) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(params)))
	for _, p := range params {
		b = appendStr(appendStr(b, p.Key), p.Value)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(tables)))
	for _, t := range tables {
		b = appendStr(b, t.Name)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Columns)))
		for _, c := range t.Columns {
			b = appendStr(appendStr(b, c.Name), c.Type)
		}
	}
	return b
}

// BatchPayload encodes a batch payload.
func BatchPayload(topic string, partition int32, recs []Record) []byte {
	return AppendBatch(nil, topic, partition, recs)
}

// AppendBatch appends a batch payload to b.
func AppendBatch(b []byte, topic string, partition int32, recs []Record) []byte {
	b = appendStr(b, topic)
	b = binary.LittleEndian.AppendUint32(b, uint32(partition))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(recs)))
	for _, r := range recs {
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Offset))
		b = binary.LittleEndian.AppendUint64(b, uint64(r.Timestamp))
		b = appendStr(appendStr(b, r.Key), r.Value)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Headers)))
		for _, h := range r.Headers {
			b = appendStr(appendStr(b, h.Key), h.Value)
		}
	}
	return b
}

// Result is the guest's answer for one record.
type Result struct {
	Failed bool   // status 1: the record is dead-lettered with Err
	Err    string // the error message when Failed
	Rows   []Row  // status 0: the rows (none: filtered out)
}

// Row is one output row: a table index and RowBinary bytes.
type Row struct {
	Table int
	Data  []byte
}

// DecodeOutput decodes an output payload. The results alias p.
func DecodeOutput(p []byte) ([]Result, error) {
	d := dec{p: p}
	n := d.u32()
	var res []Result
	for i := uint32(0); i < n && d.err == nil; i++ {
		var r Result
		switch st := d.u8(); st {
		case 0:
			nrows := d.u32()
			for j := uint32(0); j < nrows && d.err == nil; j++ {
				t := d.u16()
				r.Rows = append(r.Rows, Row{Table: int(t), Data: d.str()})
			}
		case 1:
			r.Failed, r.Err = true, string(d.str())
		default:
			d.fail(fmt.Errorf("record %d: status %d", i, st))
		}
		res = append(res, r)
	}
	if d.err == nil && d.off != len(p) {
		d.fail(fmt.Errorf("%d trailing bytes", len(p)-d.off))
	}
	if d.err != nil {
		return nil, fmt.Errorf("sluicetest: output payload: %w", d.err)
	}
	return res, nil
}

// DecodeRow decodes one RowBinary row of a table with the given columns, as
// the host does: every column present, every enum value declared, no
// trailing bytes. Values are Go values: the integer and float types of their
// width, string for String, JSON and FixedString, bool, time.Time (UTC) for
// Date and DateTime, Date32 and DateTime64, a canonical UUID string, the name
// of an enum value, netip.Addr, nil for NULL, []any for arrays and tuples,
// [][2]any (key, value) for maps, *big.Int for Int128 … UInt256 and the
// decimal text ("-12.34") for Decimals.
func DecodeRow(cols []Column, data []byte) ([]any, error) {
	vals := make([]any, 0, len(cols))
	off := 0
	for _, c := range cols {
		t, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, err
		}
		v, n, err := chvalue.Decode(t, data[off:])
		if err != nil {
			return nil, fmt.Errorf("sluicetest: column %q (%s) at offset %d: %w", c.Name, c.Type, off, err)
		}
		vals = append(vals, v)
		off += n
	}
	if off != len(data) {
		return nil, fmt.Errorf("sluicetest: row has %d trailing bytes", len(data)-off)
	}
	return vals, nil
}

type dec struct {
	p   []byte
	off int
	err error
}

var errShort = errors.New("truncated")

func (d *dec) fail(err error) {
	if d.err == nil {
		d.err = err
	}
}

func (d *dec) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.p)-d.off {
		d.fail(fmt.Errorf("%w at offset %d", errShort, d.off))
		return nil
	}
	b := d.p[d.off : d.off+n]
	d.off += n
	return b
}

func (d *dec) u8() uint8 {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *dec) u16() uint16 {
	if b := d.take(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *dec) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *dec) str() []byte { return d.take(int(d.u32())) }
