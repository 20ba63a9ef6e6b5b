package main

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestFromSamples checks the drain figures on a made-up run: nothing for
// 2 s, then 100 rows a second, one insert every second, with sluice using
// half a core.
func TestFromSamples(t *testing.T) {
	var w watchResult
	for i := 0; i <= 60; i++ {
		ts := float64(i) * 0.2
		landed := int64(0)
		if ts >= 2 {
			landed = int64(math.Floor(ts-2)+1) * 100
		}
		landed = min(landed, 1000)
		w.samples = append(w.samples, sample{T: ts, Landed: landed, CPU: ts / 2, CHCPU: ts / 4})
	}
	w.complete = true
	var f drainFigures
	f.System = "sluice"
	f.fromSamples(w, 1000)
	// The 1000th row lands at 11 s.
	if !near(f.ElapsedS, 11) || !near(f.RowsPerSec, 1000.0/11) {
		t.Errorf("elapsed %v, rows/s %v", f.ElapsedS, f.RowsPerSec)
	}
	if !near(f.AfterFirstRowsPerSec, 900.0/9) {
		t.Errorf("after the first row: %v rows/s, want 100", f.AfterFirstRowsPerSec)
	}
	if !near(f.RowsPerCoreSec, 1000/5.5) || !near(f.RowsPerPipelineCoreSec, 1000/(5.5+2.75)) {
		t.Errorf("per core %v, pipeline %v", f.RowsPerCoreSec, f.RowsPerPipelineCoreSec)
	}
	// The timeline keeps the steps: the sample before and at each change.
	if got := f.Timeline[:4]; got[0] != [2]float64{0, 0} || got[1] != [2]float64{1.8, 0} || got[2] != [2]float64{2, 100} || got[3] != [2]float64{2.8, 100} {
		t.Errorf("timeline starts %v", got)
	}
}

func TestTargets(t *testing.T) {
	d := &drainFigures{RowsPerCoreSec: 1.2e6, GatesPass: true}
	s := &sustained{drainFigures: drainFigures{GatesPass: true, PeakRSSMiB: 300}, Fraction: 0.5, LatencyP99LoS: 0.7}
	got := targets(&result{Drain: d, Sustained: []*sustained{s}})
	want := map[string]string{
		"drain: landed rows per second of sluice CPU": "met",
		"drain: duplicates":                           "met",
		"sustained 50%: p99 latency (ingest_ts)":      "inconclusive (1 s resolution)", // [0.7, 1.7) straddles 1.5
		"sustained 50%: peak RSS of sluice":           "met",
		"every gate passes (all arms)":                "met",
		"side by side: sluice / Kafka engine rows/s":  "not run",
	}
	status := func(got []target) map[string]string {
		m := map[string]string{}
		for _, tg := range got {
			m[tg.Name] = tg.Status
		}
		return m
	}
	if got := status(got); !reflect.DeepEqual(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	s.LatencyP99LoS = 0.4
	s.GatesPass = false
	want["sustained 50%: p99 latency (ingest_ts)"] = "met"
	want["every gate passes (all arms)"] = "NOT MET"
	if got := status(targets(&result{Drain: d, Sustained: []*sustained{s}})); !reflect.DeepEqual(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// TestChart draws a chart of made-up runs and checks it is a PNG.
func TestChart(t *testing.T) {
	var smp []sample
	for i := 0; i < 50; i++ {
		smp = append(smp, sample{T: float64(i) * 0.2, Landed: int64(i * i * 1000)})
	}
	start := time.Now()
	res := &result{Profile: "test", Date: "2026-11-29T00:00:00Z", Versions: map[string]string{},
		Drain:      &drainFigures{samples: smp},
		SideBySide: &sideBySide{KafkaEngine: &drainFigures{samples: smp[:20]}, Sluice: &drainFigures{samples: smp[10:]}},
		Sustained: []*sustained{{drainFigures: drainFigures{samples: smp}, Fraction: 0.5, TargetRowsPerSec: 5000, DurationS: 8,
			t0: start.Add(time.Second), start: start, CountGap: [][2]float64{{0, 0.5}, {1, 0.7}}, PerSecond: [][3]float64{{0, -0.2, 0.3}}}},
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := drawChart(path, res); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != chartW || b.Dy() < 3*panelH {
		t.Errorf("chart is %v", b)
	}
}
