package main

import (
	"encoding/xml"
	"fmt"
	"html"
	"image/color"
	"image/png"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/testinfra"
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
	// The server's inserts took 0.5 µs per row from sluice, 0.6 from ch-go.
	d := &drainFigures{RowsPerCoreSec: 1.2e6, GatesPass: true, PeakRSSMiB: 400, Rows: 1e6,
		Server: &serverCounters{Inserts: 10, InsertedRows: 1e6, InsertCPUSeconds: 0.5}}
	floor := &insertFloor{GatesPass: true, Server: &serverCounters{Inserts: 10, InsertedRows: 1e6, InsertCPUSeconds: 0.6}}
	s := &sustained{drainFigures: drainFigures{GatesPass: true, PeakRSSMiB: 300}, Fraction: 0.5, LatencyP99LoS: 0.7}
	// Beside a second drain, its inserts took 0.7 µs per row, ch-go's 0.72.
	beside := &besideFloor{
		Drain: &drainFigures{GatesPass: true, Server: &serverCounters{Inserts: 10, InsertedRows: 1e6, InsertCPUSeconds: 0.7}},
		Floor: &insertFloor{GatesPass: true, Server: &serverCounters{Inserts: 10, InsertedRows: 1e6, InsertCPUSeconds: 0.72}}}
	got := targets(&result{Drain: d, Floor: floor, Beside: beside, Sustained: []*sustained{s}})
	want := map[string]string{
		"drain: landed rows per second of sluice CPU": "met",
		"drain: duplicates":                           "met",
		"drain: peak RSS of sluice":                   "met",
		"drain: server CPU per row of the inserts, sluice's / ch-go's (floor arm, after the drain)": "met",
		"drain: server CPU per row of the inserts, sluice's / ch-go's (beside a second drain)":      "met",
		"sustained 50%: p99 latency (ingest_ts)":                                                    "inconclusive (1 s resolution)", // [0.7, 1.7) straddles 1.5
		"sustained 50%: peak RSS of sluice":                                                         "met",
		"every gate passes (all arms)":                                                              "met",
		"side by side: sluice / Kafka engine rows/s":                                                "not run",
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
	d.PeakRSSMiB = 513
	want["drain: peak RSS of sluice"] = "NOT MET"
	// 0.65 µs per row is over the floor by more than the readings'
	// resolution (a microsecond per insert: 0.00001 µs per row here).
	d.Server.InsertCPUSeconds = 0.65
	want["drain: server CPU per row of the inserts, sluice's / ch-go's (floor arm, after the drain)"] = "NOT MET"
	// A beside arm whose floor failed has no figure.
	beside.Floor.Error = "insert: connection refused"
	want["drain: server CPU per row of the inserts, sluice's / ch-go's (beside a second drain)"] = "failed: insert: connection refused"
	if got := status(targets(&result{Drain: d, Floor: floor, Beside: beside, Sustained: []*sustained{s}})); !reflect.DeepEqual(got, want) {
		t.Errorf("targets %v, want %v", got, want)
	}
}

// TestPairWholePipeline: the whole pipeline's ratio counts the broker's
// CPU on both sides and the engine's CPU once (it is the server's).
func TestPairWholePipeline(t *testing.T) {
	sl := &drainFigures{Rows: 1000, RowsPerSec: 100, CPUSeconds: 2, ClickHouseCPUSeconds: 1, KafkaCPUSeconds: 1}
	ke := &drainFigures{Rows: 1000, RowsPerSec: 50, CPUSeconds: 1.5, ClickHouseCPUSeconds: 1.5, KafkaCPUSeconds: 0.5}
	p := pair(sl, ke)
	if !near(p.Ratio, 2) || !near(p.RatioWholePipeline, (1000.0/4)/(1000.0/2)) {
		t.Errorf("ratio %v, whole pipeline %v; want 2, 0.5", p.Ratio, p.RatioWholePipeline)
	}
}

func TestScanTSV(t *testing.T) {
	var a, b int64
	if err := scanTSV("12\t-3\n", &a, &b); err != nil || a != 12 || b != -3 {
		t.Errorf("scanTSV: %d %d %v", a, b, err)
	}
	if err := scanTSV("12\n", &a, &b); err == nil {
		t.Error("one field for two: no error")
	}
	if err := scanTSV("12\tx\n", &a, &b); err == nil {
		t.Error("a field that is not a number: no error")
	}
}

// TestEventDiffs checks the ranking of two arms' insert ProfileEvents: by
// relative difference per row, counters under one per 1,000 rows and
// differences under 10% left out, at most n.
func TestEventDiffs(t *testing.T) {
	ev, err := parseEvents("SoftPageFaults\t2000\nUserTimeMicroseconds\t300000\nRare\t1\nSame\t1000\n")
	if err != nil {
		t.Fatal(err)
	}
	a := &serverCounters{InsertedRows: 100_000, InsertEvents: ev}
	b := &serverCounters{InsertedRows: 200_000, InsertEvents: map[string]int64{
		"SoftPageFaults": 400, "UserTimeMicroseconds": 500_000, "Same": 2000, "OnlyB": 10_000,
	}}
	want := []string{
		"OnlyB 0 vs 0.05 per row",
		"SoftPageFaults 0.02 vs 0.002 per row",
		"UserTimeMicroseconds 3 vs 2.5 per row",
	}
	if got := eventDiffs(a, b, 5); !reflect.DeepEqual(got, want) {
		t.Errorf("eventDiffs = %q, want %q", got, want)
	}
	if got := eventDiffs(a, b, 1); !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("eventDiffs(n=1) = %q, want %q", got, want[:1])
	}
	if got := eventDiffs(a, nil, 5); got != nil {
		t.Errorf("eventDiffs with no second arm = %q, want nil", got)
	}
	if _, err := parseEvents("SoftPageFaults x\n"); err == nil {
		t.Error("parseEvents: a line without a tab and a number: no error")
	}
}

