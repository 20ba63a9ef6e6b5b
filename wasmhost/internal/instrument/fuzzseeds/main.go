// Command fuzzseeds writes the generated seeds of package instrument's
// fuzz corpora (testdata/fuzz/<target>, Go's corpus format):
//
//   - random valid modules of wasm-smith, with the WebAssembly 2.0
//     features the host enables, with imports of functions, a memory and
//     globals (FuzzRewrite) and without, exporting everything
//     (FuzzRewriteRuns);
//   - invalid ones: wasm-smith's invalid function bodies, modules whose
//     LEB128 numbers take five bytes, and valid modules with one index
//     moved past the module's own, where the rewrite appends its globals,
//     functions and types (printed with `wasm-tools print`, the index
//     changed, assembled again with `wasm-tools parse`, which does not
//     validate);
//   - the .wasm files named on the command line (the repository's example
//     modules), up to -max-module bytes each, for FuzzRewrite.
//
// It needs wasm-tools (`cargo install wasm-tools`); go test does not. The
// generation is repeatable for a given -seed and wasm-tools version.
//
//	go run ./wasmhost/internal/instrument/fuzzseeds [-n 150] [modules.wasm ...]
package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// smithFlags keep wasm-smith to WebAssembly 2.0 (what wazero enables by
// default) and to small modules that run quickly.
var smithFlags = []string{
	"--gc-enabled", "false", "--exceptions-enabled", "false", "--tail-call-enabled", "false",
	"--threads-enabled", "false", "--memory64-enabled", "false", "--relaxed-simd-enabled", "false",
	"--custom-page-sizes-enabled", "false", "--wide-arithmetic-enabled", "false",
	"--shared-everything-threads-enabled", "false", "--custom-descriptors-enabled", "false",
	"--compact-imports-enabled", "false", "--extended-const-enabled", "false",
	"--max-memories", "1", "--max-table-elements", "1000", "--max-memory32-bytes", "1048576",
}

// availableImports are the imports wasm-smith may choose from: functions
// of several types (some the sandbox provides), a memory and globals, but
// no table, which the host refuses (a module must define its own), so that
// few seeds end at that refusal.
const availableImports = `(module
  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func (param i32)))
  (import "sluice" "log" (func (param i32 i32 i32)))
  (import "env" "f" (func (param f64 i64) (result f32)))
  (import "env" "memory" (memory 1 16))
  (import "env" "g" (global i32))
  (import "env" "gm" (global (mut i64))))`

func main() {
	dir := flag.String("dir", "wasmhost/internal/instrument/testdata/fuzz", "the corpora's directory")
	n := flag.Int("n", 150, "modules of each generated kind")
	seed := flag.Uint64("seed", 46, "seed of the random choices")
	maxModule := flag.Int("max-module", 256<<10, "largest module file to include")
	flag.Parse()
	g := &generator{dir: *dir, rng: rand.New(rand.NewPCG(*seed, 0))}
	if err := g.run(*n, *maxModule, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fuzzseeds:", err)
		os.Exit(1)
	}
}

type generator struct {
	dir         string
	rng         *rand.Rand
	written     map[string]int // target → files
	importFlags []string       // wasm-smith's flags for availableImports
}

