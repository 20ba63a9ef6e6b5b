package main

import (
	"bytes"
	"flag"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/lagmetrics"
)

var updateStatus = flag.Bool("update-status", false, "rewrite cmd/sluice/testdata/status-*.golden")

func readLagFile(t *testing.T, name string) map[lagmetrics.Key]*lagmetrics.Lag {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lag, err := parseLag(f)
	if err != nil {
		t.Fatal(err)
	}
	return lag
}

// TestParseLag checks what parseLag makes of a fixed /metrics text: every
// pipeline's table, the end-to-end and stage histograms with their counts,
// sums and cumulative buckets.
func TestParseLag(t *testing.T) {
	lag := readLagFile(t, "status-after.txt")
	if len(lag) != 3 {
		t.Fatalf("%d series, want 3: %v", len(lag), lag)
	}
	s := lag[lagmetrics.Key{Pipeline: "log-normalize", Table: "default.logs"}]
	if s == nil {
		t.Fatal("no log-normalize → default.logs")
	}
	if e := s.EndToEnd; e.Count != 100 || e.Sum != 150 || len(e.Bounds) != 6 || !math.IsInf(e.Bounds[5], 1) ||
		e.Bounds[3] != 1 || e.Cumulative[3] != 20 || e.Cumulative[4] != 90 {
		t.Errorf("end-to-end %+v", e)
	}
	sum := 0.0
	for _, name := range lagStageNames {
		h, ok := s.Stages[name]
		if !ok || h.Count != 100 {
			t.Errorf("stage %s: %+v", name, h)
		}
		sum += h.Sum
	}
	if sum != 150 {
		t.Errorf("stage sums add up to %v, want 150", sum)
	}
	if b := s.Stages["broker"]; b.Cumulative[0] != 10 || b.Cumulative[4] != 80 {
		t.Errorf("broker buckets %v", b.Cumulative)
	}
	for _, text := range []string{"", "go_goroutines 1\n", "# TYPE sluice_end_to_end_seconds histogram\nsluice_end_to_end_seconds_count 1\n"} {
		if _, err := parseLag(strings.NewReader(text)); err == nil {
			t.Errorf("%q: parsed without the lag histograms", text)
		}
	}
}

// TestLagQuantile checks the bucket interpolation against values worked
// out by hand, as Prometheus' histogram_quantile gives them.
func TestLagQuantile(t *testing.T) {
	inf := math.Inf(1)
	h := lagmetrics.Histogram{Count: 60, Bounds: []float64{0.001, 0.01, 0.1, 1, 10, inf}, Cumulative: []uint64{0, 0, 0, 15, 60, 60}}
	for _, tc := range []struct {
		q     float64
		want  float64
		above bool
	}{
		{0.5, 4, false},     // rank 30: 1 + 9 × 15/45
		{0.99, 9.88, false}, // rank 59.4: 1 + 9 × 44.4/45
		{0.25, 1, false},    // rank 15: the top of the 1 s bucket
		{0.1, 0.46, false},  // rank 6 in (0.1, 1]: 0.1 + 0.9 × 6/15
	} {
		got, above := h.Quantile(tc.q)
		if math.Abs(got-tc.want) > 1e-12 || above != tc.above {
			t.Errorf("q%v = %v (above %v), want %v", tc.q, got, above, tc.want)
		}
	}
	behind := lagmetrics.Histogram{Count: 4, Bounds: []float64{1, 10, inf}, Cumulative: []uint64{0, 1, 4}}
	if v, above := behind.Quantile(0.5); v != 10 || !above {
		t.Errorf("a median in the +Inf bucket: %v above %v, want > 10", v, above)
	}
	if v, _ := (lagmetrics.Histogram{}).Quantile(0.5); !math.IsNaN(v) {
		t.Errorf("quantile of no samples = %v", v)
	}
}

