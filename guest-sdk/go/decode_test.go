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
	f.Add(p[4+1+4+4:])
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