func (g *generator) run(n, maxModule int, modules []string) error {
	g.written = map[string]int{}
	tmp, err := os.MkdirTemp("", "fuzzseeds-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	imports := filepath.Join(tmp, "imports.wasm")
	parse := exec.Command("wasm-tools", "parse", "-", "-o", imports)
	parse.Stdin = strings.NewReader(availableImports)
	if out, err := parse.CombinedOutput(); err != nil {
		return fmt.Errorf("wasm-tools parse: %v: %s", err, out)
	}
	g.importFlags = []string{"--available-imports", imports}
	kinds := []struct {
		name, target string
		flags        []string
	}{
		{"smith", "FuzzRewrite", g.importFlags},
		{"smith-noimports", "FuzzRewriteRuns", []string{"--max-imports", "0", "--export-everything", "true", "--min-funcs", "1"}},
		{"smith-invalid", "FuzzRewrite", append([]string{"--allow-invalid-funcs", "true"}, g.importFlags...)},
		{"smith-leb5", "FuzzRewrite", append([]string{"--min-uleb-size", "5"}, g.importFlags...)},
	}
	for _, k := range kinds {
		for i := 0; i < n; i++ {
			wasm, err := g.smith(k.flags)
			if err != nil {
				return err
			}
			if wasm == nil {
				continue // wasm-smith could not use this entropy
			}
			if err := g.write(k.target, k.name, wasm); err != nil {
				return err
			}
		}
	}
	for i := 0; i < n; {
		wasm, err := g.smith(g.importFlags)
		if err != nil {
			return err
		}
		if wasm == nil {
			continue
		}
		moved, err := g.moveIndex(wasm)
		if err != nil {
			return err
		}
		if moved == nil {
			continue // no index to move
		}
		i++
		if err := g.write("FuzzRewrite", "moved-index", moved); err != nil {
			return err
		}
	}
	for _, path := range modules {
		wasm, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(wasm) > maxModule {
			fmt.Fprintf(os.Stderr, "fuzzseeds: %s: %d bytes, over -max-module: skipped\n", path, len(wasm))
			continue
		}
		name := strings.TrimSuffix(filepath.Base(path), ".wasm")
		if err := g.write("FuzzRewrite", "module-"+name, wasm); err != nil {
			return err
		}
	}
	for target, files := range g.written {
		fmt.Printf("%s: %d seeds written\n", target, files)
	}
	return nil
}

// smith is a module wasm-smith makes of random entropy, nil if it could not.
func (g *generator) smith(flags []string) ([]byte, error) {
	entropy := make([]byte, 32+g.rng.IntN(3000))
	for i := range entropy {
		entropy[i] = byte(g.rng.UintN(256))
	}
	cmd := exec.Command("wasm-tools", append(append([]string{"smith"}, smithFlags...), flags...)...)
	cmd.Stdin = bytes.NewReader(entropy)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			return nil, nil
		}
		return nil, fmt.Errorf("wasm-tools smith: %v: %s", err, stderr.String())
	}
	return out.Bytes(), nil
}

// indexed are the instructions whose numeric index moveIndex may move,
// and how far: past the module's own, where the rewrite appends.
var indexed = regexp.MustCompile(`\b(global\.get|global\.set|call|ref\.func|local\.get|local\.set|local\.tee|br|br_if|table\.get|table\.set|elem\.drop|data\.drop) ([0-9]+)\b|\(type ([0-9]+)\)`)

// moveIndex is wasm with one index of one instruction raised by 1 to 40,
// or nil if its text has none.
func (g *generator) moveIndex(wasm []byte) ([]byte, error) {
	printer := exec.Command("wasm-tools", "print")
	printer.Stdin = bytes.NewReader(wasm)
	text, err := printer.Output()
	if err != nil {
		return nil, fmt.Errorf("wasm-tools print: %w", err)
	}
	// Only in function bodies: the lines after the first "(func".
	body := bytes.Index(text, []byte("\n  (func"))
	if body < 0 {
		return nil, nil
	}
	matches := indexed.FindAllSubmatchIndex(text[body:], -1)
	if len(matches) == 0 {
		return nil, nil
	}
	m := matches[g.rng.IntN(len(matches))]
	lo, hi := m[4], m[5]
	if lo < 0 {
		lo, hi = m[6], m[7]
	}
	lo, hi = lo+body, hi+body
	v, _ := strconv.Atoi(string(text[lo:hi]))
	moved := append(append(append([]byte{}, text[:lo]...), strconv.Itoa(v+1+g.rng.IntN(40))...), text[hi:]...)
	parse := exec.Command("wasm-tools", "parse", "-")
	parse.Stdin = bytes.NewReader(moved)
	var stderr bytes.Buffer
	parse.Stderr = &stderr
	out, err := parse.Output()
	if err != nil {
		return nil, nil // e.g. a label the text format names; try another
	}
	return out, nil
}

// write stores wasm as a seed of target, in Go's corpus format, named by
// its kind and hash.
func (g *generator) write(target, kind string, wasm []byte) error {
	dir := filepath.Join(g.dir, target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sum := sha256.Sum256(wasm)
	name := fmt.Sprintf("%s-%x", kind, sum[:8])
	content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", wasm)
	g.written[target]++
	return os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)
}
