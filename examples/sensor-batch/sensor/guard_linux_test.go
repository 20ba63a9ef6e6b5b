package sensor

import (
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

// TestAvroReadsWithinTheMessage decodes messages that end where a page
// that cannot be read begins: Next's fast path reads 8 bytes at a time
// without a bounds check, and a read past the message's end faults.
// Each message is cut short at every length and put at the end of the
// page: records of the corpus, some with a varint made to run on, and
// batches whose varints take 1 to 10 bytes.
func TestAvroReadsWithinTheMessage(t *testing.T) {
	words(t)
	page := os.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	msgs := corpus(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var h Header
	var e Event
	decoded := 0
	msgs = msgs[:min(len(msgs), 8)]
	ev := []Event{
		{Seq: 1, Name: []byte("n"), Unit: []byte("u"), Value: 5, Tags: [][]byte{[]byte("t")}},
		{Seq: 70, Name: []byte("metric_1"), Unit: []byte(""), Value: -1 << 40, QualityNull: true},
		{Seq: 2, Name: []byte(""), Unit: []byte("ms"), Value: 1, Quality: 0.5, Tags: [][]byte{[]byte("a"), []byte("")}},
	}
	for w := 1; w <= 10; w++ {
		msgs = append(msgs, batch{events: ev}.encode(func() int { return w }))
		msgs = append(msgs, batch{events: ev, blocks: 1, neg: true}.encode(func() int { return w }))
	}
	for _, m := range msgs {
		if len(m) > page {
			t.Fatalf("a record of %d bytes does not fit a page of %d", len(m), page)
		}
		for n := len(m); n > 0; n-- {
			at := mem[page-n : page : page]
			copy(at, m[:n])
			if n > 5 && n < len(m) && rng.IntN(2) == 0 {
				at[5+rng.IntN(n-5)] |= 0x80 // a varint that runs on
			}
			var d AvroDecoder
			if d.Reset(at, &h) != nil {
				continue
			}
			for d.Next(&e) {
			}
			if n == len(m) && d.Err() == nil {
				decoded++
			}
		}
	}
	if decoded == 0 {
		t.Fatal("no whole record decoded")
	}
}
