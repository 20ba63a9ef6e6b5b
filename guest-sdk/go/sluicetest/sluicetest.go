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
	"math"
	"math/big"
	"net/netip"
	"time"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
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
// width, string for String and FixedString, bool, time.Time (UTC) for Date
// and DateTime, Date32 and DateTime64, a canonical UUID string, the name of
// an enum value, netip.Addr, nil for NULL, []any for arrays and tuples,
// [][2]any (key, value) for maps, *big.Int for Int128 … UInt256 and the
// decimal text ("-12.34") for Decimals.
func DecodeRow(cols []Column, data []byte) ([]any, error) {
	d := dec{p: data}
	vals := make([]any, 0, len(cols))
	for _, c := range cols {
		t, err := chtype.Parse(c.Type)
		if err != nil {
			return nil, err
		}
		v := d.value(t)
		if d.err != nil {
			return nil, fmt.Errorf("sluicetest: column %q (%s): %w", c.Name, c.Type, d.err)
		}
		vals = append(vals, v)
	}
	if d.off != len(data) {
		return nil, fmt.Errorf("sluicetest: row has %d trailing bytes", len(data)-d.off)
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

func (d *dec) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *dec) str() []byte { return d.take(int(d.u32())) }

func (d *dec) uvarint() int {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p[d.off:])
	if n <= 0 || v > math.MaxInt32 {
		d.fail(fmt.Errorf("bad LEB128 length at offset %d", d.off))
		return 0
	}
	d.off += n
	return int(v)
}

func (d *dec) value(t *chtype.Type) any {
	switch t.Kind {
	case chtype.UInt8:
		return d.u8()
	case chtype.UInt16:
		return d.u16()
	case chtype.UInt32:
		return d.u32()
	case chtype.UInt64:
		return d.u64()
	case chtype.Int8:
		return int8(d.u8())
	case chtype.Int16:
		return int16(d.u16())
	case chtype.Int32:
		return int32(d.u32())
	case chtype.Int64:
		return int64(d.u64())
	case chtype.Float32:
		return math.Float32frombits(d.u32())
	case chtype.Float64:
		return math.Float64frombits(d.u64())
	case chtype.String:
		return string(d.take(d.uvarint()))
	case chtype.FixedString:
		return string(d.take(t.Size))
	case chtype.Date:
		return time.Unix(int64(d.u16())*86400, 0).UTC()
	case chtype.DateTime:
		return time.Unix(int64(d.u32()), 0).UTC()
	case chtype.Bool:
		switch b := d.u8(); b {
		case 0, 1:
			return b == 1
		default:
			d.fail(fmt.Errorf("Bool value %d", b))
		}
	case chtype.UUID:
		hi, lo := d.u64(), d.u64()
		var u [16]byte
		binary.BigEndian.PutUint64(u[:8], hi)
		binary.BigEndian.PutUint64(u[8:], lo)
		return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	case chtype.Enum8, chtype.Enum16:
		var v int16
		if t.Kind == chtype.Enum8 {
			v = int16(int8(d.u8()))
		} else {
			v = int16(d.u16())
		}
		if name, ok := t.EnumName(v); ok {
			return name
		}
		d.fail(fmt.Errorf("%d is not a value of %s", v, t.Text))
	case chtype.IPv4:
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], d.u32())
		return netip.AddrFrom4(a)
	case chtype.IPv6:
		if b := d.take(16); b != nil {
			return netip.AddrFrom16([16]byte(b))
		}
	case chtype.Nullable:
		switch b := d.u8(); b {
		case 0:
			return d.value(t.Elem)
		case 1:
			return nil
		default:
			d.fail(fmt.Errorf("Nullable marker %d", b))
		}
	case chtype.Array:
		n := d.uvarint()
		if n > len(d.p)-d.off {
			d.fail(fmt.Errorf("array of %d elements does not fit", n))
			return nil
		}
		a := make([]any, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			a = append(a, d.value(t.Elem))
		}
		return a
	case chtype.Map:
		n := d.uvarint()
		if 2*n > len(d.p)-d.off {
			d.fail(fmt.Errorf("map of %d entries does not fit", n))
			return nil
		}
		m := make([][2]any, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			k := d.value(t.Key)
			m = append(m, [2]any{k, d.value(t.Elem)})
		}
		return m
	case chtype.Tuple:
		a := make([]any, 0, len(t.Seq))
		for _, e := range t.Seq {
			a = append(a, d.value(e))
		}
		return a
	case chtype.Int128, chtype.UInt128, chtype.Int256, chtype.UInt256:
		return d.bigInt(t.Size, t.Kind == chtype.Int128 || t.Kind == chtype.Int256)
	case chtype.Decimal32, chtype.Decimal64, chtype.Decimal128, chtype.Decimal256:
		width := map[chtype.Kind]int{chtype.Decimal32: 4, chtype.Decimal64: 8, chtype.Decimal128: 16, chtype.Decimal256: 32}[t.Kind]
		v := d.bigInt(width, true)
		if v == nil {
			return nil
		}
		return new(big.Rat).SetFrac(v, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Scale)), nil)).FloatString(t.Scale)
	case chtype.Date32:
		return time.Unix(int64(int32(d.u32()))*86400, 0).UTC()
	case chtype.DateTime64:
		ticks := int64(d.u64())
		unit := int64(1)
		for range 9 - t.Scale {
			unit *= 10
		}
		sec, frac := ticks/(1_000_000_000/unit), ticks%(1_000_000_000/unit)
		return time.Unix(sec, frac*unit).UTC()
	default:
		d.fail(fmt.Errorf("type %s is not supported", t.Text))
	}
	return nil
}

// bigInt reads a width-byte little-endian integer.
func (d *dec) bigInt(width int, signed bool) *big.Int {
	b := d.take(width)
	if b == nil {
		return nil
	}
	be := make([]byte, width)
	for i := range b {
		be[width-1-i] = b[i]
	}
	v := new(big.Int).SetBytes(be)
	if signed && b[width-1]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*width)))
	}
	return v
}
