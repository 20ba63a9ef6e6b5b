package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/records"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// repeated is a flag that may be given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ", ") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

func cmdModuleTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("module test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage:\n  %s\n\n%s\nFlags:\n", moduleTestCommand, moduleTestDoc)
		fs.PrintDefaults()
	}
	modulePath := fs.String("module", "", "the module (.wasm)")
	inputPath := fs.String("input", "", "records, one JSON line each (- for standard input)")
	var tables, params repeated
	fs.Var(&tables, "table", "CREATE TABLE statement of a target table (repeatable, in pipeline order)")
	fs.Var(&params, "param", "module parameter key=value (repeatable)")
	batchSize := fs.Int("batch", 100, "records per batch")
	topic := fs.String("topic", "test", "topic the records come from")
	timestamp := fs.Int64("timestamp", 0, "Kafka timestamp (ms since the epoch) of records that give none; 0: now")
	deadline := fs.Duration("deadline", wasmhost.DefaultDeadline, "per-batch deadline")
	memory := fs.Uint64("memory", wasmhost.DefaultMemoryBytes, "memory cap of the module, bytes")
	logLevel := fs.String("log-level", "error", "least level of the module's log lines to show on standard error (its stderr is warn, its stdout info)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *modulePath == "" || *inputPath == "" || len(tables) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sluice module test: -module, -input and at least one -table are required")
		return 2
	}
	if *batchSize < 1 {
		fmt.Fprintln(stderr, "sluice module test: -batch must be at least 1")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "sluice module test:", err)
		return 1
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return fail(err)
	}
	initCfg := wasmhost.InitConfig{Params: map[string]string{}}
	var blocks []*clickhouse.Block
	var printers []*rowPrinter
	for _, ddl := range tables {
		name, cols, err := parseCreateTable(ddl)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		t, err := clickhouse.NewTable("default", name, cols)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		p, err := newRowPrinter(name, t.Insert)
		if err != nil {
			return fail(fmt.Errorf("-table: %w", err))
		}
		ts := wasmhost.TableSchema{Name: name}
		for _, c := range t.Insert {
			ts.Columns = append(ts.Columns, wasmhost.ColumnSchema{Name: c.Name, Type: c.Type})
		}
		initCfg.Tables = append(initCfg.Tables, ts)
		blocks = append(blocks, t.NewBlock())
		printers = append(printers, p)
	}
	for _, kv := range params {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return fail(fmt.Errorf("-param %q: want key=value", kv))
		}
		initCfg.Params[k] = v
	}
	if *timestamp == 0 {
		*timestamp = time.Now().UnixMilli()
	}
	recs, lines, err := readRecords(*inputPath, *timestamp)
	if err != nil {
		return fail(err)
	}
	wasm, err := os.ReadFile(*modulePath)
	if err != nil {
		return fail(err)
	}

	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: log,
		Limits: wasmhost.Limits{MemoryBytes: *memory, Deadline: *deadline}})
	if err != nil {
		return fail(err)
	}
	defer rt.Close(ctx)
	mod, err := rt.Load(ctx, *modulePath, wasm)
	if err != nil {
		return fail(err)
	}
	r := &moduleRunner{mod: mod, init: initCfg, blocks: blocks, printers: printers, out: bufio.NewWriter(stdout)}
	defer r.out.Flush()
	if r.inst, err = mod.Instantiate(ctx, initCfg); err != nil {
		return fail(err)
	}
	defer func() { r.inst.Close(ctx) }()
	for start := 0; start < len(recs); start += *batchSize {
		end := min(start+*batchSize, len(recs))
		b := &wasmhost.Batch{Topic: *topic, Records: recs[start:end]}
		if err := r.run(ctx, b, lines[start:end]); err != nil {
			return fail(err)
		}
	}
	return 0
}

// readRecords reads the JSON-lines input: a record envelope per line, or
// any other line as a record's value. It returns the records and their
// line numbers (1-based). Blank lines are skipped.
func readRecords(path string, defaultTs int64) ([]wasmhost.Record, []int, error) {
	var f io.Reader = os.Stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer file.Close()
		f = file
	}
	recs, lines, err := records.ReadJSONL(f, defaultTs)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return recs, lines, nil
}
