package configdoc

import (
	"bytes"
	"fmt"
	"go/doc/comment"
	"regexp"
	"slices"
	"strings"
)

// Section is a top-level part of the reference: a top-level key that holds
// an object or a list of objects, with the keys under it.
type Section struct {
	// Title is the top-level key, or "Top level" for the scalar keys.
	Title string
	// Head is the top-level key itself; nil for "Top level".
	Head *Key
	Keys []Key
}

// Sections groups keys by their top-level key, in the order given by order
// (the rest in declaration order), the scalar top-level keys last.
func Sections(keys []Key, order []string) []Section {
	var secs []Section
	top := Section{Title: "Top level"}
	index := map[string]int{}
	for _, k := range keys {
		root, _, _ := strings.Cut(k.Path, ".")
		root, _, _ = strings.Cut(root, "[")
		if k.Path == root {
			if k.Type == "object" || k.Type == "list of objects" || k.Type == "map of string to object" {
				index[root] = len(secs)
				secs = append(secs, Section{Title: root, Head: &k})
			} else {
				top.Keys = append(top.Keys, k)
			}
			continue
		}
		secs[index[root]].Keys = append(secs[index[root]].Keys, k)
	}
	rank := func(s Section) int {
		if i := slices.Index(order, s.Title); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(secs, func(a, b Section) int { return rank(a) - rank(b) })
	if len(top.Keys) > 0 {
		secs = append(secs, top)
	}
	return secs
}

// Required lists the keys whose comment has a sentence starting with
// "Required", with the rest of that sentence up to a stop: "" for
// "Required.", "with tenants" for "Required with tenants: …".
func Required(keys []Key) (paths, when []string) {
	for _, k := range keys {
		if m := requiredRe.FindStringSubmatch(k.Doc); m != nil {
			paths = append(paths, k.Path)
			when = append(when, strings.Join(strings.Fields(m[1]), " "))
		}
	}
	return paths, when
}

var requiredRe = regexp.MustCompile(`(?:^|[.;:]\s+)Required((?:\s[^.;:]*)?)[.;:]`)

// writeEntry writes one key, or a run of keys sharing one comment.
func writeEntry(b *bytes.Buffer, group []Key, names map[string]bool) {
	var paths, types []string
	same := true
	for _, k := range group {
		paths = append(paths, "`"+k.Path+"`")
		types = append(types, k.Type)
		same = same && k.Type == group[0].Type
	}
	fmt.Fprintf(b, "### %s\n\n", strings.Join(paths, ", "))
	if same {
		fmt.Fprintf(b, "*%s*\n\n", group[0].Type)
	} else {
		var parts []string
		for _, k := range group {
			parts = append(parts, fmt.Sprintf("`%s` *%s*", k.Name, k.Type))
		}
		fmt.Fprintf(b, "%s\n\n", strings.Join(parts, ", "))
	}
	b.WriteString(docMarkdown(group[0].Doc, group[0].siblings, names))
}

// groups splits keys into runs that share one comment.
func groups(keys []Key) [][]Key {
	var out [][]Key
	for _, k := range keys {
		if n := len(out); k.Shared && n > 0 && out[n-1][0].Doc == k.Doc {
			out[n-1] = append(out[n-1], k)
			continue
		}
		out = append(out, []Key{k})
	}
	return out
}

// docMarkdown renders a Go doc comment as Markdown: paragraphs, lists and
// code blocks as go/doc/comment parses them; in the text, the Go names of
// sibling fields become their YAML keys, and quoted values, config keys and
// environment variables become code.
func docMarkdown(doc string, siblings map[string]string, names map[string]bool) string {
	p := comment.Parser{
		LookupPackage: func(string) (string, bool) { return "", false },
		LookupSym:     func(string, string) bool { return false },
	}
	parsed := p.Parse(doc)
	var b strings.Builder
	for _, block := range parsed.Content {
		switch block := block.(type) {
		case *comment.Paragraph:
			b.WriteString(inline(block.Text, siblings, names))
			b.WriteString("\n\n")
		case *comment.Heading:
			b.WriteString("**" + inline(block.Text, siblings, names) + "**\n\n")
		case *comment.Code:
			b.WriteString("```\n" + block.Text + "```\n\n")
		case *comment.List:
			for i, item := range block.Items {
				marker := "-"
				if item.Number != "" {
					marker = fmt.Sprintf("%d.", i+1)
				}
				for j, c := range item.Content {
					text := ""
					if para, ok := c.(*comment.Paragraph); ok {
						text = inline(para.Text, siblings, names)
					}
					text = strings.ReplaceAll(text, "\n", "\n  ")
					if j == 0 {
						fmt.Fprintf(&b, "%s %s\n", marker, text)
					} else {
						fmt.Fprintf(&b, "  %s\n", text)
					}
				}
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func inline(texts []comment.Text, siblings map[string]string, names map[string]bool) string {
	var s strings.Builder
	for _, t := range texts {
		switch t := t.(type) {
		case comment.Plain:
			s.WriteString(string(t))
		case comment.Italic:
			s.WriteString(string(t))
		case *comment.Link:
			s.WriteString(inline(t.Text, nil, nil))
		case *comment.DocLink:
			s.WriteString(inline(t.Text, nil, nil))
		}
	}
	return rewrite(s.String(), siblings, names)
}

// spanRe finds what becomes code in a comment's text: a quoted value, a Go
// identifier, a dotted or snake_case config key or setting, an environment
// variable.
var spanRe = regexp.MustCompile(`"[^"\n` + "`" + `]*"` +
	`|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*(?:_[A-Z0-9]+|_\*)` +
	`|\b[A-Z][A-Za-z0-9]*\b` +
	`|\b[a-z][a-z0-9]*(?:[._][a-z0-9]+)+(?:=[A-Za-z0-9]+)?\b`)

var camelRe = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*[A-Z]|^[A-Z]+[A-Z][a-z]`)

func rewrite(text string, siblings map[string]string, names map[string]bool) string {
	var b strings.Builder
	last := 0
	for _, m := range spanRe.FindAllStringIndex(text, -1) {
		tok := text[m[0]:m[1]]
		code := ""
		switch {
		case tok[0] == '"':
			code = tok[1 : len(tok)-1]
		case strings.Contains(tok, "_") && strings.ToUpper(tok) == tok: // OTEL_SERVICE_NAME
			code = tok
		case tok[0] >= 'A' && tok[0] <= 'Z':
			// A sibling field's Go name, if it is not a plain word ("Topics").
			if key, ok := siblings[tok]; ok && camelRe.MatchString(tok) {
				code = key
			}
		case strings.Contains(tok, "_"):
			code = tok // max_poll_records, insert_distributed_sync=1
		default:
			root, _, _ := strings.Cut(tok, ".")
			if names[root] {
				code = tok // limits.deadline
			}
		}
		if code == "" {
			continue
		}
		b.WriteString(escape(text[last:m[0]]))
		b.WriteString("`" + code + "`")
		last = m[1]
	}
	b.WriteString(escape(text[last:]))
	return b.String()
}

// escape keeps Markdown from reading plain text as markup.
func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "`", "\\`", "*", `\*`, "<", `\<`, "[", `\[`).Replace(s)
}