// TestLagDelta: a window's figures are the second read minus the first;
// a series new in the second read, or one that went back (a restart), is
// taken whole.
func TestLagDelta(t *testing.T) {
	d := lagDelta(readLagFile(t, "status-before.txt"), readLagFile(t, "status-after.txt"))
	s := d[lagmetrics.Key{Pipeline: "log-normalize", Table: "default.logs"}]
	if e := s.EndToEnd; e.Count != 60 || e.Sum != 50 || e.Cumulative[3] != 15 || e.Cumulative[5] != 60 {
		t.Errorf("window end-to-end %+v", e)
	}
	if b := s.Stages["broker"]; b.Count != 60 || b.Sum != 20 || b.Cumulative[0] != 5 {
		t.Errorf("window broker %+v", b)
	}
	if n := d[lagmetrics.Key{Pipeline: "acme/logs", Table: "default.events"}].EndToEnd.Count; n != 0 {
		t.Errorf("a series without new samples has %d in the window", n)
	}
	if n := d[lagmetrics.Key{Pipeline: "acme/metrics", Table: "default.points"}].EndToEnd.Count; n != 4 {
		t.Errorf("a series new in the second read has %d samples, want its 4", n)
	}
	restarted := lagDelta(readLagFile(t, "status-after.txt"), readLagFile(t, "status-before.txt"))
	if n := restarted[lagmetrics.Key{Pipeline: "log-normalize", Table: "default.logs"}].EndToEnd.Count; n != 40 {
		t.Errorf("after a restart the window has %d samples, want the second read's 40", n)
	}
}

// TestRenderStatus checks the rendered tables against golden files: the
// window between the two fixed reads, and everything since the start.
func TestRenderStatus(t *testing.T) {
	before, after := readLagFile(t, "status-before.txt"), readLagFile(t, "status-after.txt")
	for _, tc := range []struct {
		golden string
		lag    map[lagmetrics.Key]*lagmetrics.Lag
		window time.Duration
	}{
		{"status-window.golden", lagDelta(before, after), 10 * time.Second},
		{"status-total.golden", after, 0},
	} {
		var out bytes.Buffer
		renderStatus(&out, tc.lag, tc.window)
		path := "testdata/" + tc.golden
		if *updateStatus {
			if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != string(want) {
			t.Errorf("%s differs (go test -run TestRenderStatus -update-status rewrites it):\n%s", tc.golden, out.String())
		}
	}
}

// TestStatusCommand runs sluice status against a server answering the
// two fixed reads in turn, by URL and by listen address, and checks the
// failures it reports.
func TestStatusCommand(t *testing.T) {
	docs := [][]byte{}
	for _, name := range []string{"status-before.txt", "status-after.txt"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b)
	}
	var reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			i := min(int(reads.Add(1))-1, 1)
			w.Write(docs[i])
		case "/other/metrics":
			w.Write([]byte("go_goroutines 3\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "-metrics", strings.TrimPrefix(srv.URL, "http://"), "-window", "20ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"log-normalize → default.logs: 60 samples in the last 20ms\n",
		"acme/logs → default.events: no inserts in the last 20ms\n",
		"end-to-end   833ms   4.00s    9.88s  100.0%",
		"most time: broker (40.0%): records wait in Kafka",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads of /metrics, want 2", n)
	}

	stdout.Reset()
	if code := run([]string{"status", "-metrics", srv.URL + "/metrics", "-window", "0"}, &stdout, &stderr); code != 0 {
		t.Fatalf("-window 0: exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "log-normalize → default.logs: 100 samples since the instance started\n") {
		t.Errorf("-window 0 output:\n%s", stdout.String())
	}

	for _, tc := range []struct {
		url, want string
	}{
		{srv.URL + "/other/metrics", "no sluice_end_to_end_seconds"},
		{srv.URL + "/missing", "404"},
	} {
		stderr.Reset()
		if code := run([]string{"status", "-metrics", tc.url, "-window", "0"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", tc.url, code, stderr.String(), tc.want)
		}
	}
	if code := run([]string{"status", "extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("an argument: exit %d, want 2", code)
	}
}
