package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

// TestBisectionFindsThePoisonRecord runs batches with records that trap
// their instance through a partition worker, with no server: bisection
// must blame exactly the first record that traps alone on a fresh
// instance, after the rows of every record before it are in the open block
// and none of the records after it were dropped unnoticed. Without a
// dead-letter topic the blame is a RecordError naming the record.
func TestBisectionFindsThePoisonRecord(t *testing.T) {
	p, _ := workerTestPipeline(t, 1000, time.Hour)
	// One module call per polled batch, as the config's defaults allow.
	p.cfg.Module.MaxBatchRecords, p.cfg.Module.MaxBatchBytes = 500, 1<<20
	wasm, err := os.ReadFile(wasmbuild.BuildT(t, "examples/adversarial/panic-every-1000"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.rt.Load(context.Background(), "panic-every-1000", wasm)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := clickhouse.NewTable("default", "adv", []clickhouse.Column{{Name: "offset", Type: "UInt64"}, {Name: "value", Type: "String"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		n      int64
		poison []int64 // offsets whose value is "trap"
		blame  int64
	}{
		{"first of the batch", 16, []int64{0}, 0},
		{"last of the batch", 16, []int64{15}, 15},
		{"in the middle", 64, []int64{37}, 37},
		{"two, the first is blamed", 64, []int64{40, 5}, 5},
		{"neighbours", 33, []int64{20, 21}, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "adv-" + strings.ReplaceAll(tc.name, " ", "-")
			r := &route{name: "panic-every-1000", topics: []string{topic}, maxTraps: 1000, trapCooldown: time.Hour,
				flow: &flowControl{high: 1 << 30}}
			r.setSchema(newRouteSchema([]*clickhouse.Table{tbl}, nil))
			r.activate(&moduleVersion{module: m})
			p.byTopic[topic] = r
			tp := topicPartition{topic, 0}
			a := &partitionAcks{topic: tp.topic, partition: tp.partition, route: r}
			w := newPartitionWorker(p, tp, a)
			defer w.discardInstance()
			var recs []*kgo.Record
			for off := int64(0); off < tc.n; off++ {
				v := "ok"
				for _, q := range tc.poison {
					if q == off {
						v = "trap"
					}
				}
				recs = append(recs, &kgo.Record{Topic: topic, Offset: off, Value: []byte(v)})
			}
			b := polledBatch{recs: recs, ack: a.track(0, eo(tc.n-1), 100*tc.n), ctx: context.Background(),
				span: trace.SpanFromContext(context.Background())}
			instances := p.stats.instances.Load()
			err := w.process(context.Background(), b)
			var rerr *RecordError
			if !errors.As(err, &rerr) {
				t.Fatalf("process: %v; want a RecordError", err)
			}
			if rerr.Offset != tc.blame || rerr.Topic != topic {
				t.Fatalf("blamed %s@%d, want offset %d", rerr.Topic, rerr.Offset, tc.blame)
			}
			// Every record before the blamed one was transformed into its
			// row; none after it was (the batch stops at the blame).
			if got := w.blocks[0].Rows(); got != int(tc.blame) {
				t.Errorf("%d rows in the open block, want the %d records before the blamed one", got, tc.blame)
			}
			// Bisection starts fresh instances: at least one per halving
			// down to the record, and no more than two per level.
			started := p.stats.instances.Load() - instances
			levels := int64(0)
			for n := tc.n; n > 1; n = (n + 1) / 2 {
				levels++
			}
			if started < levels || started > 2*levels+2 {
				t.Errorf("%d instances started to find the record in %d, want between %d and %d", started, tc.n, levels, 2*levels+2)
			}
			if wm, ok := a.watermark(); ok {
				t.Errorf("watermark %d: a batch that failed was committed", wm.Offset)
			}
		})
	}
}
