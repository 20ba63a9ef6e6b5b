// Command genwriters writes writers_gen.go, the typed write methods of Row
// and FlatRow, one of each per column type in the table below, so that the
// two writers encode every type the same way and cannot drift apart. Run
// it with go generate from guest-sdk/go; its test fails when the file is
// stale.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"text/template"
)

// A scalar is a fixed-width column type both writers take as one value.
type scalar struct {
	Name  string // the method, and the chtype.Kind it writes
	Param string // the method's parameter
	Doc   string // what the method writes, after "Name writes "
	// RowDoc and FlatDoc replace or extend Doc for one writer: a
	// sentence that starts with "+" is added to Doc.
	RowDoc, FlatDoc string
	Width           int // bytes in RowBinary
	// Words are the value as unsigned little-endian words of equal width,
	// in order; Bytes, if set instead, is the value's bytes as an array
	// (they are stored as they are).
	Words []string
	Bytes string
}

// An array is an Array(T) column both writers take as a whole slice.
type array struct {
	Elem  string // the element's chtype.Kind
	Param string // the method's parameter, v
	Word  string // an element x as a uint64
}

var scalars = []scalar{
	{Name: "UInt8", Param: "v uint8", Doc: "a UInt8.", Width: 1, Words: []string{"v"}},
	{Name: "UInt16", Param: "v uint16", Doc: "a UInt16.", Width: 2, Words: []string{"v"}},
	{Name: "UInt32", Param: "v uint32", Doc: "a UInt32.", Width: 4, Words: []string{"v"}},
	{Name: "UInt64", Param: "v uint64", Doc: "a UInt64.", Width: 8, Words: []string{"v"}},
	{Name: "Int8", Param: "v int8", Doc: "an Int8.", Width: 1, Words: []string{"uint8(v)"}},
	{Name: "Int16", Param: "v int16", Doc: "an Int16.", Width: 2, Words: []string{"uint16(v)"}},
	{Name: "Int32", Param: "v int32", Doc: "an Int32.", Width: 4, Words: []string{"uint32(v)"}},
	{Name: "Int64", Param: "v int64", Doc: "an Int64.", Width: 8, Words: []string{"uint64(v)"}},
	{Name: "Float32", Param: "v float32", Doc: "a Float32.", Width: 4, Words: []string{"math.Float32bits(v)"}},
	{Name: "Float64", Param: "v float64", Doc: "a Float64.", Width: 8, Words: []string{"math.Float64bits(v)"}},
	{Name: "Bool", Param: "v bool", Doc: "a Bool.", Width: 1, Words: []string{"boolByte(v)"}},
	{Name: "Date", Param: "days uint16", Doc: "a Date: days since 1970-01-01.", Width: 2, Words: []string{"days"}},
	{Name: "Date32", Param: "days int32", Doc: "a Date32: days since 1970-01-01, negative before it.", Width: 4, Words: []string{"uint32(days)"}},
	{Name: "DateTime", Param: "sec uint32", Doc: "a DateTime: seconds since the Unix epoch.", Width: 4, Words: []string{"sec"}},
	{Name: "DateTime64", Param: "ticks int64",
		Doc:    "a DateTime64(P) from its ticks: units of 10^-P seconds since the Unix epoch (milliseconds for DateTime64(3)).",
		RowDoc: "+Time converts a time.Time with range checks.",
		Width:  8, Words: []string{"uint64(ticks)"}},
	{Name: "UUID", Param: "u [16]byte",
		Doc: "a UUID given in its usual byte order, the order of its text (ParseUUID reads the text). " +
			"ClickHouse stores it as two little-endian u64 halves, the first half first.",
		FlatDoc: "a UUID given in its usual byte order, as Row.UUID does.",
		Width:   16, Words: []string{"binary.BigEndian.Uint64(u[:8])", "binary.BigEndian.Uint64(u[8:])"}},
	{Name: "IPv4", Param: "a [4]byte", Doc: "an IPv4 address given in network order (netip.Addr.As4).", Width: 4,
		Words: []string{"binary.BigEndian.Uint32(a[:])"}},
	{Name: "IPv6", Param: "a [16]byte",
		Doc: "an IPv6 address given in network order (netip.Addr.As16, which writes an IPv4 address as " +
			"::ffff:a.b.c.d, as ClickHouse reads its text). An IPv6 value has no zone, and As16 drops one without a " +
			"word: fe80::1%eth0 would land as fe80::1, where ClickHouse refuses that text. Check Addr.Zone() first " +
			"to refuse it.",
		FlatDoc: "an IPv6 address given in network order, as Row.IPv6 does (mind the zone As16 drops).",
		Width:   16, Bytes: "a"},
}

var arrays = []array{
	{Elem: "Int64", Param: "v []int64", Word: "uint64(x)"},
	{Elem: "UInt64", Param: "v []uint64", Word: "x"},
}

// doc is the doc comment of writer's (row or flat) method for s.
func (s scalar) doc(row bool) string {
	more := s.FlatDoc
	if row {
		more = s.RowDoc
	}
	switch {
	case more == "":
		return s.Doc
	case more[0] == '+':
		return s.Doc + " " + more[1:]
	}
	return more
}

