package sensor

import (
	"encoding/binary"
	"math"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// AppendRowBinary appends row r of batch h to dst as RowBinary in the
// modern layout's insert columns (ModernColumns), as a module writes it.
func AppendRowBinary(dst []byte, h *Batch, r *Row) []byte {
	str := func(b []byte, s string) []byte { return append(binary.AppendUvarint(b, uint64(len(s))), s...) }
	dst = binary.LittleEndian.AppendUint64(dst, r.BatchID)
	dst = binary.LittleEndian.AppendUint16(dst, r.EventSeq)
	dst = str(str(str(str(dst, r.Sensor), r.Region), r.NameUpper), r.Unit)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Value))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.ValueScaled))
	if r.QualityNull {
		dst = append(dst, 1)
	} else {
		dst = binary.LittleEndian.AppendUint64(append(dst, 0), math.Float64bits(r.Quality))
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.Tags)))
	for _, t := range r.Tags {
		dst = str(dst, t)
	}
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.BatchTsMs))
	return binary.LittleEndian.AppendUint64(dst, uint64(r.SendTsUs))
}

// ModernColumns are the names and types of the modern layout's insert
// columns, in table order (ingest_ts is MATERIALIZED).
var ModernColumns = [][2]string{
	{"batch_id", "UInt64"}, {"event_seq", "UInt16"},
	{"sensor", "LowCardinality(String)"}, {"region", "LowCardinality(String)"},
	{"name_upper", "LowCardinality(String)"}, {"unit", "LowCardinality(String)"},
	{"value", "Int64"}, {"value_scaled", "Int64"},
	{"quality", "Nullable(Float64)"}, {"tags", "Array(LowCardinality(String))"},
	{"batch_ts", "DateTime64(3)"}, {"send_ts", "DateTime64(6)"},
}

// NativeColumns are ch-go columns of sensor_events in either layout: what
// a plain ch-go client inserts. In the modern layout the LowCardinality
// columns go as LowCardinality, in the 18.16 one as String (at protocol
// revision 54031, as sluice sends them to 18.16).
type NativeColumns struct {
	modern                          bool
	rows                            int
	batchID                         proto.ColUInt64
	eventSeq                        proto.ColUInt16
	sensor, region, nameUpper, unit proto.ColumnOf[string]
	value, valueScaled              proto.ColInt64
	quality                         *proto.ColNullable[float64]
	tags                            *proto.ColArr[string]
	batchTs64, sendTs64             *proto.ColDateTime64
	batchTs                         proto.ColDateTime
	batchTsMs                       proto.ColUInt16
	sendTsUs                        proto.ColInt64
	input                           proto.Input
}

// NewNativeColumns returns empty columns of the layout.
func NewNativeColumns(l Layout) *NativeColumns {
	modern := l == LayoutModern
	c := &NativeColumns{modern: modern, quality: new(proto.ColFloat64).Nullable()}
	str := func() proto.ColumnOf[string] {
		if modern {
			return new(proto.ColStr).LowCardinality()
		}
		return new(proto.ColStr)
	}
	c.sensor, c.region, c.nameUpper, c.unit = str(), str(), str(), str()
	if modern {
		c.tags = new(proto.ColStr).LowCardinality().Array()
	} else {
		c.tags = new(proto.ColStr).Array()
	}
	c.input = proto.Input{
		{Name: "batch_id", Data: &c.batchID}, {Name: "event_seq", Data: &c.eventSeq},
		{Name: "sensor", Data: c.sensor}, {Name: "region", Data: c.region},
		{Name: "name_upper", Data: c.nameUpper}, {Name: "unit", Data: c.unit},
		{Name: "value", Data: &c.value}, {Name: "value_scaled", Data: &c.valueScaled},
		{Name: "quality", Data: c.quality}, {Name: "tags", Data: c.tags},
	}
	if modern {
		c.batchTs64 = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMilli)
		c.sendTs64 = new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro)
		c.input = append(c.input, proto.InputColumn{Name: "batch_ts", Data: c.batchTs64}, proto.InputColumn{Name: "send_ts", Data: c.sendTs64})
	} else {
		c.input = append(c.input, proto.InputColumn{Name: "batch_ts", Data: &c.batchTs},
			proto.InputColumn{Name: "batch_ts_ms", Data: &c.batchTsMs}, proto.InputColumn{Name: "send_ts_us", Data: &c.sendTsUs})
	}
	return c
}

// Append adds row r of batch h.
func (c *NativeColumns) Append(r *Row, h *Batch) {
	c.rows++
	c.batchID.Append(r.BatchID)
	c.eventSeq.Append(r.EventSeq)
	c.sensor.Append(r.Sensor)
	c.region.Append(r.Region)
	c.nameUpper.Append(r.NameUpper)
	c.unit.Append(r.Unit)
	c.value.Append(r.Value)
	c.valueScaled.Append(r.ValueScaled)
	c.quality.Append(proto.Nullable[float64]{Value: r.Quality, Set: !r.QualityNull})
	c.tags.Append(r.Tags)
	if c.modern {
		c.batchTs64.AppendRaw(proto.DateTime64(h.BatchTsMs))
		c.sendTs64.AppendRaw(proto.DateTime64(h.SendTsUs))
	} else {
		c.batchTs.Append(time.Unix(int64(r.BatchTs), 0))
		c.batchTsMs.Append(r.BatchTsMs)
		c.sendTsUs.Append(r.SendTsUs)
	}
}

// Rows is the number of rows appended since the last Reset.
func (c *NativeColumns) Rows() int { return c.rows }

// Input is the columns as a ch-go INSERT's input.
func (c *NativeColumns) Input() proto.Input { return c.input }

// Reset empties the columns, keeping their buffers.
func (c *NativeColumns) Reset() {
	c.rows = 0
	for _, col := range c.input {
		col.Data.(proto.Resettable).Reset()
	}
}
