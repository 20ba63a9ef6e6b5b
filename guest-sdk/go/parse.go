package sluice

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strconv"
)

// Errors of ParseDecimal, ParseDecimalBig and ParseUUID wrap one of these.
var (
	// ErrSyntax: the text is not a value of the type.
	ErrSyntax = errors.New("invalid syntax")
	// ErrRange: the text is a number the type cannot hold.
	ErrRange = errors.New("out of range")
)

// Text is the text a parser takes: a string, or bytes such as a record's
// Value or a slice of it.
type Text interface{ ~string | ~[]byte }

// maxPrecision is the most digits a Decimal has: Decimal256's.
const maxPrecision = 76

// ParseDecimal reads text as ClickHouse reads a value of a Decimal(P, S)
// column (P = precision, S = scale) and returns its unscaled value, the
// integer Row.Decimal takes: "12.34" is 1234 in a Decimal(9, 2). It
// allocates nothing unless it fails.
//
// It takes an optional sign, digits with an optional decimal point, and an
// optional exponent (e or E, an optional sign and digits): "-0.5", "12.",
// ".5", "1.5e3". Digits after the S-th one past the point are cut, not
// rounded, as ClickHouse cuts them: "12.349" is 1234 in a Decimal(9, 2),
// and "-12.349" is -1234. A value with more than P-S digits before the
// point (after the exponent) is refused with ErrRange, as ClickHouse
// refuses it; so is one that ClickHouse refuses for reading more than P
// digits before it applies the exponent ("1234567890e-5" in a
// Decimal(9, 2)). Anything else (spaces, a second point, "nan", a comma,
// text without a digit such as "-" or ".", which ClickHouse reads as 0) is
// refused with ErrSyntax. The value of what it accepts is exactly
// ClickHouse's (guest-sdk/testdata/decimal.tsv holds ClickHouse 26.9's
// answers, and the tests check both against them).
//
// A Decimal(P, S) with P > 18 may hold values beyond int64: ParseDecimal
// refuses those with ErrRange; ParseDecimalBig reads them.
func ParseDecimal[T Text](text T, precision, scale int) (int64, error) {
	d, err := readDecimal(text, precision, scale)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := d.first; i < d.end; i++ {
		c := text[i]
		if c == '.' {
			continue
		}
		hi, lo := bits.Mul64(v, 10)
		lo, carry := bits.Add64(lo, uint64(c-'0'), 0)
		if hi != 0 || carry != 0 {
			return 0, beyondInt64(text, d)
		}
		v = lo
	}
	for range d.zeros {
		hi, lo := bits.Mul64(v, 10)
		if hi != 0 {
			return 0, beyondInt64(text, d)
		}
		v = lo
	}
	switch {
	case !d.neg && v <= math.MaxInt64:
		return int64(v), nil
	case d.neg && v <= 1<<63:
		return int64(-v), nil // -(1<<63) wraps to itself, math.MinInt64
	}
	return 0, beyondInt64(text, d)
}

// ParseDecimalBig is ParseDecimal for a Decimal of any precision, up to
// Decimal256's 76 digits: it sets z to the unscaled value and returns z,
// for Row.DecimalBig. A nil z is allocated; a z reused from an earlier
// call allocates nothing once it has room for the value.
func ParseDecimalBig[T Text](z *big.Int, text T, precision, scale int) (*big.Int, error) {
	if z == nil {
		z = new(big.Int)
	}
	d, err := readDecimal(text, precision, scale)
	if err != nil {
		return z, err
	}
	var m [4]uint64 // the magnitude, little-endian words: 10^76 < 2^256
	mul10 := func(add uint64) {
		for i := range m {
			hi, lo := bits.Mul64(m[i], 10)
			var c uint64
			m[i], c = bits.Add64(lo, add, 0)
			add = hi + c
		}
	}
	for i := d.first; i < d.end; i++ {
		if c := text[i]; c != '.' {
			mul10(uint64(c - '0'))
		}
	}
	for range d.zeros {
		mul10(0)
	}
	words := z.Bits()[:0]
	if bits.UintSize == 64 {
		for _, w := range m {
			words = append(words, big.Word(w))
		}
	} else {
		for _, w := range m {
			words = append(words, big.Word(w), big.Word(w>>32))
		}
	}
	z.SetBits(words) // normalizes: no high zero words
	if d.neg {
		z.Neg(z)
	}
	return z, nil
}

// decimalText is where a decimal's digits are in its text.
type decimalText struct {
	neg bool
	// The unscaled value is the digits of text[first:end], skipping a
	// point, followed by zeros zeros.
	first, end, zeros int
	// For messages.
	precision, scale int
}

// beyondInt64 is ParseDecimal's error for a value beyond int64.
func beyondInt64[T Text](text T, d decimalText) error {
	return textError("ParseDecimal", text, fmt.Sprintf("Decimal(%d, %d)", d.precision, d.scale), ErrRange, "beyond int64; use ParseDecimalBig")
}

