// Command rig runs the sensor-batch workload end to end (benchmarks/README.md):
// it starts a private ClickHouse server — 26.9 (chdb-core's clickhouse-local
// serving TCP and HTTP) with the workload's published table layout, or
// 18.16 with its compatibility layout (-server) — and a Kafka 4.1 broker
// (internal/testinfra), builds the sluice binary and the sensor-batch
// modules from the working tree, and measures
//
//   - wasm: the modules' logic natively and in wazero, same corpus;
//   - drain: a prefilled 8-partition topic of Avro batches drained by the
//     sluice binary, landed rows/s from ClickHouse and rows per second of
//     sluice CPU;
//   - sustained: open-loop production at 50% and 80% of the drain
//     throughput, with end-to-end latency from ingest_ts (now64(6) on 26.9);
//   - side by side: the JSON form of the corpus drained by ClickHouse's own
//     Kafka engine + materialized view, then by sluice with the JSON module;
//     on 26.9 also the Avro corpus (the engine reading AvroConfluent from a
//     loopback schema registry), and the engine at its default
//     kafka_flush_interval_ms and at 500 ms.
//
// Every arm ends with the correctness gates, after the pipeline has
// quiesced. Results are appended as one JSON line to
// benchmarks/results/sensor-batch.jsonl, and drawn in
// benchmarks/results/sensor-batch.png.
//
//	go run ./benchmarks/sensor/cmd/rig                        # quick profile on 26.9
//	go run ./benchmarks/sensor/cmd/rig -profile full          # 20M rows drained
//	go run ./benchmarks/sensor/cmd/rig -server 18.16          # the compatibility arm
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// deviation is what a run on server departs from the workload's
// specification in (benchmarks/README.md); the results carry it beside
// every figure.
func deviation(server testinfra.Server) string {
	if server == testinfra.Modern {
		return "none in the table: the published layout (batch_ts DateTime64(3), send_ts DateTime64(6), ingest_ts DateTime64(6) " +
			"MATERIALIZED now64(6), non_replicated_deduplication_window = 1000). The server is ClickHouse 26.9.2.1 as chdb-core's " +
			"clickhouse-local serving TCP and HTTP on loopback (one process, not clickhouse-server); the broker is Apache Kafka 4.1 " +
			"(not Redpanda) on the same 2-core machine as everything else"
	}
	return "ClickHouse 18.16: no DateTime64 and no non_replicated_deduplication_window, so batch_ts DateTime + batch_ts_ms UInt16, " +
		"send_ts_us Int64, ingest_ts DateTime MATERIALIZED now() (1 s resolution); no Avro input format, so the Kafka-engine " +
		"side by side uses the JSON form of the corpus (events as an object of parallel arrays), consumed by sluice's JSON module too"
}

// profile sizes a run.
type profile struct {
	name             string
	drainBatches     uint64
	sbsBatches       uint64
	sustainedSeconds float64
	wasmBatches      uint64
	keBlock          int
}

var profiles = map[string]profile{
	// Bounded for CI: about three minutes on 2 cores.
	"quick": {name: "quick", drainBatches: 40_000, sbsBatches: 40_000, sustainedSeconds: 20, wasmBatches: 1000, keBlock: 4096},
	// The workload's full drain: at least 20M rows (272,000 batches).
	"full": {name: "full", drainBatches: 272_200, sbsBatches: 100_000, sustainedSeconds: 60, wasmBatches: 2000, keBlock: 4096},
}

type rig struct {
	prof       profile
	env        *env
	sluiceYAML string
	logf       func(format string, args ...any)
}

func (r *rig) progress(name string) func(sample, int64) {
	return func(s sample, want int64) {
		r.logf("  %s: %d/%d rows landed at %.1fs", name, s.Landed, want, s.T)
	}
}

