// Package quote decodes a quote, one JSON object per Kafka record, and
// derives what the end-of-day table keeps of it. It is plain Go with no
// dependency, so it runs natively in tests and in the wasm module alike,
// and it allocates nothing per quote once its buffers have grown.
//
// A quote is an object with
//
//	"symbol": a non-empty string of at most 32 bytes;
//	"bid", "ask": positive prices, JSON numbers with at most four decimals
//	              (trailing zeros aside) and below 10^13, ask >= bid;
//	"ts": the quote's time, integer milliseconds since the Unix epoch,
//	      before 2149-06-06 (the last day a ClickHouse Date holds);
//	"say": optional free text.
//
// Other keys are skipped (their values must still be valid JSON); a key
// given twice is an error.
package quote

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// PriceScale is the number of decimals prices carry: Bid and Ask are in
// units of 10^-4.
const PriceScale = 4

const (
	maxSymbolBytes = 32
	// maxPrice bounds unscaled prices (exclusive): Decimal(18, 4) holds
	// them, and the mid in units of 10^-5, (bid + ask) * 5, fits an int64.
	maxPrice = 1e17
	msPerDay = 86_400_000
	// maxTS is the first millisecond after the last day of a Date.
	maxTS = 65536 * msPerDay
	// maxDepth bounds the nesting of skipped values.
	maxDepth = 64
)

// Quote is one decoded quote. Symbol and Say alias the decoded record or
// the Quote's own buffers: they are valid until the next Parse.
type Quote struct {
	Symbol   []byte
	Bid, Ask int64 // units of 10^-PriceScale
	TS       int64 // milliseconds since the Unix epoch
	Say      []byte

	symbolBuf, sayBuf, keyBuf []byte // unescaped strings, reused
}

// Day is the quote's UTC day, in days since 1970-01-01.
func (q *Quote) Day() uint16 { return uint16(q.TS / msPerDay) }

// MidE5 is the mid price, (bid + ask) / 2, in units of 10^-5: exact, one
// decimal more than the prices.
func (q *Quote) MidE5() int64 { return (q.Bid + q.Ask) * 5 }

// Spread is ask - bid in units of 10^-PriceScale.
func (q *Quote) Spread() int64 { return q.Ask - q.Bid }

// SyntaxError is input that is not valid JSON, at Offset. Valid JSON that
// is not a quote fails with another error.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

// Parse decodes the JSON object b into q, overwriting every field.
func Parse(b []byte, q *Quote) error {
	*q = Quote{symbolBuf: q.symbolBuf[:0], sayBuf: q.sayBuf[:0], keyBuf: q.keyBuf[:0]}
	d := decoder{b: b}
	var seen [4]bool // symbol, bid, ask, ts
	seenSay := false
	d.space()
	if !d.take('{') {
		return errors.New("a quote is a JSON object")
	}
	d.space()
	if !d.take('}') {
		for {
			d.space()
			key, escaped, err := d.rawString()
			if err != nil {
				return err
			}
			if escaped {
				q.keyBuf = unescape(q.keyBuf[:0], key)
				key = q.keyBuf
			}
			d.space()
			if !d.take(':') {
				return d.syntax("want ':' after a key")
			}
			d.space()
			field := -1
			switch string(key) {
			case "symbol":
				field = 0
			case "bid":
				field = 1
			case "ask":
				field = 2
			case "ts":
				field = 3
			}
			switch {
			case field >= 0 && seen[field], string(key) == "say" && seenSay:
				return fmt.Errorf("key %q given twice", key)
			case field >= 0:
				seen[field] = true
			}
			switch field {
			case 0:
				if q.Symbol, err = d.str(&q.symbolBuf, "symbol"); err == nil {
					err = checkSymbol(q.Symbol)
				}
			case 1:
				q.Bid, err = d.price("bid")
			case 2:
				q.Ask, err = d.price("ask")
			case 3:
				q.TS, err = d.millis()
			default:
				if string(key) == "say" {
					seenSay = true
					q.Say, err = d.str(&q.sayBuf, "say")
				} else {
					err = d.skip(0)
				}
			}
			if err != nil {
				return err
			}
			d.space()
			if d.take('}') {
				break
			}
			if !d.take(',') {
				return d.syntax("want ',' or '}' after a value")
			}
		}
	}
	d.space()
	if d.i != len(b) {
		return d.syntax("trailing data after the object")
	}
	for i, name := range [...]string{"symbol", "bid", "ask", "ts"} {
		if !seen[i] {
			return fmt.Errorf("no %q", name)
		}
	}
	if q.Ask < q.Bid {
		return fmt.Errorf("crossed quote: ask %s is below bid %s", FormatPrice(q.Ask), FormatPrice(q.Bid))
	}
	return nil
}

