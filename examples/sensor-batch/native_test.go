//go:build unix

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/sensor-batch/table/tabletest"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

// TestNativeDriver runs the native driver on the golden corpus in two
// batches: "ready" reports the rows of one pass, and "run N" the rows of N
// calls, cycling through the batches; a refused init, a record error and a
// bad command end it with an error.
func TestNativeDriver(t *testing.T) {
	msgs := tabletest.ReadCorpus(t, "testdata/avro.bin")
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.Table18)
	golden := len(tabletest.Rows(t, in, msgs))
	first := len(tabletest.Rows(t, tabletest.NewInstance(t, &module{}, nil, tabletest.Table18), msgs[:5]))
	write := func(init []byte, batches ...[]byte) string {
		var b []byte
		for _, p := range append([][]byte{init}, batches...) {
			b = binary.LittleEndian.AppendUint32(b, uint32(len(p)))
			b = append(b, p...)
		}
		path := filepath.Join(t.TempDir(), "payloads")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	init := sluicetest.InitPayload(nil, []sluicetest.Table{tabletest.TableModern})
	batch := func(msgs [][]byte) []byte { return sluicetest.BatchPayload("sensor", 0, tabletest.Records(msgs)) }
	path := write(init, batch(msgs[:5]), batch(msgs[5:]))

	var out bytes.Buffer
	if err := drive([]string{path}, strings.NewReader("run 3\nrun 0\n"), &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != fmt.Sprintf("ready %d 2", golden) {
		t.Fatalf("output %q, want ready %d 2 and two results", out.String(), golden)
	}
	var rows, cpu, wall int64
	if _, err := fmt.Sscan(lines[1], &rows, &cpu, &wall); err != nil || rows != int64(golden+first) || wall <= 0 || cpu < 0 {
		t.Errorf("run 3: %q (%v), want %d rows (both batches, then the first)", lines[1], err, golden+first)
	}
	if !strings.HasPrefix(lines[2], "0 ") {
		t.Errorf("run 0: %q", lines[2])
	}

	for _, tt := range []struct {
		name, path, input, want string
	}{
		{"refused", write(sluicetest.InitPayload(nil, nil), batch(msgs)), "", "init refused"},
		{"record error", write(init, batch([][]byte{{0, 0, 0, 0, 2}})), "", "record 0: avro: schema id 2"},
		{"bad command", path, "go\n", `command "go"`},
		{"one payload", write(init), "", "at least one batch"},
	} {
		err := drive([]string{tt.path}, strings.NewReader(tt.input), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}
