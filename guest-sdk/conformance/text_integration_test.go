package conformance

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testinfra"
)

var updateText = flag.Bool("update", false, "rewrite ../testdata/text.tsv from ClickHouse 26.9")

const textFile = "../testdata/text.tsv"

// textVector is one line of ../testdata/text.tsv: a type, a text, and the
// value ClickHouse reads from the text as a field of that type: the
// unscaled integer of a Decimal, the 32 hex digits of a UUID, or "error".
type textVector struct {
	typ, text, value string
}

// TestTextVectors checks every line of ../testdata/text.tsv against
// ClickHouse 26.9: what it reads from each text, as a field of the type,
// is the line's value. The Go SDK's ParseDecimal and ParseUUID are tested
// against the file. With -update it asks the server about a new set of
// texts (hand-picked ones, and random ones around each type's limits) and
// rewrites the file.
func TestTextVectors(t *testing.T) {
	ch := testinfra.ClickHouseT(t, testinfra.ClickHouseOptions{Server: testinfra.Modern})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var vs []textVector
	if *updateText {
		for _, v := range textsToAsk() {
			v.value = readAs(ctx, t, ch, v.typ, v.text)
			vs = append(vs, v)
		}
		writeTextVectors(t, vs)
		t.Logf("wrote %d vectors to %s", len(vs), textFile)
		return
	}
	vs = readTextVectors(t)
	if len(vs) < 300 {
		t.Fatalf("%s has %d vectors; rewrite it with -update", textFile, len(vs))
	}
	for _, v := range vs {
		if got := readAs(ctx, t, ch, v.typ, v.text); got != v.value {
			t.Errorf("%s %q: ClickHouse reads %s, the file says %s", v.typ, v.text, got, v.value)
		}
	}
}