func checkSymbol(s []byte) error {
	if len(s) == 0 {
		return errors.New("empty symbol")
	}
	if len(s) > maxSymbolBytes {
		return fmt.Errorf("symbol of %d bytes, more than %d", len(s), maxSymbolBytes)
	}
	return nil
}

// FormatPrice writes an unscaled price with its PriceScale decimals.
func FormatPrice(unscaled int64) string {
	s := strconv.FormatInt(unscaled, 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	for len(s) <= PriceScale {
		s = "0" + s
	}
	s = s[:len(s)-PriceScale] + "." + s[len(s)-PriceScale:]
	if neg {
		s = "-" + s
	}
	return s
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) syntax(msg string) error { return &SyntaxError{Offset: d.i, Msg: msg} }

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) take(c byte) bool {
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// rawString scans the string at d.i and returns its bytes between the
// quotes, undecoded, and whether it holds an escape.
func (d *decoder) rawString() (raw []byte, escaped bool, err error) {
	if !d.take('"') {
		return nil, false, d.syntax("want a string")
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			raw = d.b[start:d.i]
			d.i++
			return raw, escaped, nil
		case c == '\\':
			escaped = true
			d.i++
			if d.i >= len(d.b) {
				return nil, false, d.syntax("unterminated escape")
			}
			switch d.b[d.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i++
			case 'u':
				if d.i+5 > len(d.b) {
					return nil, false, d.syntax(`short \u escape`)
				}
				for _, h := range d.b[d.i+1 : d.i+5] {
					if unhex(h) < 0 {
						return nil, false, d.syntax(`bad hex digit in a \u escape`)
					}
				}
				d.i += 5
			default:
				return nil, false, d.syntax("unknown escape")
			}
		case c < 0x20:
			return nil, false, d.syntax("control character in a string")
		default:
			d.i++
		}
	}
	return nil, false, d.syntax("unterminated string")
}

// str decodes a string value: the input itself when it has no escape,
// else its decoding appended to *buf.
func (d *decoder) str(buf *[]byte, field string) ([]byte, error) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, fmt.Errorf("%s: want a string", field)
	}
	raw, escaped, err := d.rawString()
	if err != nil || !escaped {
		return raw, err
	}
	out := unescape((*buf)[:0], raw)
	*buf = out
	return out, nil
}

// unescape decodes raw, which rawString has checked. An unpaired
// surrogate becomes U+FFFD, as encoding/json does.
func unescape(out, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[i+1:])
			i += 4
			if r >= 0xD800 && r < 0xDC00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if lo := hex4(raw[i+3:]); lo >= 0xDC00 && lo < 0xE000 {
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					i += 6
				}
			}
			if r >= 0xD800 && r < 0xE000 {
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return out
}

func unhex(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func hex4(b []byte) rune {
	return unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3])
}

