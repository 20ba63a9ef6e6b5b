package sensor

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The workload's constants.
const (
	EventsPerBatch = 100
	Sensors        = 1024
	Names          = 32
	Tags           = 16
	DropUnit       = "drop"
	QualityFloor   = 0.2
	BaseTsMs       = 1772000000000
	// SchemaID is the fixed Confluent schema id of SensorBatch (there is no
	// schema registry; the module checks it).
	SchemaID = 1
)

// Units are the event units, indexed by (b*7 + s) % 8.
var Units = [8]string{"count", "bytes", "ms", "drop", "ratio", "celsius", "volts", "rpm"}

// The strings the corpus uses, built once so that encoding allocates nothing.
var (
	sensorNames [Sensors]string
	regionNames [7]string
	metricNames [Names]string
	tagNames    [Tags]string
)

func init() {
	for i := range sensorNames {
		sensorNames[i] = "sensor-" + strconv.Itoa(i)
	}
	for i := range regionNames {
		regionNames[i] = "region-" + strconv.Itoa(i)
	}
	for i := range metricNames {
		metricNames[i] = "metric_" + strconv.Itoa(i)
	}
	for i := range tagNames {
		tagNames[i] = "tag-" + strconv.Itoa(i)
	}
}

// DrainSendTsUs is send_ts_us of batch b in a prefilled topic (drain mode).
func DrainSendTsUs(b uint64) int64 { return BaseTsMs*1000 + int64(b) }

// Batch is the batch-level fields of SensorBatch b.
type Batch struct {
	ID         uint64
	Sensor     string
	Region     string // "" when RegionNull
	RegionNull bool
	BatchTsMs  int64
	SendTsUs   int64
}

// Event is one event of a batch, before the transform.
type Event struct {
	Seq         int32
	Name        string
	Unit        string
	Value       int64
	QualityNull bool
	Quality     float64 // 0 when QualityNull
	QualityPct  uint64  // Quality * 100, exactly: Quality is QualityPct / 100.0
	NTags       int
	tag0        uint64 // (b + s) % 16: tag j is tagNames[(tag0+j)%16]
}

// Tag returns the event's tag j (0 <= j < NTags).
func (e *Event) Tag(j int) string { return tagNames[(e.tag0+uint64(j))%Tags] }

// TagList returns the event's tags as a new slice.
func (e *Event) TagList() []string {
	t := make([]string, e.NTags)
	for j := range t {
		t[j] = e.Tag(j)
	}
	return t
}

// MakeBatch returns the batch-level fields of batch b, with send_ts_us sendTsUs.
func MakeBatch(b uint64, sendTsUs int64) Batch {
	h := Batch{ID: b, Sensor: sensorNames[b%Sensors], BatchTsMs: BaseTsMs + int64(b), SendTsUs: sendTsUs}
	if b%10 == 0 {
		h.RegionNull = true
	} else {
		h.Region = regionNames[b%7]
	}
	return h
}

// MakeEvent returns event s of batch b. All arithmetic is unsigned 64-bit,
// wrapping, as the workload specifies.
func MakeEvent(b uint64, s int) Event {
	u := uint64(s)
	e := Event{
		Seq:   int32(s),
		Name:  metricNames[(b*31+u)%Names],
		Unit:  Units[(b*7+u)%8],
		Value: int64((b*1000003 + u*97) % 2147483647),
		NTags: int((b + u) % 4),
		tag0:  (b + u) % Tags,
	}
	if (b+u)%5 == 0 {
		e.QualityNull = true
	} else {
		e.QualityPct = (b*13 + u*7) % 100
		e.Quality = float64(e.QualityPct) / 100.0
	}
	return e
}

