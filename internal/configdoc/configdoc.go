package configdoc

import (
	"bytes"
	_ "embed"
	"fmt"
	"reflect"
	"strings"

	"github.com/sluicehq/sluice/engine"
)

// File is the reference's path in the module.
const File = "docs/config.md"

// sectionOrder is the order of the sections; a new one goes after these.
var sectionOrder = []string{"kafka", "module", "clickhouse", "dead_letter", "observability", "admin", "tenants"}

//go:embed intro.md
var intro string

// Generate returns the contents of docs/config.md for engine.Config, reading
// the doc comments from the sources under moduleDir.
func Generate(moduleDir string) ([]byte, error) {
	keys, err := Keys(reflect.TypeFor[engine.Config](), moduleDir)
	if err != nil {
		return nil, err
	}
	return Markdown(keys), nil
}

// Markdown writes the reference of keys: the intro, the required keys, then
// each section's keys.
func Markdown(keys []Key) []byte {
	names := map[string]bool{}
	for _, k := range keys {
		names[k.Name] = true
	}
	secs := Sections(keys, sectionOrder)
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from the config structs' doc comments by `go generate ./internal/configdoc`: edit the comments, not this file. -->\n\n")
	b.WriteString(intro)
	b.WriteString("\nSections:")
	for i, s := range secs {
		sep := " ·"
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s [%s](#%s)", sep, s.Title, anchor(s.Title))
	}
	b.WriteString(".\n\n## Required keys\n\n| key | required |\n|---|---|\n")
	var ordered []Key
	for _, s := range secs {
		ordered = append(ordered, s.Keys...)
	}
	paths, when := Required(ordered)
	for i, p := range paths {
		w := when[i]
		if w == "" {
			w = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", p, w)
	}
	b.WriteString("\n")
	for _, s := range secs {
		fmt.Fprintf(&b, "## %s\n\n", s.Title)
		if s.Head != nil {
			fmt.Fprintf(&b, "*%s*\n\n", s.Head.Type)
			b.WriteString(docMarkdown(s.Head.Doc, s.Head.siblings, names))
		}
		for _, g := range groups(s.Keys) {
			writeEntry(&b, g, names)
		}
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// anchor is the id GitHub gives a heading.
func anchor(title string) string {
	return strings.ReplaceAll(strings.ToLower(title), " ", "-")
}
