package sensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"testing"
)

// words turns Next's fast path on (natively it is off) for the test.
func words(tb testing.TB) {
	was := wordVarints
	wordVarints = true
	tb.Cleanup(func() { wordVarints = was })
}

// corpus is the records of ../testdata/avro.bin.
func corpus(tb testing.TB) [][]byte {
	tb.Helper()
	b, err := os.ReadFile("../testdata/avro.bin")
	if err != nil {
		tb.Fatal(err)
	}
	var msgs [][]byte
	for len(b) >= 4 {
		n := int(binary.LittleEndian.Uint32(b))
		msgs = append(msgs, b[4:4+n])
		b = b[4+n:]
	}
	if len(msgs) == 0 {
		tb.Fatal("no records in ../testdata/avro.bin")
	}
	return msgs
}

// decoded is what decoding a message gives: its events, copied, and how it
// ends.
type decoded struct {
	h      Header
	events []Event
	err    string
	off    int
}

// decodeAll decodes msg with Next, or with nextSlow alone when slow is
// set.
func decodeAll(msg []byte, slow bool) decoded {
	var d AvroDecoder
	var r decoded
	if err := d.Reset(msg, &r.h); err != nil {
		r.err = err.Error()
		return r
	}
	var e Event
	for {
		ok := false
		if slow {
			ok = d.nextSlow(&e)
		} else {
			ok = d.Next(&e)
		}
		if !ok {
			break
		}
		c := e
		c.Tags = append([][]byte{}, e.Tags...)
		r.events = append(r.events, c)
	}
	if d.Err() != nil {
		r.err = d.Err().Error()
	}
	r.off = d.off
	return r
}

// checkSame fails unless Next and nextSlow decode msg the same way, and
// reports whether it decoded cleanly.
func checkSame(t *testing.T, what string, msg []byte) bool {
	t.Helper()
	fast, slow := decodeAll(msg, false), decodeAll(msg, true)
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s: Next and nextSlow differ on % x\nNext:     %+v\nnextSlow: %+v", what, msg, fast, slow)
	}
	return fast.err == ""
}

// batch is a SensorBatch to encode, with each varint written in w bytes
// (padded with continuation bytes, as Avro's decoders accept) when w says
// more than the value needs.
type batch struct {
	events []Event
	blocks int // events in each block of the events array; 0: one block
	neg    bool
}

// putVarint appends the zigzag varint of v, padded to at least w bytes.
func putVarint(dst []byte, v int64, w int) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for n := 1; u >= 0x80 || n < w; n++ {
		dst = append(dst, byte(u)|0x80)
		u >>= 7
	}
	return append(dst, byte(u))
}

func (b batch) encode(w func() int) []byte {
	p := []byte{0, 0, 0, 0, SchemaID}
	p = putVarint(p, 7, w())
	p = putVarint(p, 3, w())
	p = append(p, "s-1"...)
	p = putVarint(p, 0, w()) // region null
	p = putVarint(p, 1772000000000, w())
	p = putVarint(p, 1772000000000000, w())
	per := b.blocks
	if per == 0 {
		per = len(b.events)
	}
	for i := 0; i < len(b.events); i += per {
		blk := b.events[i:min(i+per, len(b.events))]
		var body []byte
		for _, e := range blk {
			body = putVarint(body, int64(e.Seq), w())
			body = putVarint(body, int64(len(e.Name)), w())
			body = append(body, e.Name...)
			body = putVarint(body, int64(len(e.Unit)), w())
			body = append(body, e.Unit...)
			body = putVarint(body, e.Value, w())
			if e.QualityNull {
				body = putVarint(body, 0, w())
			} else {
				body = putVarint(body, 1, w())
				body = binary.LittleEndian.AppendUint64(body, math.Float64bits(e.Quality))
			}
			if len(e.Tags) > 0 {
				body = putVarint(body, int64(len(e.Tags)), w())
				for _, tag := range e.Tags {
					body = putVarint(body, int64(len(tag)), w())
					body = append(body, tag...)
				}
			}
			body = putVarint(body, 0, w())
		}
		if b.neg {
			p = putVarint(p, -int64(len(blk)), w())
			p = putVarint(p, int64(len(body)), w())
		} else {
			p = putVarint(p, int64(len(blk)), w())
		}
		p = append(p, body...)
	}
	return putVarint(p, 0, w())
}