// chartResult is a made-up run of every arm: a drain, two side-by-side
// arms, one sustained rate, each series apart from the others.
func chartResult() *result {
	ramp := func(n int, rowsPerSec float64) []sample {
		var s []sample
		for i := 0; i < n; i++ {
			t := float64(i) * 0.2
			s = append(s, sample{T: t, Landed: int64(rowsPerSec * t * t)})
		}
		return s
	}
	var perSecond [][3]float64
	var countGap [][2]float64
	for i := 0; i < 8; i++ {
		perSecond = append(perSecond, [3]float64{float64(i), 0.1, 0.2 + 0.1*float64(i%2)})
		countGap = append(countGap, [2]float64{float64(i), 0.5 + 0.05*float64(i)})
	}
	start := time.Now()
	return &result{Profile: "test", Date: "2026-11-29T00:00:00Z", Versions: map[string]string{"clickhouse": "18.16.1"},
		Drain:      &drainFigures{samples: ramp(50, 1000)},
		SideBySide: &sideBySide{KafkaEngine: &drainFigures{samples: ramp(20, 8000)}, Sluice: &drainFigures{samples: ramp(40, 3000)}},
		Sustained: []*sustained{{drainFigures: drainFigures{samples: ramp(50, 300)}, Fraction: 0.5, TargetRowsPerSec: 5000, DurationS: 8,
			t0: start.Add(time.Second), start: start, CountGap: countGap, PerSecond: perSecond}},
	}
}

// TestChartPNG draws the chart as PNG and checks its size and that every
// series' colour is drawn.
func TestChartPNG(t *testing.T) {
	res := chartResult()
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
	if b := img.Bounds(); b.Dx() != chartW || b.Dy() != chartH(3) {
		t.Fatalf("chart is %v, want %dx%d", b, chartW, chartH(3))
	}
	for _, pn := range chartPanels(res) {
		for _, s := range pn.series {
			n := 0
			b := img.Bounds()
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					if c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA); c == s.c {
						n++
					}
				}
			}
			// A line and its legend thumbnail: well over a hundred pixels.
			if n < 100 {
				t.Errorf("%s: %d pixels of %v", s.name, n, s.c)
			}
		}
	}
}

