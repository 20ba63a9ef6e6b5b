package sensor

import (
	"encoding/binary"
	"iter"
	"math"
	"strings"

	"github.com/go-faster/city"
)

// Row is one row of the ClickHouse 18.16 variant of sensor_events, as the
// reference transform computes it from the formulas (not from any encoding).
type Row struct {
	BatchID     uint64
	EventSeq    uint16
	Sensor      string
	Region      string
	NameUpper   string
	Unit        string
	Value       int64
	ValueScaled int64
	QualityNull bool
	Quality     float64
	QualityPct  uint64
	Tags        []string
	BatchTs     uint32 // seconds: batch_ts_ms / 1000
	BatchTsMs   uint16 // batch_ts_ms % 1000
	SendTsUs    int64
}

// Keep reports whether the transform keeps event e: its unit is not "drop"
// and its quality is null or at least 0.2.
func Keep(e *Event) bool {
	return e.Unit != DropUnit && (e.QualityNull || !(e.Quality < QualityFloor))
}

// Transform applies the workload's transform to event e of batch h, in the
// specified order. ok is false when the event is dropped.
func Transform(h *Batch, e *Event) (r Row, ok bool) {
	if !Keep(e) {
		return Row{}, false
	}
	return Row{
		BatchID:     h.ID,
		EventSeq:    uint16(e.Seq),
		Sensor:      h.Sensor,
		Region:      h.Region, // "" for null
		NameUpper:   strings.ToUpper(e.Name),
		Unit:        e.Unit,
		Value:       e.Value,
		ValueScaled: e.Value * 1000 / int64(e.Seq+1),
		QualityNull: e.QualityNull,
		Quality:     e.Quality,
		QualityPct:  e.QualityPct,
		Tags:        e.TagList(),
		BatchTs:     uint32(h.BatchTsMs / 1000),
		BatchTsMs:   uint16(h.BatchTsMs % 1000),
		SendTsUs:    h.SendTsUs,
	}, true
}

// Rows yields the rows the reference transform makes of batches
// [0, batches), in order, each with its batch; sendTsUs gives each batch's
// send_ts_us (DrainSendTsUs for a prefilled topic).
func Rows(batches uint64, sendTsUs func(b uint64) int64) iter.Seq2[*Batch, *Row] {
	return func(yield func(*Batch, *Row) bool) {
		for b := uint64(0); b < batches; b++ {
			h := MakeBatch(b, sendTsUs(b))
			for s := range EventsPerBatch {
				e := MakeEvent(b, s)
				r, ok := Transform(&h, &e)
				if ok && !yield(&h, &r) {
					return
				}
			}
		}
	}
}

// Expectation is what the gates compare with ClickHouse, for the batches
// [0, Batches). Sums wrap at 64 bits, as ClickHouse's sum of (U)Int64 does,
// so equality is exact modulo 2^64. The string columns are fingerprinted
// by the sum of cityHash64 of their values (github.com/go-faster/city's
// CH64 is ClickHouse's cityHash64 of a String; TestCityHashMatchesServer
// checks it on the real server), and quality by the hash of its 8 bytes.
type Expectation struct {
	Batches        uint64 `json:"batches"`
	Rows           uint64 `json:"rows"`
	SumBatchID     uint64 `json:"sum_batch_id"`
	SumEventSeq    uint64 `json:"sum_event_seq"`
	SumValue       int64  `json:"sum_value"`
	SumValueScaled int64  `json:"sum_value_scaled"`
	HashSensor     uint64 `json:"hash_sensor"`
	HashRegion     uint64 `json:"hash_region"`
	HashNameUpper  uint64 `json:"hash_name_upper"`
	HashUnit       uint64 `json:"hash_unit"`
	TagCount       uint64 `json:"tag_count"`
	HashTags       uint64 `json:"hash_tags"`
	NullQuality    uint64 `json:"null_quality"`
	NullQualityKey uint64 `json:"null_quality_key"` // sum of batch_id*100+event_seq where quality is NULL
	HashQuality    uint64 `json:"hash_quality"`     // sum of cityHash64(reinterpretAsString(quality)) where not NULL
	SumBatchTs     uint64 `json:"sum_batch_ts"`
	SumBatchTsMs   uint64 `json:"sum_batch_ts_ms"`
	SumSendTsUs    int64  `json:"sum_send_ts_us"`
}

// hashes of every string and quality value the corpus can produce.
var (
	hSensor [Sensors]uint64
	hRegion [7]uint64
	hEmpty  = city.CH64(nil)
	hUpper  [Names]uint64
	hUnit   [8]uint64
	hTag    [Tags]uint64
	hPct    [100]uint64
)

