package engine_test

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/loggen"
	"github.com/sluicehq/sluice/internal/testinfra"
)

// lagStages are the values of sluice_stage_seconds's stage label.
var lagStages = engine.LagStages()

// lagSumTolerance is the engine's own (lag_test.go).
const lagSumTolerance = engine.LagSumTolerance

// TestStageHistogramsSumToEndToEnd runs log lines from a real broker into
// a real server, on each server of the matrix, and checks on the scraped
// /metrics that the stage histograms of sluice_stage_seconds have the count of
// sluice_end_to_end_seconds and sums that add up to its sum, within
// lagSumTolerance, and that the figures are those of the run. First a
// backlog, left in the broker for a while before the pipeline starts:
// every one of its samples waited there at least that long. Then a
// trickle of small batches while the pipeline runs: many more samples,
// which wait in the broker far less.
func TestStageHistogramsSumToEndToEnd(t *testing.T) {
	testinfra.EachServer(t, func(t *testing.T, server testinfra.Server) {
		const topic, backlog, rounds, perRound = "logs", 20_000, 40, 100
		const brokerWait = 2 * time.Second
		e := newEnvOn(t, server, topic, 2)
		producing := time.Now()
		produceLines(t, e.kafka, topic, 11, backlog)
		time.Sleep(brokerWait)
		p, stop := run(t, e.config(t, "lag", topic))
		srv := httptest.NewServer(p.Handler())
		defer srv.Close()
		waitRows(t, e.ch, backlog, time.Minute)
		// A batch's offsets are committable only once every chunk holding
		// its rows was observed: at lag 0, every sample is in.
		waitLagZero(t, srv.URL, 2)
		first := readLag(t, srv.URL)
		first.check(t, "backlog")
		for _, b := range first.stages["broker"].Bucket {
			if b.GetUpperBound() < brokerWait.Seconds() && b.GetCumulativeCount() != 0 {
				t.Errorf("%d backlog samples waited in the broker %gs or less; every record waited %s", b.GetCumulativeCount(), b.GetUpperBound(), brokerWait)
				break
			}
		}

		trickle(t, e, topic, rounds, perRound)
		waitRows(t, e.ch, backlog+rounds*perRound, time.Minute)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		all := readLag(t, srv.URL)
		all.check(t, "backlog and trickle")
		if chunks := p.Stats().Sink.InsertedChunks; all.count() < uint64(chunks) || chunks == 0 {
			t.Errorf("end-to-end histogram has %d samples for %d inserted chunks: want one per batch in each chunk", all.count(), chunks)
		}
		added := all.count() - first.count()
		if added < rounds/2 {
			t.Errorf("the trickle of %d rounds added %d samples", rounds, added)
		}
		brokerFirst := first.mean("broker")
		brokerTrickle := (all.stages["broker"].GetSampleSum() - first.stages["broker"].GetSampleSum()) / float64(added)
		t.Logf("backlog: %d samples, end-to-end mean %.3fs, stage means %v", first.count(), first.mean(""), first.means())
		t.Logf("after the trickle: %d samples, end-to-end mean %.3fs, stage means %v; the trickle's broker mean %.3fs", all.count(), all.mean(""), all.means(), brokerTrickle)
		if brokerTrickle >= brokerFirst/2 {
			t.Errorf("the trickle's samples waited %.3fs in the broker on average, the backlog's %.3fs", brokerTrickle, brokerFirst)
		}
		// No sample is older than the run: a record's timestamp is after
		// producing started, its insert before the drain ended.
		bound := stopped.Sub(producing).Seconds()
		for _, b := range all.endToEnd.Bucket {
			if b.GetUpperBound() >= bound && b.GetCumulativeCount() != all.count() {
				t.Errorf("%d of %d end-to-end samples above %gs, longer than the run (%.1fs)", all.count()-b.GetCumulativeCount(), all.count(), b.GetUpperBound(), bound)
				break
			}
		}
	})
}