// readDecimal reads text as ClickHouse's readDecimalText reads a
// Decimal(precision, scale): it counts at most precision digits, from the
// first nonzero one (zeros after the point count once a nonzero digit
// follows them); past the point it ignores the digits beyond that count,
// before it an extra digit is an error. With the exponent, digits+exponent
// must not exceed precision-scale. The value is then the digits read,
// times 10^(exponent+scale), the digits beyond the scale cut.
func readDecimal[T Text](text T, precision, scale int) (decimalText, error) {
	d := decimalText{precision: precision, scale: scale, first: -1}
	typ := func() string { return fmt.Sprintf("Decimal(%d, %d)", precision, scale) }
	if precision < 1 || precision > maxPrecision || scale < 0 || scale > precision {
		return d, fmt.Errorf("sluice: %s: want a precision of 1 to %d and a scale of 0 to the precision", typ(), maxPrecision)
	}
	syntax := func(why string) (decimalText, error) {
		return d, textError("ParseDecimal", text, typ(), ErrSyntax, why)
	}
	i, n := 0, len(text)
	if n > 0 && (text[0] == '-' || text[0] == '+') {
		d.neg = text[0] == '-'
		i++
	}
	var (
		digits, places int   // digits counted; zeros after the point not counted yet
		exp            int64 // of the last digit counted, then with the exponent
		leading        = true
		point, any     bool // past the point; a digit seen
	)
mantissa:
	for ; i < n; i++ {
		switch c := text[i]; {
		case c == '.':
			if point {
				return syntax("a second decimal point") // ClickHouse reads on, as if it were not there
			}
			point, leading = true, false
		case c == '0' && leading:
			any = true
		case c == '0' && point:
			any = true
			places++
		case '0' <= c && c <= '9':
			any, leading = true, false
			places++
			if digits+places > precision {
				if point {
					continue // cut, as is every digit after it
				}
				return d, textError("ParseDecimal", text, typ(), ErrRange, fmt.Sprintf("more than %d digits", precision))
			}
			digits += places
			if point {
				exp -= int64(places)
			}
			places = 0
			if d.first < 0 {
				d.first = i
			}
			d.end = i + 1
		case c == 'e' || c == 'E':
			e, ok := readExponent(text[i+1:])
			if !ok {
				return syntax("a malformed exponent")
			}
			exp += e
			break mantissa
		default:
			return syntax(fmt.Sprintf("unexpected %s at byte %d", quoteByte(c), i))
		}
	}
	if !any {
		return syntax("no digits")
	}
	if int64(digits)+exp > int64(precision-scale) {
		return d, textError("ParseDecimal", text, typ(), ErrRange, fmt.Sprintf("more than %d digits before the point", precision-scale))
	}
	if d.first < 0 { // zero
		d.first, d.end = 0, 0
		return d, nil
	}
	if shift := exp + int64(scale); shift >= 0 {
		d.zeros = int(shift)
	} else {
		// Cut the last -shift digits of text[first:end].
		for cut := -shift; cut > 0 && d.end > d.first; d.end-- {
			if text[d.end-1] != '.' {
				cut--
			}
		}
	}
	return d, nil
}

// readExponent reads an exponent as ClickHouse does: an optional sign and
// at least one digit, all of text, within int32.
func readExponent[T Text](text T) (int64, bool) {
	i, neg := 0, false
	if len(text) > 0 && (text[0] == '-' || text[0] == '+') {
		neg = text[0] == '-'
		i++
	}
	if i == len(text) {
		return 0, false
	}
	var e int64
	for ; i < len(text); i++ {
		c := text[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		e = 10*e + int64(c-'0')
		if e > 1<<31 {
			return 0, false
		}
	}
	if neg {
		e = -e
	}
	return e, e >= math.MinInt32 && e <= math.MaxInt32
}

// ParseUUID reads a UUID as ClickHouse does: 36 characters, 32 hex digits
// (either case) with dashes after the 8th, 12th, 16th and 20th
// ("01234567-89ab-cdef-0123-456789abcdef"), or the 32 hex digits alone.
// Anything else (braces, a "urn:uuid:" prefix, spaces) is refused with
// ErrSyntax. It returns the bytes in the order the text gives them, the
// order Row.UUID and FlatRow.UUID take, and allocates nothing unless it
// fails.
func ParseUUID[T Text](text T) ([16]byte, error) {
	var u [16]byte
	var dashes bool
	switch len(text) {
	case 32:
	case 36:
		dashes = text[8] == '-' && text[13] == '-' && text[18] == '-' && text[23] == '-'
		if !dashes {
			return u, textError("ParseUUID", text, "UUID", ErrSyntax, "want dashes after the 8th, 12th, 16th and 20th hex digits")
		}
	default:
		return u, textError("ParseUUID", text, "UUID", ErrSyntax, "want 36 characters, or 32 hex digits")
	}
	j := 0
	for i := range u {
		if dashes && (j == 8 || j == 13 || j == 18 || j == 23) {
			j++
		}
		hi, ok1 := unhex(text[j])
		lo, ok2 := unhex(text[j+1])
		if !ok1 || !ok2 {
			return u, textError("ParseUUID", text, "UUID", ErrSyntax, "a character that is not a hex digit")
		}
		u[i] = hi<<4 | lo
		j += 2
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// quoteByte is c for a message: quoted if ASCII, else in hex. (Quoting
// text[i:i+1] instead would make text escape, and a caller's string
// conversion allocate.)
func quoteByte(c byte) string {
	if c < 0x80 {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("0x%02x", c)
}

// textError is the error of a parser fn that refuses text as a value of
// typ, with the class (ErrSyntax or ErrRange) and why.
func textError[T Text](fn string, text T, typ string, class error, why string) error {
	const most = 64 // of the text, in the message
	s := string(text)
	if len(s) > most {
		s = s[:most] + "…"
	}
	return fmt.Errorf("sluice: %s: %s as %s: %w: %s", fn, strconv.Quote(s), typ, class, why)
}
