package configdoc

import (
	"encoding"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Key is one config key: where it is, what YAML it takes and what its Go
// doc comment says.
type Key struct {
	// Path is the key's full YAML path; a list's elements add "[]" and a
	// map's values ".<name>": "tenants[].pipelines[].topics".
	Path string
	// Name is the last element of Path.
	Name string
	// Type is the YAML the key takes: "string", "duration", "integer",
	// "list of strings", "object"…
	Type string
	// Doc is the field's Go doc comment, as go/ast gives it.
	Doc string
	// Field names the Go field: "engine.KafkaConfig.Brokers".
	Field string
	// Shared is set when the field has no comment of its own and shares the
	// comment of the field declared just above it, which names it
	// ("MaxBatchRecords and MaxBatchBytes bound…").
	Shared bool
	// siblings maps the Go names of the fields of the key's struct to their
	// YAML keys, so that the comment's mentions of them can be rewritten.
	siblings map[string]string
}

// Keys walks the struct type root as go.yaml.in/yaml/v3 decodes it and
// returns every key, depth first in declaration order, with the doc comments
// read from the sources of its packages under moduleDir. It fails, naming
// every one, if a field has no doc comment.
func Keys(root reflect.Type, moduleDir string) ([]Key, error) {
	modPath, err := modulePath(moduleDir)
	if err != nil {
		return nil, err
	}
	w := &walker{moduleDir: moduleDir, modPath: modPath, pkgs: map[string]map[string]map[string]fieldDoc{}}
	if err := w.walk(root, ""); err != nil {
		return nil, err
	}
	if len(w.undocumented) > 0 {
		return nil, fmt.Errorf("config fields without a doc comment; write one that states the option's meaning and default:\n\t%s",
			strings.Join(w.undocumented, "\n\t"))
	}
	return w.keys, nil
}

type walker struct {
	moduleDir, modPath string
	// pkgs caches each package's field comments: type → field → comment.
	pkgs         map[string]map[string]map[string]fieldDoc
	keys         []Key
	undocumented []string
}

type fieldDoc struct {
	text   string
	shared bool
	// problem says why a field counts as undocumented.
	problem string
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	yamlUnmarshaler     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (w *walker) walk(t reflect.Type, prefix string) error {
	if t.Name() == "" {
		return fmt.Errorf("%s: an anonymous struct type has no doc comments to read; declare a named type", orTop(prefix))
	}
	docs, err := w.structDocs(t)
	if err != nil {
		return err
	}
	siblings := map[string]string{}
	for f := range fields(t) {
		if name, inline := yamlName(f); !inline {
			siblings[f.Name] = name
		}
	}
	for f := range fields(t) {
		name, inline := yamlName(f)
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if inline {
			if ft.Kind() != reflect.Struct {
				return fmt.Errorf("%s.%s: inline needs a struct", t, f.Name)
			}
			if err := w.walk(ft, prefix); err != nil {
				return err
			}
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		goName := t.String() + "." + f.Name
		typ, err := yamlType(ft)
		if err != nil {
			return fmt.Errorf("%s (%s): %w", path, goName, err)
		}
		d, ok := docs[f.Name]
		switch {
		case !ok:
			w.undocumented = append(w.undocumented, fmt.Sprintf("%s (%s): not found in the sources", path, goName))
		case d.problem != "":
			w.undocumented = append(w.undocumented, fmt.Sprintf("%s (%s): %s", path, goName, d.problem))
		}
		w.keys = append(w.keys, Key{Path: path, Name: name, Type: typ, Doc: d.text, Field: goName, Shared: d.shared, siblings: siblings})
		switch {
		case ft.Kind() == reflect.Struct && ft != durationType:
			err = w.walk(ft, path)
		case (ft.Kind() == reflect.Slice || ft.Kind() == reflect.Array) && deref(ft.Elem()).Kind() == reflect.Struct:
			err = w.walk(deref(ft.Elem()), path+"[]")
		case ft.Kind() == reflect.Map && deref(ft.Elem()).Kind() == reflect.Struct:
			err = w.walk(deref(ft.Elem()), path+".<name>")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fields yields the struct fields YAML decodes: exported or embedded, and
// not tagged "-".
func fields(t reflect.Type) func(func(reflect.StructField) bool) {
	return func(yield func(reflect.StructField) bool) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous || f.Tag.Get("yaml") == "-" {
				continue
			}
			if !yield(f) {
				return
			}
		}
	}
}

// yamlName is the key go.yaml.in/yaml/v3 gives a field: its tag's name, else
// the field name in lower case.
func yamlName(f reflect.StructField) (name string, inline bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	inline = slices.Contains(strings.Split(opts, ","), "inline")
	if name == "" {
		name = strings.ToLower(f.Name)
	}
	return name, inline
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// yamlType names the YAML a Go type decodes from.
func yamlType(t reflect.Type) (string, error) {
	t = deref(t)
	if t == durationType {
		return "duration", nil
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return "", fmt.Errorf("%s decodes itself; say in configdoc.yamlType what YAML it takes", t)
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "bool", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer", nil
	case reflect.Float32, reflect.Float64:
		return "number", nil
	case reflect.Struct:
		return "object", nil
	case reflect.Slice, reflect.Array:
		elem, err := yamlType(t.Elem())
		if err != nil {
			return "", err
		}
		return "list of " + plural(elem), nil
	case reflect.Map:
		key, err := yamlType(t.Key())
		if err != nil {
			return "", err
		}
		elem, err := yamlType(t.Elem())
		if err != nil {
			return "", err
		}
		return "map of " + key + " to " + elem, nil
	}
	return "", fmt.Errorf("%s has no YAML type configdoc knows", t)
}

func plural(s string) string {
	if head, tail, ok := strings.Cut(s, " "); ok {
		return plural(head) + " " + tail // "lists of strings"
	}
	return s + "s"
}

// structDocs returns the field comments of t's declaration.
func (w *walker) structDocs(t reflect.Type) (map[string]fieldDoc, error) {
	pkg := t.PkgPath()
	if _, ok := w.pkgs[pkg]; !ok {
		rel, ok := strings.CutPrefix(pkg, w.modPath)
		if !ok || rel != "" && rel[0] != '/' {
			return nil, fmt.Errorf("%s is outside module %s: its sources are not read", t, w.modPath)
		}
		docs, err := packageDocs(filepath.Join(w.moduleDir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, fmt.Errorf("read the comments of %s: %w", pkg, err)
		}
		w.pkgs[pkg] = docs
	}
	docs, ok := w.pkgs[pkg][t.Name()]
	if !ok {
		return nil, fmt.Errorf("%s: no struct declaration of %s in the sources", pkg, t.Name())
	}
	return docs, nil
}

// packageDocs parses the Go files of a package directory (its in-package
// tests included) and returns, for every struct type, its fields' comments.
func packageDocs(dir string) (map[string]map[string]fieldDoc, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	out := map[string]map[string]fieldDoc{}
	for _, path := range paths {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(f.Name.Name, "_test") {
			continue // an external test package
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				if st, ok := ts.Type.(*ast.StructType); ok {
					out[ts.Name.Name] = structFieldDocs(fset, st)
				}
			}
		}
	}
	return out, nil
}

// structFieldDocs reads each field's doc comment. A field without one
// shares the comment of the field declared on the line just above it if
// that comment names it, as in
//
//	// User and Password authenticate.
//	User     string
//	Password string
func structFieldDocs(fset *token.FileSet, st *ast.StructType) map[string]fieldDoc {
	out := map[string]fieldDoc{}
	var prev fieldDoc
	prevEnd := -1
	for _, f := range st.Fields.List {
		names := []string{}
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		if len(f.Names) == 0 { // embedded: the type's name
			names = append(names, embeddedName(f.Type))
		}
		line := fset.Position(f.Pos()).Line
		if f.Doc != nil {
			line = fset.Position(f.Doc.Pos()).Line
		}
		d := fieldDoc{text: strings.TrimSpace(f.Doc.Text())}
		for i, name := range names {
			d := d
			if i > 0 {
				d.shared = d.text != ""
			}
			switch {
			case d.text != "":
			case prev.text != "" && line == prevEnd+1:
				if mentions(prev.text, name) {
					d = fieldDoc{text: prev.text, shared: true}
				} else {
					d.problem = "no doc comment, and the comment of the field above does not name " + name
				}
			default:
				d.problem = "no doc comment"
			}
			out[name] = d
			prev = d
		}
		prevEnd = fset.Position(f.End()).Line
	}
	return out
}

func embeddedName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return embeddedName(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// mentions reports whether text has name as a word.
func mentions(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !isIdent(text[j-1])) && (end == len(text) || !isIdent(text[end])) {
			return true
		}
		i = end
	}
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// modulePath reads the module line of moduleDir/go.mod.
func modulePath(moduleDir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(moduleDir, "go.mod"))
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", moduleDir)
}

func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}
