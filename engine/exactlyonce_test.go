package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestSegmentMetadataRoundTrip(t *testing.T) {
	shaA, shaB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, segs := range [][]segment{
		nil,
		{{start: 0, end: 1, sha: shaA}},
		{{start: 100, end: 150, sha: shaA}, {start: 150, end: 400, sha: shaB}, {start: 420, end: 421, sha: shaA}},
	} {
		meta := encodeSegments(segs)
		got, err := decodeSegments(meta)
		if err != nil {
			t.Fatalf("decode %q: %v", meta, err)
		}
		if len(got) != len(segs) {
			t.Fatalf("decode %q: %d segments, want %d", meta, len(got), len(segs))
		}
		for i := range segs {
			if got[i] != segs[i] {
				t.Errorf("decode %q: segment %d is %+v, want %+v", meta, i, got[i], segs[i])
			}
		}
	}
}

// Segments of the usual kind (touching, one module) take a few bytes
// each: hundreds fit the broker's default offset.metadata.max.bytes.
func TestSegmentMetadataCompact(t *testing.T) {
	var segs []segment
	start := int64(1_000_000_000_000)
	for i := 0; i < 500; i++ {
		segs = append(segs, segment{start: start, end: start + 5_000, sha: strings.Repeat("c", 64)})
		start += 5_000
	}
	if n := len(encodeSegments(segs)); n > maxSegmentMetadata {
		t.Errorf("500 touching segments of one module take %d bytes of metadata, more than %d", n, maxSegmentMetadata)
	}
}

func TestSegmentMetadataForeignOrBroken(t *testing.T) {
	// At-least-once delivery (franz-go) commits the member id as metadata:
	// no segments, no error.
	if segs, err := decodeSegments("kgo-3b8f2c"); err != nil || segs != nil {
		t.Errorf("foreign metadata: %v, %v; want no segments and no error", segs, err)
	}
	if segs, err := decodeSegments(""); err != nil || segs != nil {
		t.Errorf("empty metadata: %v, %v", segs, err)
	}
	for _, bad := range []string{
		"sluice-eo1|aa",             // no list
		"sluice-eo1|aa|5-3@0",       // end before start
		"sluice-eo1|aa|1-5@1",       // no such sha
		"sluice-eo1|aa|1-5@0,4-9@0", // overlap
		"sluice-eo1|aa|x-5@0",
	} {
		if _, err := decodeSegments(bad); err == nil {
			t.Errorf("decode %q: no error", bad)
		}
	}
}

func TestPruneSegments(t *testing.T) {
	segs := []segment{{start: 0, end: 10}, {start: 10, end: 20}, {start: 20, end: 30}}
	if got := pruneSegments(segs, kgo.EpochOffset{}, false); len(got) != 3 {
		t.Errorf("without a watermark: %d segments left, want 3", len(got))
	}
	// A watermark inside a segment keeps it: the segment's inserts may
	// not all have landed, and a replay rebuilds it from the watermark.
	if got := pruneSegments(segs, kgo.EpochOffset{Offset: 15}, true); len(got) != 2 || got[0].start != 10 {
		t.Errorf("watermark 15: %+v, want the segments from 10", got)
	}
	if got := pruneSegments(segs, kgo.EpochOffset{Offset: 30}, true); len(got) != 0 {
		t.Errorf("watermark 30: %+v, want none", got)
	}
}

// TestExactlyOnceCommitOutsideTheGroup: a member stopped before it joined
// the group (or after its partitions were revoked) has nothing to commit,
// and its final commit succeeds, so that sluice drains and exits 0; one
// that has something to commit and is no member is refused.
func TestExactlyOnceCommitOutsideTheGroup(t *testing.T) {
	client, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never dialled: no request is made
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p := &Pipeline{client: client, eo: newExactlyOnce(), acks: map[topicPartition]*partitionAcks{}}
	if err := p.commitSync(t.Context(), nil); err != nil {
		t.Errorf("nothing to commit, not a member: %v", err)
	}
	// Recording a segment needs the membership even when the partition is
	// not tracked: a segment is never taken as recorded by a non-member.
	p.eo.mu.Lock()
	err = p.commitLocked(t.Context(), []topicPartition{{"events", 0}})
	p.eo.mu.Unlock()
	if !errors.Is(err, errNotMember) {
		t.Errorf("recording a segment, not a member: %v, want %v", err, errNotMember)
	}
	p.acks[topicPartition{"events", 0}] = &partitionAcks{topic: "events", eo: &eoPartition{base: 42}}
	if err := p.commitSync(t.Context(), nil); !errors.Is(err, errNotMember) {
		t.Errorf("an offset to commit, not a member: %v, want %v", err, errNotMember)
	}
}