// TestAvroFastPathMatchesSlow checks that Next's fast path decodes as
// nextSlow does, byte by byte: the corpus, every varint width from 1 to 10
// bytes in every field (the fast path takes up to 8), values at the edges
// of each width and of an int, blocks with negative counts, and the corpus
// cut short and with bytes changed at random. The fast path must take
// the corpus's events but the few at a message's ends and its blocks'
// starts, or it would be there for nothing.
func TestAvroFastPathMatchesSlow(t *testing.T) {
	words(t)
	msgs := corpus(t)
	for i, m := range msgs {
		if !checkSame(t, "corpus", m) {
			t.Fatalf("corpus record %d does not decode", i)
		}
		var d AvroDecoder
		var h Header
		var e Event
		if err := d.Reset(m, &h); err != nil {
			t.Fatal(err)
		}
		events := 0
		for d.Next(&e) {
			events++
		}
		// nextSlow reads the block's count with the first event, takes the
		// last (fewer than 17 bytes are left after it), and finds the end.
		if d.slow > 3 {
			t.Fatalf("corpus record %d: %d of its %d events went byte by byte (%d calls of nextSlow), want at most 2", i, d.slow-1, events, d.slow)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var events []Event
	for s := range 12 {
		e := Event{Seq: int32(s * 37), Name: []byte("metric_12"), Unit: []byte("ms"), Value: int64(s) * 1234567,
			QualityNull: s%3 == 0, Quality: float64(s) / 10}
		for j := range s % 4 {
			e.Tags = append(e.Tags, []byte("tag-"+string(rune('a'+j))))
		}
		events = append(events, e)
	}
	edges := []int64{0, -1, 63, -64, 64, 8191, 8192, 1<<27 - 1, 1 << 27, 1<<55 - 1, -1 << 55, 1 << 55, math.MaxInt32, math.MinInt32,
		math.MaxInt32 + 1, math.MinInt32 - 1, math.MaxInt64, math.MinInt64}
	for _, v := range edges {
		ev := append([]Event(nil), events...)
		ev[5].Value, ev[6].Seq = v, int32(v)
		if v == int64(int32(v)) {
			ev[7].Seq = int32(v)
		}
		for w := 1; w <= 10; w++ {
			for _, b := range []batch{{events: ev}, {events: ev, blocks: 5, neg: true}, {events: ev, blocks: 1}} {
				msg := b.encode(func() int { return w })
				if !checkSame(t, "widths", msg) {
					t.Fatalf("a batch with varints of %d bytes does not decode", w)
				}
				mixed := b.encode(func() int { return 1 + rng.IntN(10) })
				checkSame(t, "mixed widths", mixed)
			}
		}
	}
	for range 20000 {
		m := append([]byte(nil), msgs[rng.IntN(len(msgs))]...)
		switch rng.IntN(3) {
		case 0:
			m = m[:rng.IntN(len(m))]
		case 1:
			for range 1 + rng.IntN(4) {
				m[5+rng.IntN(len(m)-5)] = byte(rng.Uint32())
			}
		default:
			i := 5 + rng.IntN(len(m)-5)
			m[i] ^= 0x80 // a varint's end moves
		}
		checkSame(t, "mutated corpus", m)
	}
}

// BenchmarkAvroNext decodes the corpus with Next's fast path (as on wasm)
// and byte by byte (nextSlow, as natively), natively, in one run: ns per
// event. Natively the fast path is the slower (wordVarints).
//
//	go test -run '^$' -bench AvroNext ./examples/sensor-batch/sensor/
func BenchmarkAvroNext(b *testing.B) {
	msgs := corpus(b)
	for _, arm := range []struct {
		name  string
		words bool
	}{{"words", true}, {"bytewise", false}} {
		b.Run(arm.name, func(b *testing.B) {
			was := wordVarints
			wordVarints = arm.words
			defer func() { wordVarints = was }()
			var d AvroDecoder
			var h Header
			var e Event
			events := 0
			for i := 0; b.Loop(); i++ {
				if err := d.Reset(msgs[i%len(msgs)], &h); err != nil {
					b.Fatal(err)
				}
				for d.Next(&e) {
					events++
				}
				if d.Err() != nil {
					b.Fatal(d.Err())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
		})
	}
}
