package sluice

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// FuzzDecodeRecord checks the fast path of record decoding against the
// reader-based one: where the fast path decodes, both agree.
func FuzzDecodeRecord(f *testing.F) {
	p := sluicetest.BatchPayload("t", 0, []sluicetest.Record{{Offset: 7, Timestamp: 9, Key: []byte("k"), Value: []byte("value")}})
	seed := p[4+1+4+4:] // the record, after topic, partition and count
	// A record without headers takes the fast path; were it to fall back
	// always, the comparison below would have nothing to compare.
	in, r := NewInstance(nil), reader{p: seed}
	if !in.decodeRecordFast(&r) || r.off != len(seed) || in.rec.Offset != 7 || in.rec.Timestamp != 9 ||
		string(in.rec.Key) != "k" || string(in.rec.Value) != "value" || len(in.rec.Headers) != 0 {
		f.Fatalf("the fast path on a record without headers: %+v at %d", in.rec, r.off)
	}
	f.Add(seed)
	f.Add([]byte{})
	f.Add(make([]byte, 28))
	f.Fuzz(func(t *testing.T, p []byte) {
		fast, slow := NewInstance(nil), NewInstance(nil)
		rf, rs := reader{p: p}, reader{p: p}
		if !fast.decodeRecordFast(&rf) {
			return
		}
		slow.decodeRecordSlow(&rs)
		if rs.err != nil {
			t.Fatalf("the fast path decoded what the reader refuses: %v", rs.err)
		}
		if rf.off != rs.off || !reflect.DeepEqual(fast.rec, slow.rec) {
			t.Fatalf("fast %+v at %d, slow %+v at %d", fast.rec, rf.off, slow.rec, rs.off)
		}
	})
}