func init() {
	for i := range hSensor {
		hSensor[i] = city.CH64([]byte(sensorNames[i]))
	}
	for i := range hRegion {
		hRegion[i] = city.CH64([]byte(regionNames[i]))
	}
	for i := range hUpper {
		hUpper[i] = city.CH64([]byte(strings.ToUpper(metricNames[i])))
	}
	for i := range hUnit {
		hUnit[i] = city.CH64([]byte(Units[i]))
	}
	for i := range hTag {
		hTag[i] = city.CH64([]byte(tagNames[i]))
	}
	for i := range hPct {
		hPct[i] = QualityHash(float64(i) / 100.0)
	}
}

// QualityHash is ClickHouse's cityHash64(reinterpretAsString(q)) for a
// Float64: reinterpretAsString gives the 8 little-endian bytes with the
// trailing zero bytes dropped.
func QualityHash(q float64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(q))
	n := 8
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return city.CH64(b[:n])
}

// Expect computes the expectation for batches [0, n) by running the
// formulas and the reference transform's rules over every event; sendTsUs
// gives each batch's send_ts_us (DrainSendTsUs for a prefilled topic).
func Expect(n uint64, sendTsUs func(b uint64) int64) Expectation {
	x := Expectation{Batches: n}
	for b := uint64(0); b < n; b++ {
		send := sendTsUs(b)
		batchTs := uint64((BaseTsMs + b) / 1000)
		batchTsMs := (BaseTsMs + b) % 1000
		hs, hr := hSensor[b%Sensors], hEmpty
		if b%10 != 0 {
			hr = hRegion[b%7]
		}
		for s := 0; s < EventsPerBatch; s++ {
			e := MakeEvent(b, s)
			if !Keep(&e) {
				continue
			}
			u := uint64(s)
			x.Rows++
			x.SumBatchID += b
			x.SumEventSeq += u
			x.SumValue += e.Value
			x.SumValueScaled += e.Value * 1000 / int64(s+1)
			x.HashSensor += hs
			x.HashRegion += hr
			x.HashNameUpper += hUpper[(b*31+u)%Names]
			x.HashUnit += hUnit[(b*7+u)%8]
			x.TagCount += uint64(e.NTags)
			for j := 0; j < e.NTags; j++ {
				x.HashTags += hTag[(e.tag0+uint64(j))%Tags]
			}
			if e.QualityNull {
				x.NullQuality++
				x.NullQualityKey += b*100 + u
			} else {
				x.HashQuality += hPct[e.QualityPct]
			}
			x.SumBatchTs += batchTs
			x.SumBatchTsMs += batchTsMs
			x.SumSendTsUs += send
		}
	}
	return x
}

// period is the period, in batch ids, of which events survive: unit depends
// on b mod 8, null quality on b mod 5, the quality value on b mod 100.
const period = 200

var survivors [period + 1]uint64 // survivors[r]: rows of batches [0, r)

func init() {
	for r := uint64(0); r < period; r++ {
		n := uint64(0)
		for s := 0; s < EventsPerBatch; s++ {
			if e := MakeEvent(r, s); Keep(&e) {
				n++
			}
		}
		survivors[r+1] = survivors[r] + n
	}
}

// ExpectedRows is the number of rows batches [0, n) produce, in closed
// form: the survivors repeat every 200 batches.
func ExpectedRows(n uint64) uint64 {
	return n/period*survivors[period] + survivors[n%period]
}

// Add adds row r to the expectation, hashing its strings (the slow path
// that Expect's tables must agree with).
func (x *Expectation) Add(r *Row) {
	x.Rows++
	x.SumBatchID += r.BatchID
	x.SumEventSeq += uint64(r.EventSeq)
	x.SumValue += r.Value
	x.SumValueScaled += r.ValueScaled
	x.HashSensor += city.CH64([]byte(r.Sensor))
	x.HashRegion += city.CH64([]byte(r.Region))
	x.HashNameUpper += city.CH64([]byte(r.NameUpper))
	x.HashUnit += city.CH64([]byte(r.Unit))
	x.TagCount += uint64(len(r.Tags))
	for _, t := range r.Tags {
		x.HashTags += city.CH64([]byte(t))
	}
	if r.QualityNull {
		x.NullQuality++
		x.NullQualityKey += r.BatchID*100 + uint64(r.EventSeq)
	} else {
		x.HashQuality += QualityHash(r.Quality)
	}
	x.SumBatchTs += uint64(r.BatchTs)
	x.SumBatchTsMs += uint64(r.BatchTsMs)
	x.SumSendTsUs += r.SendTsUs
}