// TestChartSVG draws the chart as SVG and checks its size and that it
// names every panel and series.
func TestChartSVG(t *testing.T) {
	res := chartResult()
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := drawChart(path, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		XMLName xml.Name
		Width   string `xml:"width,attr"`
		Height  string `xml:"height,attr"`
	}
	if err := xml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	// 96 px to the inch, 72 points.
	wantW, wantH := fmt.Sprintf("%gpt", chartW*0.75), fmt.Sprintf("%gpt", float64(chartH(3))*0.75)
	if root.XMLName.Local != "svg" || root.Width != wantW || root.Height != wantH {
		t.Fatalf("root <%s width=%q height=%q>, want <svg width=%q height=%q>", root.XMLName.Local, root.Width, root.Height, wantW, wantH)
	}
	svg := html.UnescapeString(string(b))
	panels := chartPanels(res)
	var want []string
	for _, pn := range panels {
		want = append(want, pn.title, pn.unit)
		for _, s := range pn.series {
			want = append(want, s.name)
		}
	}
	want = append(want, "sluice sensor-batch, profile test, 2026-11-29", "seconds",
		"clickhouse 18.16.1 (18.16 deviation", "ingest_ts p99 lo 50%")
	for _, w := range want {
		if !strings.Contains(svg, ">"+w) {
			t.Errorf("the SVG has no text %q", w)
		}
	}
	if len(panels) != 3 {
		t.Errorf("%d panels, want 3", len(panels))
	}
}

// TestPipelineConfig: the module parameters of an arm reach sluice's
// configuration beside the table, and -sluice-yaml merges into it
// mapping by mapping.
func TestPipelineConfig(t *testing.T) {
	type config struct {
		Module struct {
			Params map[string]string `yaml:"params"`
		} `yaml:"module"`
		ClickHouse map[string]string `yaml:"clickhouse"`
		Delivery   string            `yaml:"delivery"`
	}
	for _, tt := range []struct {
		params      map[string]string
		extra       string
		wantParams  map[string]string
		wantCH      map[string]string
		wantErr     string
		wantDeliver string
	}{
		{params: nil, wantParams: map[string]string{"table": "se_json"}, wantCH: map[string]string{"addr": "127.0.0.1:2"}},
		{params: map[string]string{"format": "json", "b": "c"},
			wantParams: map[string]string{"table": "se_json", "format": "json", "b": "c"}, wantCH: map[string]string{"addr": "127.0.0.1:2"}},
		{extra: "clickhouse: {backlog_insert_linger: 5s}\ndelivery: exactly_once\n", wantParams: map[string]string{"table": "se_json"},
			wantCH: map[string]string{"addr": "127.0.0.1:2", "backlog_insert_linger": "5s"}, wantDeliver: "exactly_once"},
		{extra: "clickhouse: {addr: 127.0.0.1:3}", wantParams: map[string]string{"table": "se_json"}, wantCH: map[string]string{"addr": "127.0.0.1:3"}},
		{extra: "clickhouse: {", wantErr: "-sluice-yaml"},
	} {
		p := pipeline{name: "se_json", brokers: "127.0.0.1:1", topic: "t", dlq: "d", module: "/m.wasm", table: "se_json",
			params: tt.params, chAddr: "127.0.0.1:2", cacheDir: "/c", extraYAML: tt.extra}
		b, err := p.config()
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("extra %q: error %v, want one naming %s", tt.extra, err, tt.wantErr)
			}
			continue
		}
		var cfg config
		if err == nil {
			err = yaml.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if !maps.Equal(cfg.Module.Params, tt.wantParams) || !maps.Equal(cfg.ClickHouse, tt.wantCH) || cfg.Delivery != tt.wantDeliver {
			t.Errorf("params %v, extra %q: module.params %v, clickhouse %v, delivery %q; want %v, %v, %q\n%s",
				tt.params, tt.extra, cfg.Module.Params, cfg.ClickHouse, cfg.Delivery, tt.wantParams, tt.wantCH, tt.wantDeliver, b)
		}
	}
}

