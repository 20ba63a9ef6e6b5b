package sensor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
)

// avroSchema is a parsed Avro schema, enough of the spec for
// testdata/sensor_batch.avsc (the workload's schema, copied verbatim).
type avroSchema struct {
	typ    string // "record", "array", "union", or a primitive
	fields []avroField
	items  *avroSchema
	branch []*avroSchema
}

type avroField struct {
	name string
	s    *avroSchema
}

func parseSchema(t *testing.T, v any) *avroSchema {
	switch v := v.(type) {
	case string:
		return &avroSchema{typ: v}
	case []any:
		u := &avroSchema{typ: "union"}
		for _, b := range v {
			u.branch = append(u.branch, parseSchema(t, b))
		}
		return u
	case map[string]any:
		switch v["type"] {
		case "record":
			r := &avroSchema{typ: "record"}
			for _, f := range v["fields"].([]any) {
				fm := f.(map[string]any)
				r.fields = append(r.fields, avroField{name: fm["name"].(string), s: parseSchema(t, fm["type"])})
			}
			return r
		case "array":
			return &avroSchema{typ: "array", items: parseSchema(t, v["items"])}
		default:
			return parseSchema(t, v["type"])
		}
	}
	t.Fatalf("schema: unexpected %T", v)
	return nil
}

// genericDecoder decodes any Avro datum of a schema into maps, slices and
// scalars, written from the spec independently of the encoder under test.
// It accepts negative block counts (followed by a byte size), which the
// encoder never writes.
type genericDecoder struct {
	p   []byte
	err error
}

func (d *genericDecoder) long() int64 {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if len(d.p) == 0 {
			d.err = errors.New("truncated varint")
			return 0
		}
		c := d.p[0]
		d.p = d.p[1:]
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1)
		}
	}
	d.err = errors.New("varint too long")
	return 0
}

func (d *genericDecoder) value(s *avroSchema) any {
	if d.err != nil {
		return nil
	}
	switch s.typ {
	case "null":
		return nil
	case "int", "long":
		return d.long()
	case "double":
		if len(d.p) < 8 {
			d.err = errors.New("truncated double")
			return nil
		}
		v := math.Float64frombits(binary.LittleEndian.Uint64(d.p))
		d.p = d.p[8:]
		return v
	case "string":
		n := d.long()
		if n < 0 || n > int64(len(d.p)) {
			d.err = fmt.Errorf("bad string length %d", n)
			return nil
		}
		v := string(d.p[:n])
		d.p = d.p[n:]
		return v
	case "union":
		i := d.long()
		if i < 0 || i >= int64(len(s.branch)) {
			d.err = fmt.Errorf("bad union index %d", i)
			return nil
		}
		return d.value(s.branch[i])
	case "array":
		items := []any{}
		for d.err == nil {
			n := d.long()
			if n == 0 {
				break
			}
			if n < 0 {
				n = -n
				d.long() // block size in bytes
			}
			for ; n > 0 && d.err == nil; n-- {
				items = append(items, d.value(s.items))
			}
		}
		return items
	case "record":
		m := map[string]any{}
		for _, f := range s.fields {
			m[f.name] = d.value(f.s)
		}
		return m
	}
	d.err = fmt.Errorf("unsupported type %s", s.typ)
	return nil
}

func loadSchema(t *testing.T) *avroSchema {
	raw, err := os.ReadFile("testdata/sensor_batch.avsc")
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return parseSchema(t, v)
}

// wantDatum is batch b as the generic decoder should see it.
func wantDatum(b uint64, send int64) map[string]any {
	h := MakeBatch(b, send)
	var region any
	if !h.RegionNull {
		region = h.Region
	}
	events := []any{}
	for s := 0; s < EventsPerBatch; s++ {
		e := MakeEvent(b, s)
		var q any
		if !e.QualityNull {
			q = e.Quality
		}
		tags := []any{}
		for _, tg := range e.TagList() {
			tags = append(tags, tg)
		}
		events = append(events, map[string]any{
			"seq": int64(e.Seq), "name": e.Name, "unit": e.Unit, "value": e.Value, "quality": q, "tags": tags,
		})
	}
	return map[string]any{
		"batch_id": int64(h.ID), "sensor": h.Sensor, "region": region,
		"batch_ts_ms": h.BatchTsMs, "send_ts_us": h.SendTsUs, "events": events,
	}
}

func TestAvroDecodesWithTheSchema(t *testing.T) {
	schema := loadSchema(t)
	for _, b := range []uint64{0, 1, 2, 3, 7, 10, 199, 1023, 1024, 123456, 2_000_000_000_000} {
		msg := AppendAvro(nil, b, DrainSendTsUs(b))
		if msg[0] != 0 || binary.BigEndian.Uint32(msg[1:5]) != SchemaID {
			t.Fatalf("batch %d: framing % x", b, msg[:5])
		}
		d := &genericDecoder{p: msg[5:]}
		got := d.value(schema)
		if d.err != nil {
			t.Fatalf("batch %d: %v", b, d.err)
		}
		if len(d.p) != 0 {
			t.Fatalf("batch %d: %d trailing bytes", b, len(d.p))
		}
		if want := wantDatum(b, DrainSendTsUs(b)); !reflect.DeepEqual(got, want) {
			t.Errorf("batch %d:\n got %v\nwant %v", b, got, want)
		}
	}
}