// A store is one of a value's words, at an offset from the value's start.
type store struct {
	Off  int
	Word string
}

// Stores are s's words with their offsets.
func (s scalar) Stores() []store {
	st := make([]store, len(s.Words))
	for i, w := range s.Words {
		st[i] = store{i * s.Width / len(s.Words), w}
	}
	return st
}

// WordBits is the width of each of s's words, in bits.
func (s scalar) WordBits() int { return 8 * s.Width / len(s.Words) }

func (s scalar) RowDocText() string  { return comment(s.Name+" writes "+s.doc(true), "") }
func (s scalar) FlatDocText() string { return comment(s.Name+" writes "+s.doc(false), "") }

// comment wraps text as a // comment of lines of at most 76 characters.
func comment(text, indent string) string {
	var b bytes.Buffer
	line := ""
	for _, word := range bytes.Fields([]byte(text)) {
		if line != "" && len(line)+1+len(word) > 76 {
			fmt.Fprintf(&b, "%s// %s\n", indent, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += string(word)
	}
	fmt.Fprintf(&b, "%s// %s", indent, line)
	return b.String()
}

var tmpl = template.Must(template.New("writers").Parse(`// Code generated by genwriters from internal/genwriters/main.go; DO NOT EDIT.

package sluice

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/sluicehq/sluice/guest-sdk/go/internal/chtype"
)

// The typed writes of Row and FlatRow, one of each per fixed-width type and
// per Array of Int64 or UInt64, and the width of each fixed-width type,
// from the one table in internal/genwriters.

{{range .Scalars}}
{{.RowDocText}}
func (r *Row) {{.Name}}({{.Param}}) *Row {
	if r.want(chtype.{{.Name}}) {
{{- if .Bytes}}
		r.o.buf = append(r.o.buf, {{.Bytes}}[:]...)
{{- else}}{{$bits := .WordBits}}{{range .Words}}
{{- if eq $bits 8}}
		r.o.buf = append(r.o.buf, {{.}})
{{- else}}
		r.o.buf = binary.LittleEndian.AppendUint{{$bits}}(r.o.buf, {{.}})
{{- end}}{{end}}{{end}}
		r.advance()
	}
	return r
}
{{end}}
{{range .Arrays}}
// Array{{.Elem}} writes an Array({{.Elem}}).
func (r *Row) Array{{.Elem}}({{.Param}}) *Row {
	if r.wantArrayOf(chtype.{{.Elem}}, len(v)) {
		for _, x := range v {
			r.o.buf = binary.LittleEndian.AppendUint64(r.o.buf, {{.Word}})
		}
		r.advance()
	}
	return r
}
{{end}}
{{range .Scalars}}
{{.FlatDocText}}
func (w *FlatRow) {{.Name}}({{.Param}}) *FlatRow {
	if w.slot() == uint8(chtype.{{.Name}}) {
{{- if .Bytes}}
		*(*[{{.Width}}]byte)(w.at()) = {{.Bytes}}
{{- else if eq (len .Words) 1}}
		put{{.WordBits}}(w.at(), {{index .Words 0}})
{{- else}}{{$bits := .WordBits}}
		at := w.at()
{{- range .Stores}}
{{- if eq .Off 0}}
		put{{$bits}}(at, {{.Word}})
{{- else}}
		put{{$bits}}(unsafe.Add(at, {{.Off}}), {{.Word}})
{{- end}}{{end}}{{end}}
		w.off += {{.Width}}
		w.n++
	} else {
		if w.failK == 0 {
			w.failK, w.failN, w.failSP = uint8(chtype.{{.Name}}), w.n, w.sp
		}
		panic(misplaced{w.t, w.n, uint8(chtype.{{.Name}}), w.sp})
	}
	return w
}
{{end}}
{{range .Arrays}}
// Array{{.Elem}} writes an Array({{.Elem}}).
func (w *FlatRow) Array{{.Elem}}({{.Param}}) *FlatRow {
	if w.slot() != slotArray{{.Elem}} {
		return w.wrote(slotArray{{.Elem}})
	}
	w.room(maxVarint + 8*len(v))
	base, off := w.base, putUvarint(w.base, w.off, uint64(len(v)))
	for _, x := range v {
		put64(unsafe.Add(base, off), {{.Word}})
		off += 8
	}
	w.off = off
	w.n++
	return w
}
{{end}}
// flatWidth is the bytes of a value of fixed-width kind k in RowBinary,
// for the kinds FlatRow writes; 0 for any other kind.
func flatWidth(k chtype.Kind) int {
	switch k {
{{- range .Scalars}}
	case chtype.{{.Name}}:
		return {{.Width}}
{{- end}}
	}
	return 0
}
`))

// render returns the generated file, formatted.
func render() ([]byte, error) {
	var b bytes.Buffer
	if err := tmpl.Execute(&b, struct {
		Scalars []scalar
		Arrays  []array
	}{scalars, arrays}); err != nil {
		return nil, err
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, b.Bytes())
	}
	return src, nil
}

// out is the generated file, from guest-sdk/go, where go generate runs.
const out = "writers_gen.go"

func main() {
	src, err := render()
	if err == nil {
		err = os.WriteFile(out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "genwriters:", err)
		os.Exit(1)
	}
}