func main() {
	profName := flag.String("profile", "quick", "quick (CI-sized) or full (20M rows drained)")
	serverName := flag.String("server", string(testinfra.Modern), "ClickHouse to run on: 26.9 (the published layout, the primary figure) or 18.16 (the compatibility arm)")
	arms := flag.String("arms", "wasm,drain,floor,beside,sustained,sbs", "arms to run, comma-separated: wasm, drain, floor (the drain's rows inserted by ch-go alone, in inserts of the drain's sizes: the server's CPU floor), beside (the floor again, beside a second drain; after drain), sustained, sbs, delivery (the drain at least once and exactly once, A B A B; 26.9 only)")
	batches := flag.Uint64("batches", 0, "drain batches (of 100 events); default from the profile")
	sbsBatches := flag.Uint64("sbs-batches", 0, "side-by-side batches; default from the profile")
	susSeconds := flag.Float64("sustained-seconds", 0, "seconds of production per sustained rate; default from the profile")
	susRate := flag.Float64("drain-rate", 0, "rows/s the sustained rates are fractions of, when the drain arm is not run")
	rates := flag.String("rates", "0.5,0.8", "sustained rates, as fractions of the drain throughput")
	out := flag.String("out", "benchmarks/results/sensor-batch.jsonl", "results file (JSON lines), relative to the repository root")
	png := flag.String("png", "benchmarks/results/sensor-batch.png", "chart, relative to the repository root: PNG, or SVG when the name ends in .svg")
	sluiceYAML := flag.String("sluice-yaml", "", "extra YAML for the sluice config (knobs), merged into each arm's, e.g. 'clickhouse: {insert_linger: 200ms}'")
	keep := flag.Bool("keep", false, "keep the run's directory (configs, logs, binaries)")
	module := flag.String("module", "go", "the SDK whose Avro module the sluice arms run: go, c, rust or as; with c the JSON side by side runs the C module too (format=json), otherwise Go's JSON module; the wasm arm is Go's")
	keBlock := flag.Int("ke-block", 0, "kafka_max_block_size of the Kafka engine (messages); default from the profile")
	flag.Parse()

	server := testinfra.Server(*serverName)
	if server != testinfra.Modern && server != testinfra.Legacy {
		check(fmt.Errorf("unknown server %q (want %s or %s)", server, testinfra.Modern, testinfra.Legacy), "flags")
	}
	prof, ok := profiles[*profName]
	if !ok {
		check(fmt.Errorf("unknown profile %q", *profName), "flags")
	}
	if *batches > 0 {
		prof.drainBatches = *batches
	}
	if *sbsBatches > 0 {
		prof.sbsBatches = *sbsBatches
	}
	if *susSeconds > 0 {
		prof.sustainedSeconds = *susSeconds
	}
	if *keBlock > 0 {
		prof.keBlock = *keBlock
	}
	if _, ok := avroModules[*module]; !ok {
		check(fmt.Errorf("unknown module %q (want go, c, rust or as)", *module), "flags")
	}
	want := map[string]bool{}
	for _, a := range strings.Split(*arms, ",") {
		want[strings.TrimSpace(a)] = true
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	dir, err := os.MkdirTemp("", "sensor-rig-")
	check(err, "temp dir")
	if !*keep {
		defer os.RemoveAll(dir)
	} else {
		logf("run directory: %s", dir)
	}
	began := time.Now()
	e, err := startEnv(ctx, dir, 8, server, *module, logf)
	check(err, "start")
	defer e.close()
	r := &rig{prof: prof, env: e, sluiceYAML: *sluiceYAML, logf: logf}

	jsonName, _ := sbsJSONModule(*module)
	res := &result{
		Schema: "sluice/sensor-batch/1", Date: began.UTC().Format(time.RFC3339), Profile: prof.name,
		Machine: describeMachine(runtime.NumCPU()), Versions: e.versions(ctx),
		Deviation: deviation(server),
		Knobs: map[string]any{
			"clickhouse_server": string(server), "table_layout": e.layout.String(),
			"partitions": e.partitions, "kafka_jvm": kafkaJVMArgs, "producer_compression": "none",
			"sluice": "defaults (chunk_linger 200ms, insert_linger 500ms, chunk_bytes 1MiB, queue_capacity 8, max_inflight_bytes 128MiB, " +
				"max_batch_records 1000, max_batch_bytes 1MiB), commit_interval 500ms, dead_letter topic per arm",
			"sluice_yaml_extra":      *sluiceYAML,
			"avro_module":            avroModules[*module],
			"json_module":            jsonName,
			"kafka_engine_consumers": 1, "kafka_engine_max_block_size": prof.keBlock,
			"drain_batches": prof.drainBatches, "sbs_batches": prof.sbsBatches, "sustained_seconds": prof.sustainedSeconds,
		},
	}
	res.Commit, res.Dirty = gitCommit()
	for k, v := range binaryVersions(e.sluiceBin) {
		res.Versions[k] = v
	}
	res.Versions["go"] = runtime.Version()

	if want["wasm"] {
		prev := runtime.GOMAXPROCS(1)
		res.WASM = r.wasmArm(ctx)
		runtime.GOMAXPROCS(prev)
	}
	drainRate := *susRate
	if want["drain"] {
		res.Drain = r.drain(ctx)
		if res.Drain.AfterFirstRowsPerSec > 0 {
			drainRate = res.Drain.AfterFirstRowsPerSec
		}
	}
	if want["floor"] {
		var sizes []int64
		if d := res.Drain; d != nil && d.Server != nil {
			sizes = d.Server.InsertRows
		}
		res.Floor = r.floor(ctx, sizes)
		logf("floor: %s", res.Floor.summary())
		if res.Drain != nil {
			for _, d := range eventDiffs(res.Drain.Server, res.Floor.Server, 6) {
				logf("floor: ProfileEvents of the drain's inserts against the floor's: %s", d)
			}
		}
	}
	if want["beside"] && res.Drain != nil && res.Drain.Error == "" && res.Drain.Server != nil && res.Drain.Server.Inserts > 0 {
		d := res.Drain
		res.Beside = r.floorBeside(ctx, d.Server.InsertRows, d.AfterFirstRowsPerSec)
		logf("beside: %s", res.Beside.Drain.summary())
		logf("beside: %s", res.Beside.Floor.summary())
	}
	if want["delivery"] {
		res.Delivery = r.delivery(ctx, want["drain"])
	}
	if want["sustained"] {
		if drainRate <= 0 {
			check(fmt.Errorf("the sustained arm needs the drain arm or -drain-rate"), "sustained")
		}
		for _, f := range strings.Split(*rates, ",") {
			var frac float64
			if _, err := fmt.Sscan(f, &frac); err != nil || frac <= 0 {
				check(fmt.Errorf("bad rate %q", f), "flags")
			}
			res.Sustained = append(res.Sustained, r.sustained(ctx, frac, drainRate))
		}
	}
	if want["sbs"] {
		res.SideBySide = r.sideBySide(ctx)
	}
	res.DurationS = time.Since(began).Seconds()
	res.Targets = targets(res)
	for _, t := range res.Targets {
		logf("target %-58s want %-12s got %-28s %s", t.Name, t.Want, t.Got, t.Status)
	}

	root := wasmbuild.RepoRoot()
	line, err := json.Marshal(res)
	check(err, "results")
	outPath := *out
	if !filepath.IsAbs(outPath) {
		outPath = filepath.Join(root, outPath)
	}
	check(os.MkdirAll(filepath.Dir(outPath), 0o755), "results dir")
	f, err := os.OpenFile(outPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	check(err, "results file")
	_, err = f.Write(append(line, '\n'))
	check(err, "results file")
	check(f.Close(), "results file")
	logf("appended the results to %s", outPath)
	if *png != "" {
		pngPath := *png
		if !filepath.IsAbs(pngPath) {
			pngPath = filepath.Join(root, pngPath)
		}
		check(drawChart(pngPath, res), "chart")
		logf("drew %s", pngPath)
	}
}

// result is one line of sensor-batch.jsonl.
type result struct {
	Schema     string            `json:"schema"`
	Date       string            `json:"date"`
	Commit     string            `json:"commit"`
	Dirty      bool              `json:"dirty"` // the tree had uncommitted changes: the commit is the base
	Profile    string            `json:"profile"`
	Machine    machine           `json:"machine"`
	Versions   map[string]string `json:"versions"`
	Knobs      map[string]any    `json:"knobs"`
	Deviation  string            `json:"deviation"`
	WASM       *wasmOverhead     `json:"wasm,omitempty"`
	Drain      *drainFigures     `json:"drain,omitempty"`
	Floor      *insertFloor      `json:"floor,omitempty"`
	Beside     *besideFloor      `json:"beside,omitempty"`
	Sustained  []*sustained      `json:"sustained,omitempty"`
	SideBySide *sideBySide       `json:"side_by_side,omitempty"`
	Delivery   *deliveryCost     `json:"delivery,omitempty"`
	Targets    []target          `json:"targets"`
	DurationS  float64           `json:"duration_s"`
}

func gitCommit() (string, bool) {
	root := wasmbuild.RepoRoot()
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "unknown", false
	}
	st, _ := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	return strings.TrimSpace(string(out)), len(strings.TrimSpace(string(st))) > 0
}

// binaryVersions reads the module versions built into the sluice binary.
func binaryVersions(bin string) map[string]string {
	v := map[string]string{}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return v
	}
	names := map[string]string{
		"github.com/tetratelabs/wazero": "wazero", "github.com/twmb/franz-go": "franz-go", "github.com/ClickHouse/ch-go": "ch-go",
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "dep" {
			if n, ok := names[f[1]]; ok {
				v[n] = f[2]
			}
		}
	}
	return v
}

