// Command hostile writes the hand-assembled hostile modules of package
// wasmtest, the ones no guest toolchain would produce, into a directory
// (examples/adversarial/build runs it):
//
//	go run ./wasmhost/internal/wasmtest/hostile -out bin/adversarial
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

func main() {
	out := flag.String("out", "bin/adversarial", "directory for the .wasm files")
	flag.Parse()
	modules := map[string][]byte{
		"table-bomb":      wasmtest.TableBomb(),
		"table-grow":      wasmtest.TableGrow(wasmtest.Table{Min: 1}),
		"stdout-flood":    wasmtest.StdoutFlood(64, 1<<20, (64<<16-1<<20)/8),
		"memory-grow":     wasmtest.MemoryGrow(),
		"stack-overflow":  wasmtest.StackOverflow(),
		"bomb-nesting":    wasmtest.Funcs(1, wasmtest.Nested(100_000, nil)),
		"bomb-br-table":   wasmtest.Funcs(1, wasmtest.Nested(64, wasmtest.BrTable(100_000, 64))),
		"bomb-functions":  wasmtest.Funcs(500_000, nil),
		"bomb-one-func":   wasmtest.Funcs(1, wasmtest.StraightCode(8<<20)),
		"bomb-compile-me": wasmtest.Funcs(2000, wasmtest.Nested(1000, nil)),

		"undeclared-globals-abi-version": wasmtest.UndeclaredGlobals("sluice_abi_version"),
		"undeclared-globals-init":        wasmtest.UndeclaredGlobals("sluice_init"),
		"undeclared-globals-transform":   wasmtest.UndeclaredGlobals("sluice_transform"),
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
	for _, name := range slices.Sorted(maps.Keys(modules)) {
		wasm := modules[name]
		path := filepath.Join(*out, name+".wasm")
		if err := os.WriteFile(path, wasm, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "hostile:", err)
			os.Exit(1)
		}
		fmt.Println(path)
	}
}
