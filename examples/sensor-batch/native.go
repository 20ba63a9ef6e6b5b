//go:build unix

package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	sluice "github.com/sluicehq/sluice/guest-sdk/go"
)

// main, natively, runs the module's handler on the host's payloads in
// process, as the wasm exports run it, so that the module is measured
// natively beside its wasm build (wasmhost's BenchmarkSensorBatchSDKs):
//
//	sensor-batch PAYLOADS
//
// PAYLOADS holds the init payload and then the batch payloads, each after
// its length as a little-endian u32, as the host encodes them. The driver
// initialises the handler, runs every batch once, and prints "ready ROWS
// CALLS" (the rows of one pass). Then, for each line "run N" on standard
// input, it runs N calls, cycling through the batches, checks each
// output's framing and counts its rows, as the host does, and prints "ROWS
// CPU_NS WALL_NS": the rows written and the process's CPU and wall time
// for the N calls. It ends at the end of its input.
func main() {
	if err := drive(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sensor-batch:", err)
		os.Exit(1)
	}
}

func drive(args []string, in io.Reader, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: sensor-batch PAYLOADS (natively, this command drives the module; build it for wasip1 to run it in sluice)")
	}
	frames, err := readFrames(args[0])
	if err != nil {
		return err
	}
	if len(frames) < 2 {
		return fmt.Errorf("%s: want an init payload and at least one batch, have %d payloads", args[0], len(frames))
	}
	inst := sluice.NewInstance(&module{})
	if msg := inst.Init(frames[0]); msg != "" {
		return fmt.Errorf("init refused: %s", msg)
	}
	batches := frames[1:]
	run := func(i int) (int, error) {
		return countRows(inst.Transform(batches[i]), batches[i])
	}
	rows := 0
	for i := range batches {
		n, err := run(i)
		if err != nil {
			return fmt.Errorf("batch %d: %w", i, err)
		}
		rows += n
	}
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "ready %d %d\n", rows, len(batches))
	if err := w.Flush(); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for next := 0; sc.Scan(); {
		arg, ok := strings.CutPrefix(sc.Text(), "run ")
		calls, err := strconv.Atoi(arg)
		if !ok || err != nil || calls < 0 {
			return fmt.Errorf("command %q, want \"run N\"", sc.Text())
		}
		rows := 0
		cpu0, wall0 := cpuTime(), time.Now()
		for range calls {
			n, err := run(next)
			if err != nil {
				return fmt.Errorf("batch %d: %w", next, err)
			}
			rows += n
			next = (next + 1) % len(batches)
		}
		wall, cpu := time.Since(wall0), cpuTime()-cpu0
		fmt.Fprintf(w, "%d %d %d\n", rows, cpu.Nanoseconds(), wall.Nanoseconds())
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return sc.Err()
}

// readFrames reads a file of payloads, each after its length as a
// little-endian u32.
func readFrames(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var frames [][]byte
	for len(b) > 0 {
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > uint64(len(b)-4) {
			return nil, fmt.Errorf("%s: truncated after %d payloads", path, len(frames))
		}
		n := binary.LittleEndian.Uint32(b)
		frames = append(frames, b[4:4+n])
		b = b[4+n:]
	}
	return frames, nil
}

// countRows checks the output's framing against the batch it answers (one
// result per record, every length within the output) and returns its
// rows; a record error is an error: the driver's input is the workload's
// corpus, where no record fails.
func countRows(o, batch []byte) (int, error) {
	le := binary.LittleEndian
	// The batch payload starts with the topic (u32 length, bytes), the
	// partition (u32) and the record count (u32).
	if len(batch) < 12 || uint64(le.Uint32(batch)) > uint64(len(batch)-12) {
		return 0, errors.New("malformed batch payload")
	}
	records := int(le.Uint32(batch[4+le.Uint32(batch)+4:]))
	if len(o) < 4 || int(le.Uint32(o)) != records {
		return 0, fmt.Errorf("output does not have %d results", records)
	}
	p, rows := 4, 0
	for i := range records {
		if len(o)-p < 5 {
			return 0, fmt.Errorf("record %d: output ends early", i)
		}
		status, n := o[p], int(le.Uint32(o[p+1:]))
		p += 5
		if status == 1 {
			return 0, fmt.Errorf("record %d: %s", i, o[p:min(p+n, len(o))])
		}
		if status != 0 {
			return 0, fmt.Errorf("record %d: status %d", i, status)
		}
		for j := range n {
			if len(o)-p < 6 || uint64(le.Uint32(o[p+2:])) > uint64(len(o)-p-6) {
				return 0, fmt.Errorf("record %d row %d: output ends early", i, j)
			}
			p += 6 + int(le.Uint32(o[p+2:]))
		}
		rows += n
	}
	if p != len(o) {
		return 0, fmt.Errorf("%d bytes after the last record", len(o)-p)
	}
	return rows, nil
}

// cpuTime is the process's user and system CPU time, the GC's included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
