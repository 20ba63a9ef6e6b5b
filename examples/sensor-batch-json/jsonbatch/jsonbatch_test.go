package jsonbatch

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"

	"github.com/sluicehq/sluice/examples/sensor-batch/sensor"
	"github.com/sluicehq/sluice/examples/sensor-batch/table/tabletest"
)

func corpus(tb testing.TB) [][]byte {
	return tabletest.ReadCorpus(tb, "../../sensor-batch/testdata/json.bin")
}

type event struct {
	seq         int32
	name, unit  string
	value       int64
	qualityNull bool
	quality     float64
	tags        []string
}

// FuzzDecoder is a differential test: whatever the decoder accepts is
// valid JSON, and encoding/json (into generic values, so that keys match
// exactly as here) reads the same header and events from it.
func FuzzDecoder(f *testing.F) {
	for _, m := range corpus(f)[:3] {
		f.Add(m)
	}
	f.Add([]byte(`{"batch_id":1,"sensor":"a\u00e9","region":null,"batch_ts_ms":0,"send_ts_us":-5,"x":[{"y":"\n"}],` +
		`"events":{"seq":[1],"name":["n"],"unit":["u"],"value":[2],"quality":[1e-3],"tags":[["\ud83d\ude80"]]}}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var d Decoder
		var h sensor.Header
		var e sensor.Event
		if d.Reset(msg, &h) != nil {
			return
		}
		var got []event
		for d.Next(&e) {
			ev := event{e.Seq, string(e.Name), string(e.Unit), e.Value, e.QualityNull, e.Quality, nil}
			for _, tg := range e.Tags {
				ev.tags = append(ev.tags, string(tg))
			}
			got = append(got, ev)
		}
		if d.Err() != nil {
			return
		}
		if !json.Valid(msg) {
			t.Fatalf("accepted invalid JSON %q", msg)
		}
		if !utf8.Valid(msg) {
			return // encoding/json replaces invalid UTF-8; this decoder keeps the bytes
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		num := func(v any) int64 {
			n, err := v.(json.Number).Int64()
			if err != nil {
				t.Fatalf("%v: %v", v, err)
			}
			return n
		}
		if num(m["batch_id"]) != h.BatchID || m["sensor"].(string) != string(h.Sensor) ||
			num(m["batch_ts_ms"]) != h.BatchTsMs || num(m["send_ts_us"]) != h.SendTsUs {
			t.Fatalf("header %+v differs from %v", h, m)
		}
		if r, ok := m["region"].(string); ok == h.RegionNull || r != string(h.Region) {
			t.Fatalf("region %q (null %v) differs from %v", h.Region, h.RegionNull, m["region"])
		}
		evs := m["events"].(map[string]any)
		for i, want := range got {
			q := evs["quality"].([]any)[i]
			qn := q == nil
			var qv float64
			if !qn {
				var err error
				if qv, err = q.(json.Number).Float64(); err != nil {
					t.Fatal(err)
				}
			}
			var tags []string
			for _, tg := range evs["tags"].([]any)[i].([]any) {
				tags = append(tags, tg.(string))
			}
			g := event{int32(num(evs["seq"].([]any)[i])), evs["name"].([]any)[i].(string), evs["unit"].([]any)[i].(string),
				num(evs["value"].([]any)[i]), qn, qv, tags}
			if g.seq != want.seq || g.name != want.name || g.unit != want.unit || g.value != want.value ||
				g.qualityNull != want.qualityNull || math.Float64bits(g.quality) != math.Float64bits(want.quality) ||
				len(g.tags) != len(want.tags) {
				t.Fatalf("event %d: %+v, encoding/json reads %+v", i, want, g)
			}
			for j := range g.tags {
				if g.tags[j] != want.tags[j] {
					t.Fatalf("event %d tag %d: %q, encoding/json reads %q", i, j, want.tags[j], g.tags[j])
				}
			}
		}
		if n := len(evs["seq"].([]any)); n != len(got) {
			t.Fatalf("%d events, encoding/json reads %d", len(got), n)
		}
	})
}

// stdBatch is the JSON shape for encoding/json.
type stdBatch struct {
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

// BenchmarkDecoders compares this decoder with encoding/json (reusing the
// destination struct) on the golden corpus, per batch of 100 events.
func BenchmarkDecoders(b *testing.B) {
	msgs := corpus(b)
	b.Run("hand-written", func(b *testing.B) {
		var d Decoder
		var h sensor.Header
		var e sensor.Event
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if d.Reset(msgs[i%len(msgs)], &h) != nil {
				b.Fatal(d.Err())
			}
			for d.Next(&e) {
			}
			if d.Err() != nil {
				b.Fatal(d.Err())
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		var s stdBatch
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := json.Unmarshal(msgs[i%len(msgs)], &s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
