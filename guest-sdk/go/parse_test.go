package sluice

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// textVector is a line of ../testdata/text.tsv: a type, a text, and what
// ClickHouse 26.9 reads from it (guest-sdk/conformance TestTextVectors
// checks the file against the server).
type textVector struct {
	typ, text, value string
}

func readTextVectors(t testing.TB) []textVector {
	t.Helper()
	f, err := os.Open("../testdata/text.tsv")
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
		text, err := strconv.Unquote(f[1])
		if len(f) != 3 || err != nil {
			t.Fatalf("text.tsv: %q: want a type, a quoted text and a value (%v)", line, err)
		}
		vs = append(vs, textVector{f[0], text, f[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

// stricter is why the parsers refuse a text that ClickHouse reads, if
// they may: a mantissa without a digit (ClickHouse reads 0), a second
// decimal point (ClickHouse reads on as if it were not there), or an
// exponent so large that ClickHouse's int32 arithmetic overflows (it reads
// 0). It returns the class of the refusal, or nil.
func stricter(text string) (why string, class error) {
	mant, exp, _ := strings.Cut(strings.ToLower(text), "e")
	e, _ := strconv.ParseInt(exp, 10, 64)
	switch {
	case strings.IndexAny(mant, "0123456789") < 0:
		return "no digits", ErrSyntax
	case strings.Count(mant, ".") > 1:
		return "a second point", ErrSyntax
	case e > math.MaxInt32-maxPrecision:
		return "an exponent past int32", ErrRange
	}
	return "", nil
}

// decimalType reads "Decimal(P, S)".
func decimalType(t testing.TB, typ string) (precision, scale int) {
	if _, err := fmt.Sscanf(typ, "Decimal(%d, %d)", &precision, &scale); err != nil {
		t.Fatalf("type %q: %v", typ, err)
	}
	return precision, scale
}

// ParseDecimal, ParseDecimalBig and ParseUUID read from each text of
// ../testdata/text.tsv what ClickHouse reads, and refuse what it refuses.
func TestParseTextVectors(t *testing.T) {
	vs := readTextVectors(t)
	var decimals, uuids, accepted int
	strict := map[string]int{}
	for _, v := range vs {
		if v.typ == "UUID" {
			uuids++
			for _, in := range []any{v.text, []byte(v.text)} {
				var u [16]byte
				var err error
				switch in := in.(type) {
				case string:
					u, err = ParseUUID(in)
				case []byte:
					u, err = ParseUUID(in)
				}
				if got := hex.EncodeToString(u[:]); err != nil && v.value != "error" || err == nil && got != v.value {
					t.Errorf("ParseUUID(%q) = %s, %v; ClickHouse reads %s", v.text, got, err, v.value)
				} else if err != nil && !errors.Is(err, ErrSyntax) {
					t.Errorf("ParseUUID(%q): %v, want ErrSyntax", v.text, err)
				}
			}
			continue
		}
		decimals++
		p, s := decimalType(t, v.typ)
		want := v.value
		if why, class := stricter(v.text); class != nil && v.value != "error" {
			strict[why]++
			want = "error"
			if _, err := ParseDecimalBig(nil, v.text, p, s); !errors.Is(err, class) {
				t.Errorf("ParseDecimalBig(%q, %d, %d): %v, want %v: %s", v.text, p, s, err, class, why)
			}
		}
		if want != "error" {
			accepted++
		}
		z, err := ParseDecimalBig(nil, v.text, p, s)
		if got := z.String(); err != nil && want != "error" || err == nil && got != want {
			t.Errorf("ParseDecimalBig(%q, %d, %d) = %s, %v; want %s", v.text, p, s, got, err, want)
		} else if err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
			t.Errorf("ParseDecimalBig(%q, %d, %d): %v, want ErrSyntax or ErrRange", v.text, p, s, err)
		}
		// ParseDecimal reads the same, but for values beyond int64.
		n, err := ParseDecimal([]byte(v.text), p, s)
		switch {
		case want == "error" && err == nil:
			t.Errorf("ParseDecimal(%q, %d, %d) = %d; ClickHouse refuses it", v.text, p, s, n)
		case want != "error" && z.IsInt64() && (err != nil || n != z.Int64()):
			t.Errorf("ParseDecimal(%q, %d, %d) = %d, %v; want %s", v.text, p, s, n, err, want)
		case want != "error" && !z.IsInt64() && !errors.Is(err, ErrRange):
			t.Errorf("ParseDecimal(%q, %d, %d) = %d, %v; want ErrRange: %s is beyond int64", v.text, p, s, n, err, want)
		}
	}
	if decimals < 200 || uuids < 30 || accepted < 100 || len(strict) != 3 {
		t.Errorf("%d decimal vectors (%d read), %d UUID vectors, texts ClickHouse reads and the parsers refuse %v: the file does not exercise the parsers",
			decimals, accepted, uuids, strict)
	}
}

// decimalSyntax is the text ParseDecimal takes.
var decimalSyntax = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// referenceDecimal is the unscaled value of text in a Decimal(p, s), from
// math/big: the exact value, cut toward zero to s digits after the point;
// ok is false when the text is not a number in the syntax above. An
// exponent beyond int32 is not a number.
func referenceDecimal(text string, p, s int) (v *big.Int, ok bool) {
	if !decimalSyntax.MatchString(text) {
		return nil, false
	}
	mant, exp, _ := strings.Cut(strings.ToLower(text), "e")
	e := int64(0)
	if exp != "" {
		var err error
		if e, err = strconv.ParseInt(exp, 10, 32); err != nil {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(mant)
	if !ok {
		panic(mant)
	}
	if r.Sign() == 0 {
		return new(big.Int), true
	}
	// Past these the value is 0 or far beyond any precision; big.Rat
	// would spend its time on 10^e.
	e += int64(s)
	if e < -200 {
		return new(big.Int), true
	}
	if e > 200 {
		return new(big.Int).Exp(big.NewInt(10), big.NewInt(200), nil), true
	}
	ten := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(max(e, -e)), nil))
	if e >= 0 {
		r.Mul(r, ten)
	} else {
		r.Quo(r, ten)
	}
	return new(big.Int).Quo(r.Num(), r.Denom()), true // Quo cuts toward zero
}

// mayRefuse reports whether ClickHouse may refuse text as a
// Decimal(precision, …) although its value fits: it reads at most
// precision digits of the mantissa (before its exponent), and counts the
// zeros between the point and the first nonzero digit, and a zero's
// exponent, as digits before the point.
func mayRefuse(text string, precision int) bool {
	mant, exp, _ := strings.Cut(strings.ToLower(text), "e")
	e, _ := strconv.ParseInt(exp, 10, 64)
	mant = strings.TrimLeft(strings.TrimLeft(mant, "+-"), "0")
	whole, frac, _ := strings.Cut(mant, ".")
	frac = strings.TrimRight(frac, "0") // zeros after the point count only before a nonzero digit
	return len(whole)+len(frac) > precision || e > 0 && whole == "" && (frac == "" || frac[0] == '0')
}

func fuzzDecimalSeeds(f *testing.F) {
	for _, v := range readTextVectors(f) {
		if v.typ != "UUID" {
			p, s := decimalType(f, v.typ)
			f.Add(v.text, uint8(p), uint8(s))
		}
	}
}

// FuzzParseDecimal checks ParseDecimalBig and ParseDecimal against
// math/big on any text and type: what they accept is the exact value cut
// to the scale, and within the precision; what they refuse is not a
// number, or out of range, or a text ClickHouse refuses although its value
// fits (mayRefuse).
func FuzzParseDecimal(f *testing.F) {
	fuzzDecimalSeeds(f)
	f.Fuzz(func(t *testing.T, text string, p, s uint8) {
		precision := int(p) % maxPrecision
		if precision == 0 {
			precision = maxPrecision
		}
		scale := int(s) % (precision + 1)
		ref, ok := referenceDecimal(text, precision, scale)
		limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(precision)), nil)
		inRange := ok && new(big.Int).Abs(ref).Cmp(limit) < 0
		z, err := ParseDecimalBig(new(big.Int), text, precision, scale)
		switch {
		case err == nil && !ok:
			t.Fatalf("ParseDecimalBig(%q, %d, %d) = %v; not a number", text, precision, scale, z)
		case err == nil && z.Cmp(ref) != 0:
			t.Fatalf("ParseDecimalBig(%q, %d, %d) = %v, want %v", text, precision, scale, z, ref)
		case err == nil && !inRange:
			t.Fatalf("ParseDecimalBig(%q, %d, %d) = %v, beyond Decimal(%d, %d)", text, precision, scale, z, precision, scale)
		case err != nil && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange):
			t.Fatalf("ParseDecimalBig(%q, %d, %d): %v, want ErrSyntax or ErrRange", text, precision, scale, err)
		case err != nil && ok && !errors.Is(err, ErrRange):
			t.Fatalf("ParseDecimalBig(%q, %d, %d): %v, want ErrRange", text, precision, scale, err)
		case err != nil && inRange && !mayRefuse(text, precision):
			t.Fatalf("ParseDecimalBig(%q, %d, %d): %v; it is %v, within Decimal(%d, %d)", text, precision, scale, err, ref, precision, scale)
		}
		n, err64 := ParseDecimal(text, precision, scale)
		switch {
		case err == nil && z.IsInt64() && (err64 != nil || n != z.Int64()):
			t.Fatalf("ParseDecimal(%q, %d, %d) = %d, %v; ParseDecimalBig %v", text, precision, scale, n, err64, z)
		case err == nil && !z.IsInt64() && !errors.Is(err64, ErrRange):
			t.Fatalf("ParseDecimal(%q, %d, %d) = %d, %v; want ErrRange for %v", text, precision, scale, n, err64, z)
		case err != nil && (err64 == nil || err64.Error() != err.Error()):
			t.Fatalf("ParseDecimal(%q, %d, %d): %v; ParseDecimalBig: %v", text, precision, scale, err64, err)
		}
	})
}

