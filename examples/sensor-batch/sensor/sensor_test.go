package sensor

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestKeep(t *testing.T) {
	for _, tt := range []struct {
		unit string
		null bool
		q    float64
		keep bool
	}{
		{"ms", true, 0, true},
		{"ms", false, 0.2, true}, // the floor itself is kept
		{"ms", false, math.Nextafter(0.2, 0), false},
		{"ms", false, 0.19, false},
		{"ms", false, 0, false},
		{"ms", false, 1, true},
		{"ms", false, math.NaN(), true}, // NaN is not < 0.2: the rule drops only what is below
		{"drop", true, 0, false},
		{"drop", false, 0.9, false},
		{"Drop", false, 0.9, true}, // the unit is compared exactly
		{"", true, 0, true},
	} {
		e := Event{Unit: []byte(tt.unit), QualityNull: tt.null, Quality: tt.q}
		if got := Keep(&e); got != tt.keep {
			t.Errorf("Keep(unit %q, null %v, q %v) = %v", tt.unit, tt.null, tt.q, got)
		}
	}
}

func TestValueScaled(t *testing.T) {
	for _, tt := range []struct {
		v    int64
		seq  int32
		want int64
	}{
		{7, 0, 7000}, {7, 2, 2333}, {-7, 2, -2333}, // truncation toward zero
		{2147483646, 99, 21474836460}, {0, 65535, 0},
		{math.MaxInt64, 0, -1000}, // Int64 arithmetic wraps, as specified
	} {
		e := Event{Value: tt.v, Seq: tt.seq}
		if got := ValueScaled(&e); got != tt.want {
			t.Errorf("ValueScaled(%d, seq %d) = %d, want %d", tt.v, tt.seq, got, tt.want)
		}
	}
}

func TestAppendUpper(t *testing.T) {
	for in, want := range map[string]string{
		"metric_7": "METRIC_7", "": "", "aZz{`@": "AZZ{`@", "été": "éTé", "ß": "ß",
		"metric_12": "METRIC_12", "abcdefghijklmnopqrstuvwxyz": "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
		"`az{@AZ[\x7f\x80\xe1\xfa": "`AZ{@AZ[\x7f\x80\xe1\xfa",
	} {
		if got := string(AppendUpper([]byte("x"), []byte(in))); got != "x"+want {
			t.Errorf("AppendUpper(%q) = %q, want %q", in, got[1:], want)
		}
	}
	// Every byte value at every place of strings of 0 to 24 bytes, against
	// the rule byte by byte.
	for n := range 25 {
		for pos := range n {
			for c := range 256 {
				s := []byte(strings.Repeat("q", n))
				s[pos] = byte(c)
				want := []byte("x")
				for _, b := range s {
					if 'a' <= b && b <= 'z' {
						b -= 'a' - 'A'
					}
					want = append(want, b)
				}
				if got := AppendUpper([]byte("x"), s); !bytes.Equal(got, want) {
					t.Fatalf("AppendUpper(%q) = %q, want %q", s, got[1:], want[1:])
				}
			}
		}
	}
}

func TestSplitTs(t *testing.T) {
	h := Header{BatchTsMs: 1772000001234}
	if err := CheckHeader(&h); err != nil {
		t.Fatal(err)
	}
	if sec, ms := SplitTs(&h); sec != 1772000001 || ms != 234 {
		t.Errorf("SplitTs = %d, %d", sec, ms)
	}
	if b, s := ModernTicks(&Header{BatchTsMs: 5, SendTsUs: 6}); b != 5 || s != 6 {
		t.Errorf("ModernTicks = %d, %d", b, s)
	}
}

// FuzzAvroDecoder: any input either decodes or fails cleanly, never panics,
// a decoded datum accounts for every byte, and Next's fast path decodes as
// nextSlow does.
func FuzzAvroDecoder(f *testing.F) {
	words(f)
	for _, m := range corpus(f) {
		f.Add(m)
	}
	f.Add([]byte{0, 0, 0, 0, 1, 2, 2, 'x', 0, 4, 6, 1, 2, 2, 2, 'n', 2, 'u', 4, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		var d AvroDecoder
		var h Header
		var e Event
		if d.Reset(msg, &h) != nil {
			return
		}
		n := 0
		for d.Next(&e) {
			n++
			if len(e.Tags) > len(msg) {
				t.Fatalf("%d tags from %d bytes", len(e.Tags), len(msg))
			}
		}
		if d.Err() == nil && d.off != len(msg) {
			t.Fatalf("clean end at byte %d of %d", d.off, len(msg))
		}
		if n > len(msg) {
			t.Fatalf("%d events from %d bytes", n, len(msg))
		}
		checkSame(t, "fuzz", msg)
	})
}
