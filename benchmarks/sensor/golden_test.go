package sensor

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the modules' golden test data")

// goldenDir is the test data of the sensor-batch modules, which are their
// own Go modules and cannot import this package.
const goldenDir = "../../examples/sensor-batch/testdata"

func goldenFiles() map[string][]byte {
	var avro, js []byte
	rows := []string{GoldenRowsHeader}
	for _, b := range GoldenBatches {
		send := DrainSendTsUs(b)
		avro = AppendFramed(avro, AppendAvro(nil, b, send))
		js = AppendFramed(js, AppendJSON(nil, b, send))
		h := MakeBatch(b, send)
		for s := 0; s < EventsPerBatch; s++ {
			e := MakeEvent(b, s)
			if r, ok := Transform(&h, &e); ok {
				rows = append(rows, RowText(&r))
			}
		}
	}
	return map[string][]byte{
		"avro.bin": avro,
		"json.bin": js,
		"rows.txt": []byte(strings.Join(rows, "\n") + "\n"),
	}
}

// TestGolden keeps examples/sensor-batch/testdata in step with the corpus
// and the reference transform; run with -update to rewrite it.
func TestGolden(t *testing.T) {
	for name, want := range goldenFiles() {
		path := filepath.Join(goldenDir, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./benchmarks/sensor -run TestGolden -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test ./benchmarks/sensor -run TestGolden -update", path)
		}
	}
}

func TestFramedRoundTrip(t *testing.T) {
	msgs, err := SplitFramed(goldenFiles()["avro.bin"])
	if err != nil || len(msgs) != len(GoldenBatches) {
		t.Fatalf("%d messages, %v", len(msgs), err)
	}
	for i, b := range GoldenBatches {
		if !bytes.Equal(msgs[i], AppendAvro(nil, b, DrainSendTsUs(b))) {
			t.Errorf("message %d differs", i)
		}
	}
	if _, err := SplitFramed([]byte{5, 0, 0, 0, 1}); err == nil {
		t.Error("a truncated message was accepted")
	}
}