// number scans a JSON number at d.i and returns its integer digits, its
// fraction digits (without the point) and whether it has a sign or an
// exponent.
func (d *decoder) number() (whole, frac []byte, signed, exp bool, err error) {
	start := d.i
	if d.take('-') {
		signed = true
	}
	ws := d.i
	switch {
	case d.take('0'):
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.digits()
	default:
		d.i = start
		return nil, nil, false, false, d.syntax("want a number")
	}
	whole = d.b[ws:d.i]
	if d.take('.') {
		fs := d.i
		if d.digits() == 0 {
			return nil, nil, false, false, d.syntax("want a digit after '.'")
		}
		frac = d.b[fs:d.i]
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		exp = true
		d.i++
		if !d.take('+') {
			d.take('-')
		}
		if d.digits() == 0 {
			return nil, nil, false, false, d.syntax("want a digit in the exponent")
		}
	}
	return whole, frac, signed, exp, nil
}

func (d *decoder) digits() int {
	n := 0
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
		n++
	}
	return n
}

// isNumber reports whether a number starts at d.i.
func (d *decoder) isNumber() bool {
	return d.i < len(d.b) && (d.b[d.i] == '-' || d.b[d.i] >= '0' && d.b[d.i] <= '9')
}

// price decodes a price into units of 10^-PriceScale.
func (d *decoder) price(field string) (int64, error) {
	if !d.isNumber() {
		return 0, fmt.Errorf("%s: want a number", field)
	}
	start := d.i
	whole, frac, signed, exp, err := d.number()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	text := d.b[start:d.i]
	switch {
	case signed:
		return 0, fmt.Errorf("%s %s: a price must be positive", field, text)
	case exp:
		return 0, fmt.Errorf("%s %s: write a price without an exponent", field, text)
	}
	for len(frac) > PriceScale && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	if len(frac) > PriceScale {
		return 0, fmt.Errorf("%s %s: more than %d decimals", field, text, PriceScale)
	}
	var v int64
	for _, c := range whole {
		v = v*10 + int64(c-'0')
		if v >= maxPrice {
			return 0, fmt.Errorf("%s %s: too large", field, text)
		}
	}
	for i := range PriceScale {
		v *= 10
		if i < len(frac) {
			v += int64(frac[i] - '0')
		}
		if v >= maxPrice {
			return 0, fmt.Errorf("%s %s: too large", field, text)
		}
	}
	if v == 0 {
		return 0, fmt.Errorf("%s %s: a price must be positive", field, text)
	}
	return v, nil
}

// millis decodes ts.
func (d *decoder) millis() (int64, error) {
	if !d.isNumber() {
		return 0, errors.New("ts: want a number")
	}
	start := d.i
	whole, frac, signed, exp, err := d.number()
	if err != nil {
		return 0, fmt.Errorf("ts: %w", err)
	}
	text := d.b[start:d.i]
	if signed || exp || frac != nil {
		return 0, fmt.Errorf("ts %s: want whole milliseconds since 1970, without sign or exponent", text)
	}
	var v int64
	for _, c := range whole {
		v = v*10 + int64(c-'0')
		if v >= maxTS {
			return 0, fmt.Errorf("ts %s: after 2149-06-06, the last day of a Date", text)
		}
	}
	return v, nil
}

// skip scans any JSON value.
func (d *decoder) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("a value at byte %d is nested more than %d deep", d.i, maxDepth)
	}
	if d.i >= len(d.b) {
		return d.syntax("want a value")
	}
	switch c := d.b[d.i]; {
	case c == '"':
		_, _, err := d.rawString()
		return err
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.i++
		d.space()
		if d.take(end) {
			return nil
		}
		for {
			d.space()
			if c == '{' {
				if _, _, err := d.rawString(); err != nil {
					return err
				}
				d.space()
				if !d.take(':') {
					return d.syntax("want ':' after a key")
				}
				d.space()
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			d.space()
			if d.take(end) {
				return nil
			}
			if !d.take(',') {
				return d.syntax("want ',' or " + strconv.QuoteRune(rune(end)))
			}
		}
	case c == '-' || c >= '0' && c <= '9':
		_, _, _, _, err := d.number()
		return err
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return nil
			}
		}
		return d.syntax("want a value")
	}
}