// referenceUUID is ClickHouse's UUID text, read with encoding/hex.
func referenceUUID(text string) ([16]byte, bool) {
	var u [16]byte
	if len(text) == 36 {
		for _, i := range []int{8, 13, 18, 23} {
			if text[i] != '-' {
				return u, false
			}
		}
		text = text[:8] + text[9:13] + text[14:18] + text[19:23] + text[24:]
	}
	if len(text) != 32 {
		return u, false
	}
	_, err := hex.Decode(u[:], []byte(text))
	return u, err == nil
}

// FuzzParseUUID checks ParseUUID against encoding/hex on any text.
func FuzzParseUUID(f *testing.F) {
	for _, v := range readTextVectors(f) {
		if v.typ == "UUID" {
			f.Add(v.text)
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		want, ok := referenceUUID(text)
		got, err := ParseUUID(text)
		if ok != (err == nil) || ok && got != want {
			t.Fatalf("ParseUUID(%q) = %x, %v; want %x, %v", text, got, err, want, ok)
		}
		if gotB, errB := ParseUUID([]byte(text)); gotB != got || (errB == nil) != (err == nil) {
			t.Fatalf("ParseUUID([]byte(%q)) = %x, %v; from a string %x, %v", text, gotB, errB, got, err)
		}
	})
}