// target is one of the targets, judged honestly.
type target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Status string `json:"status"` // met, NOT MET, inconclusive, not run
}

func targets(res *result) []target {
	var t []target
	add := func(name, want, got, status string) { t = append(t, target{name, want, got, status}) }
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT MET"
	}
	allGates := true
	ran := false
	gates := func(f *drainFigures) {
		if f != nil {
			ran = true
			allGates = allGates && f.GatesPass && f.Error == ""
		}
	}
	if d := res.Drain; d != nil {
		gates(d)
		add("drain: landed rows per second of sluice CPU", ">= 1,000,000", fmt.Sprintf("%.0f", d.RowsPerCoreSec), met(d.RowsPerCoreSec >= 1e6))
		add("drain: duplicates", "0", fmt.Sprint(d.Duplicates), met(d.Duplicates == 0 && d.Error == ""))
		add("drain: peak RSS of sluice", "<= 512 MiB", fmt.Sprintf("%.0f MiB", d.PeakRSSMiB), met(d.PeakRSSMiB > 0 && d.PeakRSSMiB <= 512))
		if ratio, sl, fl, slack, ok := insertRatio(d, res.Floor); ok {
			add("drain: server CPU per row of the inserts, sluice's / ch-go's (floor arm, after the drain)", "<= 1.0",
				fmt.Sprintf("%.2f (%.3f / %.3f µs%s)", ratio, sl, fl, userSplit(d.Server, res.Floor.Server)), met(sl <= fl+slack))
		}
		if b := res.Beside; b != nil {
			gates(b.Drain)
			if ratio, sl, fl, slack, ok := insertRatio(b.Drain, b.Floor); ok {
				add("drain: server CPU per row of the inserts, sluice's / ch-go's (beside a second drain)", "<= 1.0",
					fmt.Sprintf("%.2f (%.3f / %.3f µs%s)", ratio, sl, fl, userSplit(b.Drain.Server, b.Floor.Server)), met(sl <= fl+slack))
			} else {
				add("drain: server CPU per row of the inserts, sluice's / ch-go's (beside a second drain)", "<= 1.0", "-",
					"failed: "+join(b.Drain.Error, b.Floor.Error))
			}
		}
	} else {
		add("drain: landed rows per second of sluice CPU", ">= 1,000,000", "-", "not run")
	}
	if s := res.SideBySide; s != nil {
		for _, f := range append(s.engineArms(), s.sluiceArms()...) {
			gates(f)
		}
		for _, p := range s.Pairs {
			flush := "server default" // 18.16: the interval is not read back
			if p.FlushIntervalMs > 0 {
				flush = fmt.Sprintf("%d ms", p.FlushIntervalMs)
			}
			add(fmt.Sprintf("side by side %s, engine flush %s: sluice / Kafka engine landed rows/s", p.Format, flush), ">= 1.0",
				fmt.Sprintf("%.2f (per core of the pipeline %.2f)", p.Ratio, p.RatioPerCore), met(p.Ratio >= 1 && p.BothGatesPass))
			add(fmt.Sprintf("side by side %s, engine flush %s: rows per core-second, sluice+server+broker / engine's server+broker", p.Format, flush), ">= 1.0",
				fmt.Sprintf("%.2f", p.RatioWholePipeline), met(p.RatioWholePipeline >= 1 && p.BothGatesPass))
		}
	} else {
		add("side by side: sluice / Kafka engine rows/s", ">= 1.0", "-", "not run")
	}
	if d := res.Delivery; d != nil {
		dups := uint64(0)
		for _, f := range d.Runs {
			gates(f)
			if f.Delivery == "exactly_once" {
				dups += f.Duplicates
			}
		}
		add("delivery: exactly-once / at-least-once drain rows/s (medians, A B A B)", ">= 0.90", fmt.Sprintf("%.3f", d.Ratio), met(d.Ratio >= 0.9))
		add("delivery: exactly-once duplicates", "0", fmt.Sprint(dups), met(dups == 0 && d.Ratio > 0))
	}
	var half *sustained
	for _, s := range res.Sustained {
		gates(&s.drainFigures)
		if s.Fraction == 0.5 {
			half = s
		}
	}
	exact := false
	for _, s := range res.Sustained {
		if s.LatencyResolutionS > 0 && s.LatencyResolutionS < 1e-3 {
			// ingest_ts is now64(6): the percentiles are exact.
			exact = true
			add(fmt.Sprintf("sustained %.0f%%: p99 latency (ingest_ts now64(6))", s.Fraction*100), "< 1 s",
				fmt.Sprintf("%.3f s; count-gap %.2f s", s.LatencyP99LoS, s.CountGapP99S), met(s.LatencyP99LoS < 1 && s.GatesPass && s.Error == ""))
		}
	}
	if half != nil {
		if !exact {
			// ingest_ts has 1 s resolution: the true p99 is in [lo, lo+1).
			status := "inconclusive (1 s resolution)"
			switch {
			case half.LatencyP99LoS+1 <= 1.5:
				status = "met"
			case half.LatencyP99LoS > 1.5:
				status = "NOT MET"
			}
			add("sustained 50%: p99 latency (ingest_ts)", "<= 1.5 s", fmt.Sprintf("[%.1f, %.1f) s; count-gap %.2f s", half.LatencyP99LoS, half.LatencyP99LoS+1, half.CountGapP99S), status)
		}
		add("sustained 50%: peak RSS of sluice", "<= 512 MiB", fmt.Sprintf("%.0f MiB", half.PeakRSSMiB), met(half.PeakRSSMiB > 0 && half.PeakRSSMiB <= 512))
	} else {
		add("sustained 50%: p99 latency", "<= 1.5 s", "-", "not run")
	}
	if ran {
		add("every gate passes (all arms)", "all", fmt.Sprint(allGates), met(allGates))
	}
	return t
}
