package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/benchmarks/sensor"
	"github.com/sluicehq/sluice/internal/testinfra"
	"github.com/sluicehq/sluice/internal/wasmbuild"
	"github.com/sluicehq/sluice/wasmhost"
)

// env is the services and binaries every arm of a run shares: one broker,
// one server, one sluice binary, the two modules.
type env struct {
	ch       *testinfra.ClickHouse
	kafka    *testinfra.Kafka
	adm      *kadm.Client
	kcl      *kgo.Client
	chPID    int
	kafkaPID int

	// server is the ClickHouse the run is on; layout the sensor_events
	// variant its tables have (the published one on 26.9).
	server testinfra.Server
	layout sensor.Layout
	// registry is the schema-registry endpoint the Kafka engine's
	// AvroConfluent reads the schema from (26.9 only).
	registry *schemaRegistry

	dir        string
	sluiceBin  string
	avroWasm   string // the Avro module the sluice arms run (-module)
	avroModule string // its SDK: go, c, rust or as
	goAvroWasm string // the Go SDK's Avro module, which the wasm arm compares with its native build
	jsonWasm   string // the Go SDK's JSON module, which the wasm arm compares with its native build
	// The JSON module the side by side runs, and its module parameters:
	// the C module with format=json for -module c, else jsonWasm.
	sbsJSONWasm   string
	sbsJSONParams map[string]string
	cacheDir      string
	partitions    int
	logf          func(format string, args ...any)
}

// avroModules are the sensor-batch Avro modules of the guest SDKs, the
// rig's -module choices: the same rows and dead letters (checked by
// wasmhost's TestSensorBatchPortsMatchGo), from different compilers.
var avroModules = map[string]string{
	"go":   "examples/sensor-batch",
	"c":    "examples/sensor-batch-c",
	"rust": "examples/sensor-batch-rust",
	"as":   "examples/sensor-batch-as/index.ts",
}

// sbsJSONModule is the JSON module the side by side runs for -module m,
// as the record names it, and its module parameters beside the table:
// the C module with format=json for c (the same rows and dead letters as
// the Go one, checked by wasmhost's TestSensorBatchCJSONMatchesGo), else
// the Go SDK's own module, which the other SDKs have no port of.
func sbsJSONModule(m string) (name string, params map[string]string) {
	if m == "c" {
		return "examples/sensor-batch-c (format=json)", map[string]string{"format": "json"}
	}
	return "examples/sensor-batch-json", nil
}

// buildAvroModule builds the Avro module of an SDK other than Go's into out.
func buildAvroModule(ctx context.Context, module, out string) error {
	src := filepath.Join(wasmbuild.RepoRoot(), avroModules[module])
	switch module {
	case "c":
		return wasmbuild.BuildC(ctx, wasmbuild.Wasm, src, out)
	case "rust":
		return wasmbuild.BuildRust(ctx, src, out)
	case "as":
		return wasmbuild.BuildAS(ctx, filepath.Join(wasmbuild.RepoRoot(), wasmbuild.ASSDKDir), src, out)
	}
	return fmt.Errorf("unknown module %q (want one of go, c, rust, as)", module)
}

// kafkaJVMArgs suit throughput on this machine: testinfra's defaults stop
// at C1 (-XX:TieredStopAtLevel=1) for quick starts, which costs the broker
// CPU per byte in a long run.
var kafkaJVMArgs = []string{"-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"}