// TestAvroBytesByHand checks the start of batch 0 against an encoding
// worked out by hand from the Avro spec.
func TestAvroBytesByHand(t *testing.T) {
	msg := AppendAvro(nil, 0, 5)
	want := []byte{
		0x00, 0, 0, 0, 1, // magic, schema id 1
		0x00,                                         // batch_id 0
		0x10, 's', 'e', 'n', 's', 'o', 'r', '-', '0', // "sensor-0": length 8 → zigzag 16
		0x00, // region: union branch 0 (null), since 0 % 10 == 0
		// batch_ts_ms 1772000000000 → zigzag 3544000000000, as 7-bit groups, low first
		0x80, 0xe0, 0xf1, 0xb6, 0x92, 0x67,
		0x0a,       // send_ts_us 5 → zigzag 10
		0xc8, 0x01, // one block of 100 events → zigzag 200
		// event 0: seq 0, name "metric_0", unit "count", value 0, quality null ((0+0)%5 == 0), no tags
		0x00,
		0x10, 'm', 'e', 't', 'r', 'i', 'c', '_', '0',
		0x0a, 'c', 'o', 'u', 'n', 't',
		0x00,
		0x00,
		0x00,
		// event 1: seq 1 → 2, name "metric_1", unit "bytes", value 97 → 194 = c2 01,
		// quality branch 1 then 7/100 as a little-endian double, tags ["tag-1"]
		0x02,
		0x10, 'm', 'e', 't', 'r', 'i', 'c', '_', '1',
		0x0a, 'b', 'y', 't', 'e', 's',
		0xc2, 0x01,
		0x02,
	}
	want = binary.LittleEndian.AppendUint64(want, math.Float64bits(0.07))
	want = append(want, 0x02, 0x0a, 't', 'a', 'g', '-', '1', 0x00)
	if !bytes.HasPrefix(msg, want) {
		t.Fatalf("batch 0 starts\n% x\nwant\n% x", msg[:len(want)], want)
	}
	if msg[len(msg)-1] != 0 {
		t.Error("events array not terminated by a zero block count")
	}
}

