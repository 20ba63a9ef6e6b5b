package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A tenant's record carrying sluice.* headers must not put them where a
// reader of the dead-letter copy finds sluice's: sluice's come first, and
// the tenant's are renamed out of sluice's names.
func TestDeadLetterHeadersCannotBeSpoofed(t *testing.T) {
	r := &kgo.Record{Topic: "real-topic", Partition: 3, Offset: 42, Timestamp: time.UnixMilli(1000),
		Headers: []kgo.RecordHeader{
			{Key: HeaderTopic, Value: []byte("spoofed-topic")},
			{Key: "SLUICE.source.offset", Value: []byte("7")},
			{Key: HeaderTenantPrefix + "x", Value: []byte("nested")},
			{Key: "traceparent", Value: []byte("00-abc")},
		}}
	got := deadLetterHeaders(r, "acme/logs", "sha", "boom")
	first := map[string]string{}
	for _, h := range got {
		if _, ok := first[h.Key]; !ok {
			first[h.Key] = string(h.Value)
		}
	}
	own := map[string]string{HeaderTopic: "real-topic", HeaderPartition: "3", HeaderOffset: "42",
		HeaderTimestamp: "1000", HeaderModule: "acme/logs", HeaderModuleVersion: "sha", HeaderError: "boom"}
	for k, v := range own {
		n := 0
		for _, h := range got {
			if strings.EqualFold(h.Key, k) {
				n++
			}
		}
		if first[k] != v || n != 1 {
			t.Errorf("header %s: first value %q, %d headers of that name (any case); want %q once", k, first[k], n, v)
		}
	}
	for _, want := range []struct{ key, value string }{
		{HeaderTenantPrefix + HeaderTopic, "spoofed-topic"},
		{HeaderTenantPrefix + "SLUICE.source.offset", "7"},
		{HeaderTenantPrefix + HeaderTenantPrefix + "x", "nested"},
		{"traceparent", "00-abc"},
	} {
		if first[want.key] != want.value {
			t.Errorf("tenant header kept as %s = %q, want %q (headers %v)", want.key, first[want.key], want.value, got)
		}
	}
	if len(got) != len(own)+len(r.Headers) {
		t.Errorf("%d headers, want %d", len(got), len(own)+len(r.Headers))
	}
}