// TestSBSJSONModule: -module c runs the C module with format=json in the
// JSON side by side; every other SDK, which has no JSON port, the Go one.
func TestSBSJSONModule(t *testing.T) {
	for m := range avroModules {
		name, params := sbsJSONModule(m)
		if m == "c" {
			if name != "examples/sensor-batch-c (format=json)" || !maps.Equal(params, map[string]string{"format": "json"}) {
				t.Errorf("-module c: %q %v, want the C module with format=json", name, params)
			}
		} else if name != "examples/sensor-batch-json" || params != nil {
			t.Errorf("-module %s: %q %v, want the Go JSON module without parameters", m, name, params)
		}
	}
}

// TestThreadsBetween: a thread's CPU counts from the first snapshot, or
// from zero when it started after it; what the process used beyond its
// live threads goes to exitedThreads.
func TestThreadsBetween(t *testing.T) {
	a := map[int]testinfra.ThreadCPU{1: {Name: "TCPHandler", CPU: time.Second}, 2: {Name: "Merge", CPU: 2 * time.Second}}
	b := map[int]testinfra.ThreadCPU{1: {Name: "TCPHandler", CPU: 3 * time.Second}, 2: {Name: "Merge", CPU: 2 * time.Second},
		3: {Name: "Merge", CPU: 500 * time.Millisecond}}
	got := threadsBetween(a, b, 4)
	want := map[string]float64{"TCPHandler": 2, "Merge": 0.5, exitedThreads: 1.5}
	if !maps.Equal(got, want) {
		t.Errorf("threadsBetween = %v, want %v", got, want)
	}
	if s := topThreads(got, 2); s != "TCPHandler 2.0, (exited threads) 1.5" {
		t.Errorf("topThreads = %q", s)
	}
}

func TestParseInts(t *testing.T) {
	got, err := parseInts("1005499\n694712\n19145\n")
	if err != nil || !reflect.DeepEqual(got, []int64{1005499, 694712, 19145}) {
		t.Fatalf("parseInts = %v, %v", got, err)
	}
	if got, err := parseInts(""); err != nil || len(got) != 0 {
		t.Fatalf("parseInts of nothing = %v, %v", got, err)
	}
	if _, err := parseInts("12\nx\n"); err == nil {
		t.Fatal("parseInts took a line that is not an integer")
	}
}

func TestUserSplit(t *testing.T) {
	a := &serverCounters{InsertedRows: 1000, InsertEvents: map[string]int64{"UserTimeMicroseconds": 175}}
	b := &serverCounters{InsertedRows: 2000, InsertEvents: map[string]int64{"UserTimeMicroseconds": 338}}
	if got := userSplit(a, b); got != ", of which user 0.175 / 0.169" {
		t.Fatalf("userSplit = %q", got)
	}
	// 18.16 keeps no ProfileEvents map: nothing to split.
	if got := userSplit(a, &serverCounters{InsertedRows: 2000}); got != "" {
		t.Fatalf("userSplit without events = %q", got)
	}
}

// TestFloorSizes: the floor's inserts take the drain's sizes in their
// order, skip the empty ones, start over should the drain's come short of
// the rows, and end with what is left.
func TestFloorSizes(t *testing.T) {
	for _, c := range []struct {
		rows  int64
		drain []int64
		want  []int64
	}{
		{1000, []int64{600, 300, 100}, []int64{600, 300, 100}},
		{1000, []int64{600, 0, 300, 100}, []int64{600, 300, 100}}, // a deduplicated retry wrote nothing
		{1000, []int64{400, 100}, []int64{400, 100, 400, 100}},
		{1000, []int64{700, 700}, []int64{700, 300}},
		{600_000, nil, []int64{floorInsertRows, floorInsertRows, 100_000}},
		{10, []int64{0}, []int64{10}},
	} {
		if got := floorSizes(c.rows, c.drain); !reflect.DeepEqual(got, c.want) {
			t.Errorf("floorSizes(%d, %v) = %v, want %v", c.rows, c.drain, got, c.want)
		}
	}
}