func startEnv(ctx context.Context, dir string, partitions int, server testinfra.Server, avroModule string, logf func(string, ...any)) (*env, error) {
	e := &env{dir: dir, partitions: partitions, logf: logf, cacheDir: filepath.Join(dir, "wasm-cache"), server: server, avroModule: avroModule}
	if server == testinfra.Modern {
		e.layout = sensor.LayoutModern
	}
	var err error
	logf("building sluice and the modules")
	if e.sluiceBin, err = buildSluice(ctx, dir); err != nil {
		return nil, err
	}
	e.goAvroWasm = filepath.Join(dir, "sensor-batch.wasm")
	if err := wasmbuild.Build(ctx, filepath.Join(wasmbuild.RepoRoot(), "examples/sensor-batch"), e.goAvroWasm); err != nil {
		return nil, err
	}
	e.avroWasm = e.goAvroWasm
	if avroModule != "go" {
		e.avroWasm = filepath.Join(dir, "sensor-batch-"+avroModule+".wasm")
		if err := buildAvroModule(ctx, avroModule, e.avroWasm); err != nil {
			return nil, err
		}
	}
	e.jsonWasm = filepath.Join(dir, "sensor-batch-json.wasm")
	if err := wasmbuild.Build(ctx, filepath.Join(wasmbuild.RepoRoot(), "examples/sensor-batch-json"), e.jsonWasm); err != nil {
		return nil, err
	}
	e.sbsJSONWasm = e.jsonWasm
	if _, params := sbsJSONModule(avroModule); params != nil {
		e.sbsJSONWasm, e.sbsJSONParams = e.avroWasm, params
	}
	// Compile the modules into the cache sluice uses, so that no arm pays
	// the compilation (about a second of CPU for each).
	if err := warmCache(ctx, e.cacheDir, e.avroWasm, e.goAvroWasm, e.jsonWasm); err != nil {
		return nil, err
	}
	logf("starting ClickHouse %s and Kafka", server)
	logConfig, logProfile := serverLogConfig(server)
	e.ch, err = testinfra.StartClickHouse(ctx, testinfra.ClickHouseOptions{
		Server: server,
		// The Kafka engine reads JSONEachRow with the settings of the
		// default profile; the events arrive as an object of arrays.
		ProfileSettings: "<input_format_import_nested_json>1</input_format_import_nested_json>" + logProfile,
		ExtraConfig:     logConfig,
	})
	if err != nil {
		return nil, err
	}
	if server == testinfra.Modern {
		if e.registry, err = startSchemaRegistry(); err != nil {
			e.close()
			return nil, err
		}
	}
	e.kafka, err = testinfra.StartKafka(ctx, testinfra.KafkaOptions{
		Partitions: partitions,
		JVMArgs:    kafkaJVMArgs,
		Properties: map[string]string{"num.network.threads": "2", "num.io.threads": "4"},
	})
	if err != nil {
		e.close()
		return nil, err
	}
	if e.kcl, err = e.kafka.NewClient(); err != nil {
		e.close()
		return nil, err
	}
	e.adm = kadm.NewClient(e.kcl)
	e.chPID, e.kafkaPID = e.ch.PID(), e.kafka.PID()
	return e, nil
}

func (e *env) close() {
	if e.registry != nil {
		e.registry.close()
	}
	if e.kcl != nil {
		e.kcl.Close()
	}
	if e.kafka != nil {
		_ = e.kafka.Close()
	}
	if e.ch != nil {
		_ = e.ch.Close()
	}
}

// query runs a query, retrying briefly (the server is busy during a run).
func (e *env) query(ctx context.Context, sql string) (string, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var out string
		if out, err = e.ch.Query(ctx, sql); err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	return "", err
}

// landed is the rows in the table's active parts: what count() returns,
// read from the parts' metadata rather than by scanning a column.
func (e *env) landed(ctx context.Context, table string) (int64, error) {
	out, err := e.query(ctx, "SELECT sum(rows) FROM system.parts WHERE database = 'default' AND table = '"+table+"' AND active")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

// committedLag is the records of topic not yet committed by group.
func (e *env) committedLag(ctx context.Context, group, topic string) (int64, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	committed, err := e.adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if !ok || c.At < 0 {
			lag += o.Offset
			return
		}
		lag += o.Offset - c.At
	})
	return lag, nil
}

// topicRecords is the number of records in topic (end offsets; the topics
// are never truncated).
func (e *env) topicRecords(ctx context.Context, topic string) (int64, error) {
	ends, err := e.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

func (e *env) createTopic(ctx context.Context, topic string, partitions int) error {
	return e.kafka.CreateTopic(ctx, topic, partitions)
}

// versions of the software under test.
func (e *env) versions(ctx context.Context) map[string]string {
	v := map[string]string{"kafka": testinfra.KafkaVersion}
	if out, err := e.query(ctx, "SELECT version()"); err == nil {
		v["clickhouse"] = strings.TrimSpace(out)
	}
	return v
}

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "rig: %s: %v\n", what, err)
		os.Exit(1)
	}
}

func warmCache(ctx context.Context, dir string, modules ...string) error {
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{CacheDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	for _, m := range modules {
		code, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		if _, err := rt.Load(ctx, filepath.Base(m), code); err != nil {
			return err
		}
	}
	return nil
}