// readAs is what ClickHouse reads from text as a TabSeparatedRaw field of
// type typ, as textVector.value has it.
func readAs(ctx context.Context, t *testing.T, ch *testinfra.ClickHouse, typ, text string) string {
	t.Helper()
	if strings.ContainsAny(text, "\t\n\r") {
		t.Fatalf("%q: a text with a tab or a line break is not one field", text)
	}
	expr := "toString(v)"
	if typ == "UUID" {
		expr = "lower(hex(v))"
	}
	lit := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(text)
	out, err := ch.Query(ctx, fmt.Sprintf("SELECT %s FROM format(TSVRaw, 'v %s', '%s')", expr, typ, lit))
	if err != nil {
		if ctx.Err() != nil || !strings.Contains(err.Error(), "Code:") {
			t.Fatalf("%s %q: %v", typ, text, err) // not the server refusing the text
		}
		return "error"
	}
	out = strings.TrimSuffix(out, "\n")
	if typ == "UUID" {
		return out
	}
	_, scale, ok := decimalType(typ)
	if !ok {
		t.Fatalf("type %s: want UUID or Decimal(P, S)", typ)
	}
	r, ok := new(big.Rat).SetString(out)
	if !ok {
		t.Fatalf("%s %q: ClickHouse answered %q", typ, text, out)
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() {
		t.Fatalf("%s %q: ClickHouse answered %q, which has more than %d digits after the point", typ, text, out, scale)
	}
	return r.Num().String()
}

// decimalType reads "Decimal(P, S)".
func decimalType(typ string) (precision, scale int, ok bool) {
	_, err := fmt.Sscanf(typ, "Decimal(%d, %d)", &precision, &scale)
	return precision, scale, err == nil
}

func readTextVectors(t *testing.T) []textVector {
	t.Helper()
	f, err := os.Open(textFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vs []textVector
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			t.Fatalf("%s: %q: want a type, a quoted text and a value", textFile, line)
		}
		text, err := strconv.Unquote(f[1])
		if err != nil {
			t.Fatalf("%s: %q: %v", textFile, line, err)
		}
		vs = append(vs, textVector{typ: f[0], text: text, value: f[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func writeTextVectors(t *testing.T, vs []textVector) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`# Texts of Decimal and UUID values and what ClickHouse 26.9 reads from each
# as a field of the type (TabSeparatedRaw): a Decimal's unscaled integer
# (12.34 in Decimal(9, 2) is 1234), a UUID's 32 hex digits in text order,
# or "error" where it refuses the text. Columns: the type, the text quoted
# as in Go, the value. guest-sdk/conformance TestTextVectors checks every
# line against the server and -update rewrites the file; the Go SDK's
# ParseDecimal and ParseUUID are tested against it.
`)
	for _, v := range vs {
		fmt.Fprintf(&b, "%s\t%s\t%s\n", v.typ, strconv.Quote(v.text), v.value)
	}
	if err := os.WriteFile(textFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// decimalTypes are the types of the decimal vectors: each width, the
// smallest and largest precision, and scales of 0, of the precision and
// in between.
var decimalTypes = [][2]int{{9, 2}, {1, 0}, {3, 3}, {18, 4}, {19, 0}, {38, 10}, {76, 20}, {76, 0}}

// textsToAsk are the texts -update asks the server about.
func textsToAsk() []textVector {
	var vs []textVector
	add := func(typ string, texts ...string) {
		for _, s := range texts {
			vs = append(vs, textVector{typ: typ, text: s})
		}
	}
	// The forms ClickHouse reads and a few it reads oddly.
	add("Decimal(9, 2)", "0", "1", "-1", "+1", "1.5", "-1.5", "1.", ".5", "-.5", "+.5e1", "12.34", "12.349", "-12.349",
		"0001.50", "1.50000000000000", "1e3", "1E3", "1e+3", "1.5e-1", "1e-999", "0e7", "0e8", "9999999.99", "9999999.999",
		"-9999999.999", "10000000", "12345678.5", "1234567890e-5", "0.0000000001", "0.0000000001e10", "0.00001234567e4",
		"-", "+", ".", "-.", "1.5.5", "1..5", "1e", "1e+", "1e-", "1e--1", "1e2.5", "e5", " 1.5", "1.5 ", "1,5", "1_000",
		"0x10", "nan", "inf", "-inf", "+-1", "--1", "１", "1e2147483647", "1e2147483648", "1e-2147483648", "1e4294967296")
	add("Decimal(76, 20)", "12345678901234567890123456789012345678901234567890123456.12345678901234567890",
		"-99999999999999999999999999999999999999999999999999999999.99999999999999999999",
		"100000000000000000000000000000000000000000000000000000000", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808")
	add("Decimal(19, 0)", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "9999999999999999999",
		"-9999999999999999999", "10000000000000000000")
	add("UUID", "01234567-89ab-cdef-0123-456789abcdef", "01234567-89AB-CDEF-0123-456789ABCDEF",
		"0123456789abcdef0123456789abcdef", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
		"{01234567-89ab-cdef-0123-456789abcdef}", "urn:uuid:01234567-89ab-cdef-0123-456789abcdef",
		"01234567x89ab-cdef-0123-456789abcdef", "01234567-89abxcdef-0123-456789abcdef", "01234567-89ab-cdef-0123x456789abcdef",
		"0123456g-89ab-cdef-0123-456789abcdef", "01234567-89ab-cdef-0123-456789abcde", "01234567-89ab-cdef-0123-456789abcdef0",
		"0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0", "01234567-89ab-cdef-0123456789abcdef",
		"012345678-9ab-cdef-0123-456789abcdef", " 01234567-89ab-cdef-0123-456789abcdef", "0123456789abcdef0123456789abcdeg",
		"01234567-89ab-cdef-0123-456789abcde ", "01234567-89ab-cdef-0123-456789abcdeg")

	rng := rand.New(rand.NewPCG(49, 1))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	for _, ps := range decimalTypes {
		typ := fmt.Sprintf("Decimal(%d, %d)", ps[0], ps[1])
		p, s := ps[0], ps[1]
		for range 30 {
			var b strings.Builder
			b.WriteString([]string{"", "", "-", "+"}[rng.IntN(4)])
			if rng.IntN(4) == 0 {
				b.WriteString(strings.Repeat("0", 1+rng.IntN(3)))
			}
			// Around the most digits before the point: p-s, one more or
			// one fewer.
			b.WriteString(digits(max(0, p-s-1+rng.IntN(3))))
			if rng.IntN(5) != 0 {
				b.WriteString(".")
				if rng.IntN(3) == 0 {
					b.WriteString(strings.Repeat("0", rng.IntN(p+2)))
				}
				b.WriteString(digits(rng.IntN(s + 3)))
			}
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, "%s%s%d", []string{"e", "E"}[rng.IntN(2)], []string{"", "-", "+"}[rng.IntN(3)], rng.IntN(p+3))
			}
			text := b.String()
			if text == "" { // not a field: TSVRaw reads no row
				text = "0"
			}
			if rng.IntN(8) == 0 { // a stray character
				i := rng.IntN(len(text) + 1)
				text = text[:i] + string(".e-+x 0"[rng.IntN(7)]) + text[i:]
			}
			add(typ, text)
		}
	}
	for range 40 {
		u := fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()>>16, rng.Uint32()>>16, rng.Uint32()>>16, rng.Uint64()>>16)
		switch rng.IntN(5) {
		case 0:
			u = strings.ToUpper(u)
		case 1:
			u = strings.ReplaceAll(u, "-", "")
		case 2: // a character changed
			i := rng.IntN(len(u))
			u = u[:i] + string("-gG{} x0Ff"[rng.IntN(10)]) + u[i+1:]
		case 3: // one removed or added
			i := rng.IntN(len(u))
			if rng.IntN(2) == 0 {
				u = u[:i] + u[i+1:]
			} else {
				u = u[:i] + string("-0a"[rng.IntN(3)]) + u[i:]
			}
		}
		add("UUID", u)
	}
	return vs
}
