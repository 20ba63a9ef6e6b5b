package main

import (
	"bytes"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

//go:embed templates
var templates embed.FS

const initUsage = `Usage:
  sluice module init [-sdk DIR] [-name NAME] go|rust|c|ts DIR

init writes a new module into DIR (which must not exist or be empty): its
source, build.sh (the build command), table.sql (the target table),
sample.jsonl, expected.txt, and test.sh, which builds the module and checks
what 'sluice module test' prints for the sample against expected.txt.

-sdk is a sluice source checkout, whose guest-sdk/ the module depends on;
by default $SLUICE_SDK, else the checkout that contains the working
directory.
`

// templateLang is what init writes for one language.
type templateLang struct {
	dir      string // under templates/
	name     string
	source   string
	sdkDoc   string
	nameRule func(string) string // the package name the language accepts
}

var templateLangs = map[string]templateLang{
	"go": {dir: "go", name: "Go", source: "`main.go`, `go.mod`", nameRule: goModuleName,
		sdkDoc: "guest-sdk/go, required as `github.com/sluicehq/sluice/guest-sdk/go` with a `replace` to the checkout (go.mod)."},
	"rust": {dir: "rust", name: "Rust", source: "`src/lib.rs`, `Cargo.toml`", nameRule: crateName,
		sdkDoc: "guest-sdk/rust, the crate `sluice-guest` by path (Cargo.toml); Debian's cargo 1.63 builds it for wasm32-wasi."},
	"c": {dir: "c", name: "C", source: "`module.c`", nameRule: crateName,
		sdkDoc: "guest-sdk/c, sluice.h and sluice.c compiled in by build.sh (SLUICE_C_SDK overrides the path)."},
	"ts": {dir: "ts", name: "TypeScript (AssemblyScript)", source: "`assembly/index.ts`, `package.json`", nameRule: crateName,
		sdkDoc: "guest-sdk/assemblyscript, the npm package `@sluicehq/sluice-guest` from the checkout (`file:` in package.json), with assemblyscript 0.28.20."},
}

func cmdModuleInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("module init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, initUsage) }
	sdk := fs.String("sdk", "", "sluice source checkout the module depends on (default $SLUICE_SDK, else the one around the working directory)")
	name := fs.String("name", "", "the module's package name (default: DIR's base name)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 2
	}
	lang, ok := templateLangs[fs.Arg(0)]
	if !ok {
		fmt.Fprintf(stderr, "sluice module init: unknown language %q: want go, rust, c or ts\n", fs.Arg(0))
		return 2
	}
	dir := fs.Arg(1)
	if err := moduleInit(lang, dir, *sdk, *name); err != nil {
		fmt.Fprintln(stderr, "sluice module init:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote a %s module in %s: run %s to build and test it\n", lang.name, dir, filepath.Join(dir, "test.sh"))
	return 0
}

func moduleInit(lang templateLang, dir, sdk, name string) error {
	sdk, err := findSDK(sdk)
	if err != nil {
		return err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s exists and is not empty", dir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if name == "" {
		name = filepath.Base(abs)
	}
	name = lang.nameRule(name)
	data := map[string]string{
		"Name": name, "SDK": sdk, "LangName": lang.name, "Source": lang.source, "SDKDoc": lang.sdkDoc,
		"CrateFile": strings.ReplaceAll(name, "-", "_"),
	}
	files := map[string][]byte{}
	for _, sub := range []string{"common", lang.dir} {
		root := path.Join("templates", sub)
		err := fs.WalkDir(templates, root, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			text, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			t, err := template.New(p).Option("missingkey=error").Parse(string(text))
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := t.Execute(&b, data); err != nil {
				return err
			}
			files[strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")] = b.Bytes()
			return nil
		})
		if err != nil {
			return err
		}
	}
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, b, mode); err != nil {
			return err
		}
	}
	return nil
}

// findSDK returns the absolute path of a sluice checkout: dir, else
// $SLUICE_SDK, else the one that contains the working directory.
func findSDK(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("SLUICE_SDK")
	}
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		for d := wd; ; d = filepath.Dir(d) {
			if isSDK(d) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				return "", errors.New("no sluice checkout found: pass -sdk DIR (or set SLUICE_SDK) to a checkout of the sluice repository, whose guest-sdk/ the module depends on")
			}
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if !isSDK(abs) {
		return "", fmt.Errorf("-sdk %s: not a sluice checkout (no guest-sdk/ABI.md)", dir)
	}
	return abs, nil
}

func isSDK(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "guest-sdk", "ABI.md"))
	return err == nil
}

var nonName = regexp.MustCompile(`[^a-z0-9-]+`)

// crateName makes s a Cargo/npm package name: lower case, digits and dashes.
func crateName(s string) string {
	s = strings.Trim(nonName.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		s = "module-" + s
	}
	return strings.TrimSuffix(s, "-")
}

// goModuleName makes s a Go module path of one element.
func goModuleName(s string) string { return crateName(s) }
