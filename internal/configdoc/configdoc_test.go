package configdoc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/engine"
)

const moduleDir = "../.."

// TestConfigReferenceIsCurrent fails when docs/config.md is not what the
// config structs and their comments generate, or when a field has no doc
// comment.
func TestConfigReferenceIsCurrent(t *testing.T) {
	want, err := Generate(moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(moduleDir, File))
	if err != nil {
		t.Fatalf("%v: run go generate ./internal/configdoc", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./internal/configdoc (or go tool -modfile=tools/go.mod task docs:config) and commit it; %s", File, firstDiff(got, want))
	}
}

func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d is\n\t%q\nand should be\n\t%q", i+1, gl, wl)
		}
	}
	return "they differ"
}

// TestEveryKeyDecodes writes a config with every key the reference lists,
// a value of its documented type in each, and decodes it as LoadConfig does,
// unknown keys being errors: the paths and types are the ones YAML takes.
func TestEveryKeyDecodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		into any
	}{
		{"engine.Config", &engine.Config{}},
		{"fixture", &fixtureConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := Keys(reflect.TypeOf(tc.into).Elem(), moduleDir)
			if err != nil {
				t.Fatal(err)
			}
			doc := map[string]any{}
			for _, k := range keys {
				setPath(t, doc, k.Path, sample(t, k.Type))
			}
			raw, err := yaml.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			dec := yaml.NewDecoder(bytes.NewReader(raw))
			dec.KnownFields(true)
			if err := dec.Decode(tc.into); err != nil {
				t.Fatalf("decode every listed key: %v\n%s", err, raw)
			}
			if reflect.ValueOf(tc.into).Elem().IsZero() {
				t.Fatal("nothing was decoded")
			}
		})
	}
}

// sample is a value of a documented YAML type; nil for an object or a list
// or map of objects, which the keys under it fill in.
func sample(t *testing.T, typ string) any {
	if elem, ok := strings.CutPrefix(typ, "list of "); ok {
		if v := sample(t, singular(elem)); v != nil {
			return []any{v}
		}
		return nil
	}
	if elem, ok := strings.CutPrefix(typ, "map of string to "); ok {
		if v := sample(t, elem); v != nil {
			return map[string]any{"k": v}
		}
		return nil
	}
	switch typ {
	case "string":
		return "x"
	case "duration":
		return "1s"
	case "integer":
		return 1
	case "number":
		return 0.5
	case "bool":
		return true
	case "object":
		return nil
	}
	t.Fatalf("no sample for type %q", typ)
	return nil
}

// singular undoes plural: "strings" → "string", "lists of strings" → "list
// of strings".
func singular(s string) string {
	head, tail, ok := strings.Cut(s, " ")
	head = strings.TrimSuffix(head, "s")
	if ok {
		return head + " " + tail
	}
	return head
}

// setPath sets a dotted key path in a YAML document; "name[]" is a list of
// one object.
func setPath(t *testing.T, doc map[string]any, path string, v any) {
	head, rest, nested := strings.Cut(path, ".")
	list := strings.HasSuffix(head, "[]")
	head = strings.TrimSuffix(head, "[]")
	if !nested {
		if v != nil {
			doc[head] = v
		}
		return
	}
	if list {
		l, _ := doc[head].([]any)
		if l == nil {
			l = []any{map[string]any{}}
			doc[head] = l
		}
		setPath(t, l[0].(map[string]any), rest, v)
		return
	}
	m, _ := doc[head].(map[string]any)
	if m == nil {
		m = map[string]any{}
		doc[head] = m
	}
	setPath(t, m, rest, v)
}

func TestKeysOfEachKind(t *testing.T) {
	keys, err := Keys(reflect.TypeFor[fixtureConfig](), moduleDir)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		path, typ, doc string
		shared         bool
	}{
		{"name", "string", "Name is a string. Required.", false},
		{"wait", "duration", "Wait is a duration. Default 1s.", false},
		{"ratio", "number", "Ratio is a number; unset, it takes the default 0.5.", false},
		{"items", "list of objects", "Items are a list of objects.", false},
		{"items[].id", "string", "ID names the item. Required with items.", false},
		{"items[].tags", "list of strings", "Tags are strings.", false},
		{"items[].on", "bool", "On is a bool.", false},
		{"extra", "integer", "Extra is inlined.", false},
		{"labels", "map of string to string", "Labels map names to values.", false},
		{"lo", "integer", "Lo and Hi bound a range.", false},
		{"hi", "integer", "Lo and Hi bound a range.", true},
	}
	if len(keys) != len(want) {
		var got []string
		for _, k := range keys {
			got = append(got, k.Path)
		}
		t.Fatalf("keys %q, want %d of them", got, len(want))
	}
	for i, w := range want {
		k := keys[i]
		if k.Path != w.path || k.Type != w.typ || k.Doc != w.doc || k.Shared != w.shared {
			t.Errorf("key %d = {%s %s %q shared=%t}, want {%s %s %q shared=%t}", i, k.Path, k.Type, k.Doc, k.Shared, w.path, w.typ, w.doc, w.shared)
		}
	}
	paths, when := Required(keys)
	if got, want := fmt.Sprint(paths, when), "[name items[].id] [ with items]"; got != want {
		t.Errorf("Required = %s, want %s", got, want)
	}
}

// TestUndocumentedFieldsFail: a field without a comment of its own passes
// only under a comment, on the line above, that names it.
func TestUndocumentedFieldsFail(t *testing.T) {
	_, err := Keys(reflect.TypeFor[fixtureUndocumented](), moduleDir)
	if err == nil {
		t.Fatal("no error for undocumented fields")
	}
	for _, want := range []string{
		"hi (configdoc.fixtureUndocumented.Hi): no doc comment, and the comment of the field above does not name Hi",
		"next (configdoc.fixtureUndocumented.Next): no doc comment",
		"alone (configdoc.fixtureUndocumented.Alone): no doc comment",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\ndoes not say %q", err, want)
		}
	}
	for _, documented := range []string{"(configdoc.fixtureUndocumented.Lo)", "(configdoc.fixtureUndocumented.Documented)"} {
		if strings.Contains(err.Error(), documented) {
			t.Errorf("error\n%v\nnames %s, which has a comment", err, documented)
		}
	}
}

func TestDocMarkdown(t *testing.T) {
	siblings := map[string]string{"MaxInflightBytes": "max_inflight_bytes", "Topics": "topics", "TLS": "tls"}
	names := map[string]bool{"limits": true, "deadline": true}
	for _, tc := range []struct{ doc, want string }{
		{"Default MaxInflightBytes/8.", "Default `max_inflight_bytes`/8.\n\n"},
		{"Topics to consume.", "Topics to consume.\n\n"},
		{"TLS enables TLS.", "TLS enables TLS.\n\n"},
		{`"earliest" (default) or "latest".`, "`earliest` (default) or `latest`.\n\n"},
		{`hashed: "sha256:<hex>", a <b> *c*`, "hashed: `sha256:<hex>`, a \\<b> \\*c\\*\n\n"},
		{"The OTEL_* variables; OTEL_SERVICE_NAME.", "The `OTEL_*` variables; `OTEL_SERVICE_NAME`.\n\n"},
		{"× limits.deadline, e.g. kafka.max_poll_records.", "× `limits.deadline`, e.g. `kafka.max_poll_records`.\n\n"},
		{"One.\n\nTwo,\nwrapped.", "One.\n\nTwo,\nwrapped.\n\n"},
	} {
		if got := docMarkdown(tc.doc, siblings, names); got != tc.want {
			t.Errorf("docMarkdown(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}