// The parsers allocate nothing when they succeed; ParseDecimalBig nothing
// once its big.Int has room.
func TestParseAllocs(t *testing.T) {
	text := []byte("-12345678901234.5678e-3")
	uuid := []byte("01234567-89ab-cdef-0123-456789abcdef")
	z := new(big.Int)
	wide := "-12345678901234567890123456789012345678901234567890123456.12345678901234567890"
	if _, err := ParseDecimalBig(z, wide, 76, 20); err != nil {
		t.Fatal(err)
	}
	if a := testing.AllocsPerRun(100, func() {
		if _, err := ParseDecimal(text, 18, 4); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDecimal(string(text[:5]), 9, 2); err != nil { // a string made on the stack
			t.Fatal(err)
		}
		if _, err := ParseUUID(uuid); err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDecimalBig(z, wide, 76, 20); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("%v allocations per call, want 0", a)
	}
}

// Errors name the function, the text, the type and why; a long text is
// cut.
func TestParseErrors(t *testing.T) {
	long := strings.Repeat("9", 70)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{second(ParseDecimal("12.3x", 9, 2)), `sluice: ParseDecimal: "12.3x" as Decimal(9, 2): invalid syntax: unexpected 'x' at byte 4`},
		{second(ParseDecimal("", 9, 2)), `sluice: ParseDecimal: "" as Decimal(9, 2): invalid syntax: no digits`},
		{second(ParseDecimal("12345678", 9, 2)), `sluice: ParseDecimal: "12345678" as Decimal(9, 2): out of range: more than 7 digits before the point`},
		{second(ParseDecimal("1234567890", 9, 2)), `sluice: ParseDecimal: "1234567890" as Decimal(9, 2): out of range: more than 9 digits`},
		{second(ParseDecimal("1e99999999999", 9, 2)), `as Decimal(9, 2): invalid syntax: a malformed exponent`},
		{second(ParseDecimal(long, 76, 0)), `sluice: ParseDecimal: "` + long[:64] + `…" as Decimal(76, 0): out of range: beyond int64; use ParseDecimalBig`},
		{second(ParseDecimal("1", 77, 0)), `sluice: Decimal(77, 0): want a precision of 1 to 76 and a scale of 0 to the precision`},
		{second(ParseDecimal("1", 9, 10)), `sluice: Decimal(9, 10): want a precision`},
		{second(ParseUUID("01234567-89ab-cdef-0123-456789abcdeg")), `sluice: ParseUUID: "01234567-89ab-cdef-0123-456789abcdeg" as UUID: invalid syntax: a character that is not a hex digit`},
		{second(ParseUUID("{01234567-89ab-cdef-0123-456789abcdef}")), `as UUID: invalid syntax: want 36 characters, or 32 hex digits`},
	} {
		if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
			t.Errorf("error %v, want it to contain %q", tt.err, tt.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// Boundaries of each width: the most digits, int64's limits, and the
// smallest step.
func TestParseDecimalLimits(t *testing.T) {
	for _, tt := range []struct {
		text string
		p, s int
		want string // the unscaled value, or an error's class
	}{
		{"999999999", 9, 0, "999999999"},
		{"-0.999999999", 9, 9, "-999999999"},
		{"1", 9, 9, "ErrRange"},
		{"0.0000000005", 9, 9, "0"},
		{"9223372036854775807", 19, 0, "9223372036854775807"},
		{"-9223372036854775808", 19, 0, "-9223372036854775808"},
		{"9223372036854775808", 19, 0, "ErrRange"}, // beyond int64 for ParseDecimal; ParseDecimalBig reads it
		{"-0", 9, 2, "0"},
		{"00000000000000000000000000000000000000000000000000000000000000000000000000000000001", 1, 0, "1"},
		{"1" + strings.Repeat("0", 75), 76, 0, "ErrRange"},
		{strings.Repeat("9", 76), 76, 0, "ErrRange"},
	} {
		n, err := ParseDecimal(tt.text, tt.p, tt.s)
		got := strconv.FormatInt(n, 10)
		if errors.Is(err, ErrRange) {
			got = "ErrRange"
		} else if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ParseDecimal(%q, %d, %d) = %s, want %s", tt.text, tt.p, tt.s, got, tt.want)
		}
	}
	for _, text := range []string{strings.Repeat("9", 76), "-" + strings.Repeat("9", 76), "9223372036854775808"} {
		z, err := ParseDecimalBig(nil, text, 76, 0)
		if err != nil || z.String() != text {
			t.Errorf("ParseDecimalBig(%q, 76, 0) = %v, %v", text, z, err)
		}
	}
}
