// Command configdoc writes docs/config.md from the config structs:
//
//	go run ./internal/configdoc/cmd/configdoc
//
// It runs from anywhere inside the module (go generate ./internal/configdoc
// runs it); -o writes elsewhere, "-" to standard output.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluicehq/sluice/internal/configdoc"
)

func main() {
	out := flag.String("o", "", "output file (default: docs/config.md in the module)")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "configdoc:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	doc, err := configdoc.Generate(root)
	if err != nil {
		return err
	}
	switch out {
	case "-":
		_, err = os.Stdout.Write(doc)
		return err
	case "":
		out = filepath.Join(root, filepath.FromSlash(configdoc.File))
	}
	return os.WriteFile(out, doc, 0o644)
}

// moduleRoot is the nearest directory at or above the working directory
// that holds a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
