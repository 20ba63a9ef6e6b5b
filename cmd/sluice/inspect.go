package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/wasmhost"
)

func cmdModuleInspect(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("module inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "sluice module inspect: want one module file")
		return 2
	}
	path := fs.Arg(0)
	wasm, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	ctx := context.Background()
	rt, err := wasmhost.NewRuntime(ctx, wasmhost.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	defer rt.Close(ctx)
	info, err := rt.Inspect(ctx, path, wasm)
	if err != nil {
		fmt.Fprintln(stderr, "sluice module inspect:", err)
		return 1
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	fmt.Fprintf(w, "module:      %s\n", path)
	fmt.Fprintf(w, "size:        %d bytes\n", info.Size)
	fmt.Fprintf(w, "sha256:      %s\n", info.SHA256)
	if info.ABIVersion != 0 {
		fmt.Fprintf(w, "abi version: %d\n", info.ABIVersion)
	} else {
		fmt.Fprintf(w, "abi version: unknown (the module does not load)\n")
	}
	fmt.Fprintf(w, "imports:\n")
	for _, s := range info.Imports {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "exports:\n")
	for _, s := range info.Exports {
		fmt.Fprintf(w, "  %s\n", s)
	}
	fmt.Fprintf(w, "tables:      not in the binary: the host declares the target tables at init, and the module accepts or refuses them\n")
	if info.LoadErr != nil {
		fmt.Fprintf(w, "load:        refused: %v\n", info.LoadErr)
		return 1
	}
	fmt.Fprintf(w, "load:        ok with the default limits\n")
	return 0
}