// trickle produces rounds of n log lines, 25 ms apart, each round flushed.
func trickle(t *testing.T, e *env, topic string, rounds, n int) {
	t.Helper()
	cl := roundRobinProducer(t, e, topic)
	defer cl.Close()
	ctx := context.Background()
	for r := range rounds {
		for i := range n {
			cl.Produce(ctx, &kgo.Record{Value: loggen.Generate(12, r*n+i).JSON}, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// scrape parses /metrics at url.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return parseMetrics(t, get(t, url+"/metrics"))
}

// parseMetrics parses a /metrics body.
func parseMetrics(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// waitLagZero waits until /metrics reports a consumer lag of 0 for each of
// the topic's partitions, failing only when the lag stops moving for a
// minute.
func waitLagZero(t *testing.T, url string, partitions int) {
	t.Helper()
	waitProgress(t, 200*time.Millisecond, time.Minute, func() (float64, bool) {
		zero, total := 0, 0.0
		if f := scrape(t, url)["sluice_consumer_lag"]; f != nil {
			for _, m := range f.Metric {
				v := m.GetGauge().GetValue()
				total += v
				if v == 0 {
					zero++
				}
			}
		}
		return total, zero == partitions
	}, func(total float64) string {
		return fmt.Sprintf("consumer lag %v over %d partitions, not 0 on each, unchanged for a minute", total, partitions)
	})
}

// lagHistograms are the lag histograms of the log-normalize pipeline's
// logs table.
type lagHistograms struct {
	endToEnd *dto.Histogram
	stages   map[string]*dto.Histogram
}

func readLag(t *testing.T, url string) lagHistograms {
	t.Helper()
	fams := scrape(t, url)
	find := func(name, stage string) *dto.Histogram {
		t.Helper()
		f := fams[name]
		if f == nil {
			t.Fatalf("/metrics has no %s", name)
		}
		for _, m := range f.Metric {
			got := map[string]string{}
			for _, l := range m.Label {
				got[l.GetName()] = l.GetValue()
			}
			if got["pipeline"] == "log-normalize" && got["table"] == "default.logs" && got["stage"] == stage {
				return m.Histogram
			}
		}
		t.Fatalf("/metrics has no %s{pipeline=log-normalize,table=default.logs,stage=%q}", name, stage)
		return nil
	}
	h := lagHistograms{endToEnd: find("sluice_end_to_end_seconds", ""), stages: map[string]*dto.Histogram{}}
	for _, s := range lagStages {
		h.stages[s] = find("sluice_stage_seconds", s)
	}
	return h
}

func (h lagHistograms) count() uint64 { return h.endToEnd.GetSampleCount() }

// mean is a stage's mean, the end-to-end one for "".
func (h lagHistograms) mean(stage string) float64 {
	x := h.endToEnd
	if stage != "" {
		x = h.stages[stage]
	}
	return x.GetSampleSum() / float64(x.GetSampleCount())
}

func (h lagHistograms) means() map[string]float64 {
	m := map[string]float64{}
	for _, s := range lagStages {
		m[s] = math.Round(h.mean(s)*1e4) / 1e4
	}
	return m
}

// check asserts that every stage has the end-to-end count and that the
// stage sums add up to the end-to-end sum within lagSumTolerance.
func (h lagHistograms) check(t *testing.T, what string) {
	t.Helper()
	count, sum := h.count(), h.endToEnd.GetSampleSum()
	if count == 0 {
		t.Fatalf("%s: no end-to-end samples", what)
	}
	var stageSum float64
	for _, s := range lagStages {
		x := h.stages[s]
		if x.GetSampleCount() != count {
			t.Errorf("%s: stage %s has %d samples, end-to-end %d", what, s, x.GetSampleCount(), count)
		}
		stageSum += x.GetSampleSum()
	}
	if d := math.Abs(stageSum - sum); d > lagSumTolerance*sum {
		t.Errorf("%s: stage sums add up to %.9fs, end-to-end sum %.9fs: %.3g apart, tolerance %g of it", what, stageSum, sum, d, lagSumTolerance)
	}
	if h.mean("module") <= 0 || h.mean("insert") <= 0 {
		t.Errorf("%s: module stage mean %gs, insert stage mean %gs: every batch runs the module and every chunk an insert", what, h.mean("module"), h.mean("insert"))
	}
}
