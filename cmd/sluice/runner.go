package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/wasmhost"
)

// moduleRunner runs batches through an instance and prints the results.
type moduleRunner struct {
	mod      *wasmhost.Module
	init     wasmhost.InitConfig
	inst     *wasmhost.Instance
	blocks   []*clickhouse.Block
	printers []*rowPrinter
	out      *bufio.Writer
}

// run transforms one batch. When the instance fails, it runs the batch's
// records again one by one on fresh instances, as the pipeline isolates the
// records that fail on their own, and reports the failure on those.
func (r *moduleRunner) run(ctx context.Context, b *wasmhost.Batch, lines []int) error {
	out, err := r.inst.Transform(ctx, b)
	if err == nil {
		for i := 0; ; i++ {
			res, ok := out.Next()
			if !ok {
				return nil
			}
			r.print(lines[i], &res)
		}
	}
	var trap *wasmhost.TrapError
	if !errors.As(err, &trap) {
		return err
	}
	if err := r.restart(ctx); err != nil {
		return err
	}
	if len(b.Records) == 1 {
		fmt.Fprintf(r.out, "%d: error: %s\n", lines[0], indentLines(trap.Err.Error()))
		return nil
	}
	for i := range b.Records {
		one := &wasmhost.Batch{Topic: b.Topic, Partition: b.Partition, Records: b.Records[i : i+1]}
		if err := r.run(ctx, one, lines[i:i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (r *moduleRunner) restart(ctx context.Context) error {
	_ = r.inst.Close(ctx)
	inst, err := r.mod.Instantiate(ctx, r.init)
	if err != nil {
		return err
	}
	r.inst = inst
	return nil
}

// print writes one record's result. Its rows are checked with the sink's
// decoder, as the pipeline does: a row that does not decode fails the
// record.
func (r *moduleRunner) print(line int, res *wasmhost.RecordResult) {
	if res.Err != "" {
		fmt.Fprintf(r.out, "%d: error: %s\n", line, indentLines(res.Err))
		return
	}
	if res.Rows() == 0 {
		fmt.Fprintf(r.out, "%d: (no rows)\n", line)
		return
	}
	var text []string
	for {
		table, row, ok := res.NextRow()
		if !ok {
			break
		}
		if table >= len(r.blocks) {
			fmt.Fprintf(r.out, "%d: error: row for table index %d; the module has %d tables\n", line, table, len(r.blocks))
			return
		}
		err := r.blocks[table].AppendRow(row)
		r.blocks[table].Reset()
		if err != nil {
			fmt.Fprintf(r.out, "%d: error: %v\n", line, err)
			return
		}
		s, err := r.printers[table].format(row)
		if err != nil {
			fmt.Fprintf(r.out, "%d: error: %v\n", line, err)
			return
		}
		text = append(text, s)
	}
	for _, s := range text {
		fmt.Fprintf(r.out, "%d: %s\n", line, s)
	}
}

// indentLines indents the lines after the first (a trap's wasm stack
// trace), so that every line that starts with a number starts a record.
func indentLines(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
