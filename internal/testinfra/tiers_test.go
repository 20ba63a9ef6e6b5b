package testinfra

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// serverHelper is a call that starts (or skips for) a real server.
var serverHelper = regexp.MustCompile(`\btestinfra\.(ClickHouseT|KafkaT|EachServer|EachClickHouse|StartClickHouse|StartKafka|SkipShort)\(`)

// TestServerTestsSayItInTheirFileName: a test file that starts a server
// through testinfra is named *_integration_test.go, so that the tier of a
// test shows in its file's name. The whole-binary suites of e2e/ and the
// benchmarks (*_bench_test.go) are tiers of their own.
func TestServerTestsSayItInTheirFileName(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	var wrong []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "e2e" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, "_integration_test.go") || strings.HasSuffix(name, "_bench_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if m := serverHelper.Find(src); m != nil {
			wrong = append(wrong, rel+" calls "+string(m))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range wrong {
		t.Errorf("%s: a test that starts a server goes in a *_integration_test.go file", w)
	}
}
