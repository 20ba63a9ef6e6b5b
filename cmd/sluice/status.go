package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/lagmetrics"
)

const statusUsage = `sluice status shows, per pipeline and table, where the time from a record's
Kafka timestamp to the acknowledgement of its insert goes: the mean, and the
approximate p50 and p99 (interpolated in the histogram's buckets, as
Prometheus' histogram_quantile does), of the end-to-end lag and of each
stage, and each stage's share of the end-to-end total. It reads a running
sluice's /metrics (sluice_end_to_end_seconds and sluice_stage_seconds) twice,
-window apart, and reports the samples between the two reads; -window 0
reports everything since the instance started. docs/operations.md says
which stage to look at for which shape.

Usage:
  sluice status [-metrics http://127.0.0.1:9464/metrics] [-window 10s]

Exit status 1 when /metrics cannot be read or has no lag metrics.
`

// lagStageNames are the stages of sluice_stage_seconds, in the order a
// record passes them.
var lagStageNames = engine.LagStages()

// stageHints say what a dominant stage usually means; docs/operations.md
// has the runbook.
var stageHints = map[string]string{
	"broker":   "records wait in Kafka before they are polled: the consumer is behind, or fetching is paused for the in-flight budget",
	"inflight": "polled batches wait for their partition worker, a module instance or a call slot, or behind a worker blocked on a full shard queue",
	"module":   "the module calls and decoding their output: a costly module, or too few partitions to spread it over",
	"seal":     "rows wait in open blocks for chunk_bytes or chunk_linger (at low volume, chunk_linger)",
	"queue":    "chunks wait in the shard queues: ClickHouse is slow or inserts_per_shard too low",
	"insert":   "the inserts: at low volume mostly insert_linger (an insert stays open that long for more chunks); above it the server is slow (materialized views, Distributed, merges) or failing (retries)",
}

func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, statusUsage); fs.PrintDefaults() }
	url := fs.String("metrics", "http://127.0.0.1:9464/metrics", "the instance's /metrics URL, or its observability.listen address")
	window := fs.Duration("window", 10*time.Second, "report the samples of this long (0: since the instance started)")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each read of /metrics")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *window < 0 {
		fmt.Fprint(stderr, statusUsage)
		return 2
	}
	target := metricsURL(*url)
	read := func() (map[lagmetrics.Key]*lagmetrics.Lag, error) {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return scrapeLag(ctx, target)
	}
	now, err := read()
	if err != nil {
		fmt.Fprintln(stderr, "sluice status:", err)
		return 1
	}
	if *window > 0 {
		before := now
		time.Sleep(*window)
		if now, err = read(); err != nil {
			fmt.Fprintln(stderr, "sluice status:", err)
			return 1
		}
		now = lagDelta(before, now)
	}
	renderStatus(stdout, now, *window)
	return 0
}

// metricsURL makes a host:port (observability.listen) into its /metrics URL.
func metricsURL(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "http://" + s + "/metrics"
}

func scrapeLag(ctx context.Context, url string) (map[lagmetrics.Key]*lagmetrics.Lag, error) {
	fams, err := lagmetrics.Scrape(ctx, url)
	if err != nil {
		return nil, err
	}
	lag, err := lagmetrics.FromFamilies(fams)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return lag, nil
}

// parseLag reads the lag histograms out of Prometheus text.
func parseLag(r io.Reader) (map[lagmetrics.Key]*lagmetrics.Lag, error) {
	fams, err := lagmetrics.Parse(r)
	if err != nil {
		return nil, err
	}
	return lagmetrics.FromFamilies(fams)
}

// minus is h's samples since earlier, h itself when the two do not
// compare (the instance restarted, or the buckets changed).
func minus(h, earlier lagmetrics.Histogram) lagmetrics.Histogram {
	if d, err := h.Since(earlier); err == nil {
		return d
	}
	return h
}

// lagDelta is the samples of now since before, series by series.
func lagDelta(before, now map[lagmetrics.Key]*lagmetrics.Lag) map[lagmetrics.Key]*lagmetrics.Lag {
	out := map[lagmetrics.Key]*lagmetrics.Lag{}
	for k, s := range now {
		b, ok := before[k]
		if !ok || b.EndToEnd.Count > s.EndToEnd.Count {
			out[k] = s
			continue
		}
		d := &lagmetrics.Lag{EndToEnd: minus(s.EndToEnd, b.EndToEnd), Stages: map[string]lagmetrics.Histogram{}}
		for name, h := range s.Stages {
			d.Stages[name] = minus(h, b.Stages[name])
		}
		out[k] = d
	}
	return out
}

// renderStatus prints one table per pipeline and table, sorted by them.
// A sample is the rows of one polled batch that one chunk carried, timed
// from the batch's oldest record.
func renderStatus(w io.Writer, lag map[lagmetrics.Key]*lagmetrics.Lag, window time.Duration) {
	keys := make([]lagmetrics.Key, 0, len(lag))
	for k := range lag {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b lagmetrics.Key) int {
		if c := strings.Compare(a.Pipeline, b.Pipeline); c != 0 {
			return c
		}
		return strings.Compare(a.Table, b.Table)
	})
	span := "since the instance started"
	if window > 0 {
		span = "in the last " + window.String()
	}
	if len(keys) == 0 {
		fmt.Fprintln(w, "no pipeline has inserted anything yet")
	}
	for i, k := range keys {
		if i > 0 {
			fmt.Fprintln(w)
		}
		s := lag[k]
		if s.EndToEnd.Count == 0 {
			fmt.Fprintf(w, "%s → %s: no inserts %s\n", k.Pipeline, k.Table, span)
			continue
		}
		fmt.Fprintf(w, "%s → %s: %d samples %s\n", k.Pipeline, k.Table, s.EndToEnd.Count, span)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "stage     \tmean\tp50\tp99\tshare\t")
		top, topSum := "", -1.0
		for _, name := range lagStageNames {
			h, ok := s.Stages[name]
			if !ok {
				continue
			}
			fmt.Fprintf(tw, "%-10s\t%s\t%s\t%s\t%s\t\n", name, durationText(h.Mean()), quantileText(h, 0.5), quantileText(h, 0.99), share(h.Sum, s.EndToEnd.Sum))
			if h.Sum > topSum {
				top, topSum = name, h.Sum
			}
		}
		e := s.EndToEnd
		fmt.Fprintf(tw, "end-to-end\t%s\t%s\t%s\t%s\t\n", durationText(e.Mean()), quantileText(e, 0.5), quantileText(e, 0.99), share(e.Sum, e.Sum))
		tw.Flush()
		if top != "" {
			fmt.Fprintf(w, "most time: %s (%s): %s\n", top, share(topSum, e.Sum), stageHints[top])
		}
	}
}

func quantileText(h lagmetrics.Histogram, q float64) string {
	v, above := h.Quantile(q)
	if above {
		return "> " + durationText(v)
	}
	return durationText(v)
}

func share(part, total float64) string {
	if total <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*part/total, 'f', 1, 64) + "%"
}

// durationText prints a duration in seconds with three significant digits.
func durationText(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case s < 0:
		return "-" + durationText(-s)
	case s == 0:
		return "0"
	case s < 1e-3:
		return sig3(s*1e6) + "µs"
	case s < 1:
		return sig3(s*1e3) + "ms"
	case s < 60:
		return sig3(s) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
}

// sig3 prints x (at least 1, below 1000) with three significant digits.
func sig3(x float64) string {
	switch {
	case x >= 99.95:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 9.995:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}