// AppendAvro appends batch b as a Confluent-framed Avro SensorBatch datum:
// byte 0, the big-endian schema id, then the Avro binary encoding.
func AppendAvro(dst []byte, b uint64, sendTsUs int64) []byte {
	h := MakeBatch(b, sendTsUs)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, SchemaID)
	dst = appendLong(dst, int64(h.ID))
	dst = appendString(dst, h.Sensor)
	if h.RegionNull {
		dst = appendLong(dst, 0) // union branch 0: null
	} else {
		dst = appendLong(dst, 1) // union branch 1: string
		dst = appendString(dst, h.Region)
	}
	dst = appendLong(dst, h.BatchTsMs)
	dst = appendLong(dst, h.SendTsUs)
	dst = appendLong(dst, EventsPerBatch) // one block of 100 events
	for s := 0; s < EventsPerBatch; s++ {
		e := MakeEvent(b, s)
		dst = appendLong(dst, int64(e.Seq)) // an Avro int is encoded as a long
		dst = appendString(dst, e.Name)
		dst = appendString(dst, e.Unit)
		dst = appendLong(dst, e.Value)
		if e.QualityNull {
			dst = appendLong(dst, 0)
		} else {
			dst = appendLong(dst, 1)
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(e.Quality))
		}
		if e.NTags > 0 {
			dst = appendLong(dst, int64(e.NTags))
			for j := 0; j < e.NTags; j++ {
				dst = appendString(dst, e.Tag(j))
			}
		}
		dst = appendLong(dst, 0) // end of the tags array
	}
	return appendLong(dst, 0) // end of the events array
}

// appendLong appends v as an Avro long: zigzag, then a base-128 varint.
func appendLong(dst []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for u >= 0x80 {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}

// appendString appends s as an Avro string: its length as a long, then the bytes.
func appendString(dst []byte, s string) []byte {
	return append(appendLong(dst, int64(len(s))), s...)
}

// AppendJSON appends batch b as one JSON object in the shape ClickHouse
// 18.16's JSONEachRow reads into Nested columns (with
// input_format_import_nested_json=1): the events as an object of parallel
// arrays. The corpus's strings need no escaping.
func AppendJSON(dst []byte, b uint64, sendTsUs int64) []byte {
	h := MakeBatch(b, sendTsUs)
	var ev [EventsPerBatch]Event
	for s := range ev {
		ev[s] = MakeEvent(b, s)
	}
	dst = append(dst, `{"batch_id":`...)
	dst = strconv.AppendUint(dst, h.ID, 10)
	dst = append(dst, `,"sensor":"`...)
	dst = append(dst, h.Sensor...)
	dst = append(dst, `","region":`...)
	if h.RegionNull {
		dst = append(dst, "null"...)
	} else {
		dst = append(append(append(dst, '"'), h.Region...), '"')
	}
	dst = append(dst, `,"batch_ts_ms":`...)
	dst = strconv.AppendInt(dst, h.BatchTsMs, 10)
	dst = append(dst, `,"send_ts_us":`...)
	dst = strconv.AppendInt(dst, h.SendTsUs, 10)
	dst = append(dst, `,"events":{"seq":[`...)
	for s := range ev {
		dst = comma(dst, s)
		dst = strconv.AppendInt(dst, int64(ev[s].Seq), 10)
	}
	dst = append(dst, `],"name":[`...)
	for s := range ev {
		dst = append(append(append(comma(dst, s), '"'), ev[s].Name...), '"')
	}
	dst = append(dst, `],"unit":[`...)
	for s := range ev {
		dst = append(append(append(comma(dst, s), '"'), ev[s].Unit...), '"')
	}
	dst = append(dst, `],"value":[`...)
	for s := range ev {
		dst = strconv.AppendInt(comma(dst, s), ev[s].Value, 10)
	}
	dst = append(dst, `],"quality":[`...)
	for s := range ev {
		dst = comma(dst, s)
		if ev[s].QualityNull {
			dst = append(dst, "null"...)
		} else {
			dst = strconv.AppendFloat(dst, ev[s].Quality, 'g', -1, 64)
		}
	}
	dst = append(dst, `],"tags":[`...)
	for s := range ev {
		dst = append(comma(dst, s), '[')
		for j := 0; j < ev[s].NTags; j++ {
			dst = append(append(append(comma(dst, j), '"'), ev[s].Tag(j)...), '"')
		}
		dst = append(dst, ']')
	}
	return append(dst, "]}}"...)
}

func comma(dst []byte, i int) []byte {
	if i > 0 {
		return append(dst, ',')
	}
	return dst
}
