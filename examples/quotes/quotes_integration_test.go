package quotes

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/sinks/clickhouse"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmoke runs the example small, both routings over the real broker and
// two real servers: every quote lands once in each table, on its shard,
// with exact end-of-day sums (Cluster.Run checks those); the lag figures
// come from sluice's own histograms; and the link's latency is where it
// should be: under every Distributed insert that sent rows to shard 2, and
// under none of routing shards' inserts, which never cross it. Times are
// only bounded from below, so a loaded machine cannot fail it.
func TestSmoke(t *testing.T) {
	testinfra.SkipShort(t) // StartCluster starts Kafka and two ClickHouse servers
	const (
		latency = 25 * time.Millisecond
		quotes  = 1200
	)
	ctx := context.Background()
	module := wasmbuild.BuildT(t, "examples/quotes/module")
	c, err := StartCluster(ctx, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close the cluster: %v", err)
		}
	})
	rep := &Report{Server: c.Shard1.Version.String(), CPUs: 2, Latency: latency, Quotes: quotes, Rate: 600, Warmup: 200}
	cache := t.TempDir()
	for _, routing := range []string{clickhouse.RoutingDistributed, clickhouse.RoutingShards} {
		res, err := c.Run(ctx, RunOptions{Routing: routing, Quotes: quotes, Rate: rep.Rate, Warmup: rep.Warmup, Module: module, CacheDir: cache,
			Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})), Progress: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		rep.Runs = append(rep.Runs, res)
		if res.Produced != quotes {
			t.Errorf("%s: produced %d quotes, want %d", routing, res.Produced, quotes)
		}
		for _, table := range Tables {
			if res.Landed[table] != quotes || res.Inserted[table] != quotes {
				t.Errorf("%s %s: %d landed, sluice inserted %d; want %d", routing, table, res.Landed[table], res.Inserted[table], quotes)
			}
			checkLag(t, routing+" "+table, res.Lag[table])
		}
		si := res.Server
		t.Logf("%s: server inserts %+v", routing, *si)
		switch routing {
		case clickhouse.RoutingDistributed:
			if si.Sent[1] != 0 || si.Sent[0] == 0 || si.Forwarded == 0 {
				t.Errorf("distributed: sluice sent %v inserts to the shards and shard 1 forwarded %d; want all to shard 1, some forwarded", si.Sent, si.Forwarded)
			}
			// query_duration_ms is whole milliseconds, rounded down.
			if si.ForwardedMin < 2*latency-time.Millisecond {
				t.Errorf("a Distributed insert that sent rows to shard 2 took %v; the link's round trip is %v", si.ForwardedMin, 2*latency)
			}
		case clickhouse.RoutingShards:
			if si.Sent[0] == 0 || si.Sent[1] == 0 || si.Forwarded != 0 {
				t.Errorf("shards: sluice sent %v inserts to the shards and shard 1 forwarded %d; want some to each, none forwarded", si.Sent, si.Forwarded)
			}
		}
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + text.String())
	if err := rep.WriteSVG(&strings.Builder{}); err != nil {
		t.Fatal(err)
	}
}

// checkLag checks that l holds real samples of sluice's lag histograms:
// their buckets, a count shared by every stage, stage sums adding up to
// the end-to-end sum, and ordered, finite percentiles.
func checkLag(t *testing.T, what string, l *Lag) {
	t.Helper()
	e := l.EndToEnd
	if e.Count == 0 {
		t.Fatalf("%s: no end-to-end samples", what)
	}
	if len(e.Bounds) != 27 || e.Bounds[0] != 0.0001 || e.Bounds[25] != 0.0001*(1<<25) {
		t.Errorf("%s: buckets %v, not sluice's lag buckets (100 µs doubling, 26 of them)", what, e.Bounds)
	}
	var stageSum float64
	for _, s := range engine.LagStages() {
		h := l.Stages[s]
		if h.Count != e.Count {
			t.Errorf("%s: stage %s has %d samples, end to end %d", what, s, h.Count, e.Count)
		}
		stageSum += h.Sum
	}
	if math.Abs(stageSum-e.Sum) > 1e-6*e.Sum || e.Sum <= 0 {
		t.Errorf("%s: stage sums add up to %gs, the end-to-end sum is %gs", what, stageSum, e.Sum)
	}
	prev := 0.0
	for _, q := range Quantiles {
		v := quantile(e, q.Q)
		if math.IsNaN(v) || v <= prev || v > e.Bounds[25] {
			t.Errorf("%s: %s = %g after %g", what, q.Name, v, prev)
		}
		prev = v
	}
}