func TestAppendLong(t *testing.T) {
	for _, tt := range []struct {
		v    int64
		want []byte
	}{
		{0, []byte{0}}, {-1, []byte{1}}, {1, []byte{2}}, {-64, []byte{0x7f}}, {64, []byte{0x80, 0x01}},
		{math.MaxInt64, []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{math.MinInt64, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	} {
		if got := appendLong(nil, tt.v); !bytes.Equal(got, tt.want) {
			t.Errorf("appendLong(%d) = % x, want % x", tt.v, got, tt.want)
		}
		d := genericDecoder{p: tt.want}
		if got := d.long(); got != tt.v || d.err != nil {
			t.Errorf("decode % x = %d, %v", tt.want, got, d.err)
		}
	}
}

// jsonBatch is the JSON shape, decoded with encoding/json.
type jsonBatch struct {
	BatchID   uint64  `json:"batch_id"`
	Sensor    string  `json:"sensor"`
	Region    *string `json:"region"`
	BatchTsMs int64   `json:"batch_ts_ms"`
	SendTsUs  int64   `json:"send_ts_us"`
	Events    struct {
		Seq     []int32    `json:"seq"`
		Name    []string   `json:"name"`
		Unit    []string   `json:"unit"`
		Value   []int64    `json:"value"`
		Quality []*float64 `json:"quality"`
		Tags    [][]string `json:"tags"`
	} `json:"events"`
}

func TestJSONMatchesFormulas(t *testing.T) {
	for _, b := range []uint64{0, 1, 5, 10, 1023, 2_000_000_000_000} {
		msg := AppendJSON(nil, b, 42)
		var j jsonBatch
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			t.Fatalf("batch %d: %v\n%s", b, err, msg)
		}
		h := MakeBatch(b, 42)
		if j.BatchID != b || j.Sensor != h.Sensor || (j.Region == nil) != h.RegionNull ||
			(j.Region != nil && *j.Region != h.Region) || j.BatchTsMs != h.BatchTsMs || j.SendTsUs != 42 {
			t.Errorf("batch %d header: %+v", b, j)
		}
		ev := j.Events
		for _, n := range []int{len(ev.Seq), len(ev.Name), len(ev.Unit), len(ev.Value), len(ev.Quality), len(ev.Tags)} {
			if n != EventsPerBatch {
				t.Fatalf("batch %d: an events array has %d elements", b, n)
			}
		}
		for s := 0; s < EventsPerBatch; s++ {
			e := MakeEvent(b, s)
			tags := ev.Tags[s]
			if tags == nil {
				tags = []string{}
			}
			if ev.Seq[s] != e.Seq || ev.Name[s] != e.Name || ev.Unit[s] != e.Unit || ev.Value[s] != e.Value ||
				(ev.Quality[s] == nil) != e.QualityNull || (ev.Quality[s] != nil && *ev.Quality[s] != e.Quality) ||
				!reflect.DeepEqual(tags, e.TagList()) {
				t.Errorf("batch %d event %d differs", b, s)
			}
		}
	}
}

func TestFormulas(t *testing.T) {
	// Spot values worked out by hand from the workload's README.
	e := MakeEvent(3, 4) // b=3, s=4
	if e.Name != "metric_1" || e.Unit != "bytes" || e.Value != 3000397 || e.QualityNull ||
		e.QualityPct != 67 || e.NTags != 3 || !reflect.DeepEqual(e.TagList(), []string{"tag-7", "tag-8", "tag-9"}) {
		t.Errorf("MakeEvent(3, 4) = %+v %v", e, e.TagList())
	}
	// (b*1000003 + s*97) wraps at 2^64 before the modulo.
	b := uint64(1) << 60
	if got, want := MakeEvent(b, 1).Value, int64((b*1000003+97)%2147483647); got != want {
		t.Errorf("value with wrap: %d, want %d", got, want)
	}
	if h := MakeBatch(20, 0); !h.RegionNull || h.Sensor != "sensor-20" {
		t.Errorf("batch 20: %+v", h)
	}
	if h := MakeBatch(1033, 0); h.RegionNull || h.Region != "region-4" || h.Sensor != "sensor-9" {
		t.Errorf("batch 1033: %+v", h)
	}
}

func TestExpectedRowsClosedForm(t *testing.T) {
	for _, n := range []uint64{0, 1, 7, 199, 200, 201, 1000, 4321} {
		if got, want := ExpectedRows(n), Expect(n, DrainSendTsUs).Rows; got != want {
			t.Errorf("ExpectedRows(%d) = %d, iteration says %d", n, got, want)
		}
	}
	// "About 73.5% of events survive."
	if f := float64(ExpectedRows(200_000)) / (200_000 * EventsPerBatch); math.Abs(f-0.735) > 0.005 {
		t.Errorf("survival %.4f, want about 0.735", f)
	}
}

// TestExpectMatchesTransform checks the expectation's fast path (hash
// tables, no Row built) against the reference transform row by row.
func TestExpectMatchesTransform(t *testing.T) {
	const n = 450
	var x Expectation
	x.Batches = n
	for b := uint64(0); b < n; b++ {
		h := MakeBatch(b, DrainSendTsUs(b))
		for s := 0; s < EventsPerBatch; s++ {
			e := MakeEvent(b, s)
			r, ok := Transform(&h, &e)
			if !ok {
				continue
			}
			x.Add(&r)
		}
	}
	if got := Expect(n, DrainSendTsUs); got != x {
		t.Errorf("Expect:\n%+v\nrow by row:\n%+v", got, x)
	}
}

func TestQualityHash(t *testing.T) {
	// 0.0 is eight zero bytes: reinterpretAsString drops them all.
	if QualityHash(0) != hEmpty {
		t.Error("QualityHash(0) is not the hash of the empty string")
	}
}

// TestColumnsMatchDDL: the columns handed to the module are the table's.
func TestColumnsMatchDDL(t *testing.T) {
	var want []string
	for _, c := range Columns {
		want = append(want, c.Name+" "+c.Type)
	}
	ddl := DDL("t")
	body := ddl[strings.IndexByte(ddl, '(')+1 : strings.Index(ddl, "ingest_ts")]
	var got []string
	for _, f := range strings.Split(body, ",") {
		if f = strings.TrimSpace(f); f != "" {
			got = append(got, f)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DDL columns\n\t%q\nColumns\n\t%q", got, want)
	}
}

// TestRowsMatchExpect checks that Rows yields what Expect counts and sums,
// batch by batch in order, and that it stops when told.
func TestRowsMatchExpect(t *testing.T) {
	const n = 300
	want := Expect(n, DrainSendTsUs)
	var rows, sumID, sumValue uint64
	var last uint64
	for h, r := range Rows(n, DrainSendTsUs) {
		if h.ID != r.BatchID || h.ID < last {
			t.Fatalf("row of batch %d under batch %d, after batch %d", r.BatchID, h.ID, last)
		}
		last = h.ID
		rows++
		sumID += r.BatchID
		sumValue += uint64(r.Value)
	}
	if rows != want.Rows || sumID != want.SumBatchID || int64(sumValue) != want.SumValue {
		t.Fatalf("Rows: %d rows, batch_id sum %d, value sum %d; Expect: %d, %d, %d",
			rows, sumID, int64(sumValue), want.Rows, want.SumBatchID, want.SumValue)
	}
	taken := 0
	for range Rows(n, DrainSendTsUs) {
		if taken++; taken == 5 {
			break
		}
	}
	if taken != 5 {
		t.Fatalf("stopped after %d rows, want 5", taken)
	}
}
