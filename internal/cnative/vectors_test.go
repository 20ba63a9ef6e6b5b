package cnative

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// TestCSDKRowBinaryVectors builds guest-sdk/c/testdata/vectors.c natively
// with the C SDK and checks that it writes every value of
// guest-sdk/testdata/rowbinary.tsv as the file's bytes (ClickHouse's own,
// checked against the servers by sinks/clickhouse TestRowBinaryVectors),
// and that its range-checked time writers refuse what does not fit.
func TestCSDKRowBinaryVectors(t *testing.T) {
	wasmbuild.SkipShort(t)
	cc, err := wasmbuild.Clang()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	root := wasmbuild.RepoRoot()
	sdk := filepath.Join(root, wasmbuild.SDKDir)
	bin := filepath.Join(t.TempDir(), "vectors")
	build := exec.CommandContext(ctx, cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"+sdk, "-o", bin,
		filepath.Join(sdk, "testdata", "vectors.c"), filepath.Join(sdk, "sluice.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(build.Args, " "), err, out)
	}
	var stderr bytes.Buffer
	run := exec.CommandContext(ctx, bin)
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("vectors: %v\n%s", err, stderr.String())
	}
	want, err := os.ReadFile(filepath.Join(root, "guest-sdk", "testdata", "rowbinary.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	wrote := map[string]string{} // type and literal → hex
	refused := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		switch {
		case len(f) == 3 && f[0] == "refused":
			refused++
			if !strings.Contains(f[2], "time out of range") {
				t.Errorf("%s: message %q", f[1], f[2])
			}
		case len(f) == 3:
			wrote[f[0]+"\t"+f[1]] = f[2]
		default:
			t.Fatalf("vectors printed %q", line)
		}
	}
	n := 0
	for _, line := range strings.Split(string(want), "\n") {
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		n++
		f := strings.Split(line, "\t")
		key := f[0] + "\t" + f[1]
		got, ok := wrote[key]
		switch {
		case !ok:
			t.Errorf("%s %s: vectors.c does not write this vector", f[0], f[1])
		case got != f[2]:
			t.Errorf("%s %s: C SDK writes %s, ClickHouse %s", f[0], f[1], got, f[2])
		}
	}
	if len(wrote) != n || refused != 6 {
		t.Errorf("vectors.c wrote %d vectors (the file has %d) and refused %d times (want 6)", len(wrote), n, refused)
	}
}
