// Command cbuild compiles a C guest module (a directory of .c files using
// guest-sdk/c) with the flags the tests and benchmarks use:
//
//	go run ./internal/wasmbuild/cbuild -o examples/log-normalize-c/log-normalize-c.wasm examples/log-normalize-c
//
// -native builds the shared library of the same sources instead.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

func main() {
	out := flag.String("o", "", "output file (required)")
	native := flag.Bool("native", false, "build a native shared library instead of a wasm module")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: cbuild [-native] -o out.wasm dir")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	target := wasmbuild.Wasm
	if *native {
		target = wasmbuild.Native
	}
	if err := wasmbuild.BuildC(context.Background(), target, flag.Arg(0), *out); err != nil {
		fmt.Fprintln(os.Stderr, "cbuild:", err)
		os.Exit(1)
	}
}
