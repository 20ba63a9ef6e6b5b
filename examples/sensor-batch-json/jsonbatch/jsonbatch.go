// Package jsonbatch decodes the JSON form of a SensorBatch: the shape
// ClickHouse 18.16's JSONEachRow reads into Nested columns, with the events
// as an object of parallel arrays:
//
//	{"batch_id":1,"sensor":"sensor-1","region":"region-1","batch_ts_ms":…,"send_ts_us":…,
//	 "events":{"seq":[0,…],"name":["metric_1",…],"unit":[…],"value":[…],
//	           "quality":[null,0.37,…],"tags":[[],["tag-1","tag-2"],…]}}
//
// It is a hand-written scanner (see BenchmarkDecoders for encoding/json on
// the same input) and allocates nothing per batch or event once its buffers
// have grown: strings without escapes alias the message, escaped ones are
// decoded into buffers the Decoder reuses. Keys may come in any order;
// unknown keys are skipped; a missing region is NULL (the Avro schema's
// default); every other field is required, and the six events arrays must
// have the same length. A Decoder is not safe for concurrent use.
package jsonbatch

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/sluicehq/sluice/examples/sensor-batch/sensor"
)

// The events arrays, in the order Next reads them.
const (
	aSeq = iota
	aName
	aUnit
	aValue
	aQuality
	aTags
	nArrays
)

var arrayNames = [nArrays]string{"seq", "name", "unit", "value", "quality", "tags"}

// arrayPaths are the arrays as errors name them, spelled out so that
// skipping an array, once per record, builds no string.
var arrayPaths = [nArrays]string{"events.seq", "events.name", "events.unit", "events.value", "events.quality", "events.tags"}

// maxDepth bounds the nesting of values the decoder skips.
const maxDepth = 64

// Decoder decodes one SensorBatch at a time: Reset reads the header and
// finds the six events arrays; Next walks them in step.
type Decoder struct {
	p     []byte
	cur   [nArrays]int  // offset of each array's next element
	ended [nArrays]bool // the array's closing bracket has been read
	err   error
	hdr   []byte // decoded escaped strings of the header
	ev    []byte // decoded escaped strings of the current event
	key   []byte // the current key, when it has escapes
}

type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return "json: " + e.msg + " at byte " + strconv.Itoa(e.off) }

func (d *Decoder) fail(off int, msg string) {
	if d.err == nil {
		d.err = &syntaxError{off: off, msg: msg}
	}
}

// Reset starts decoding msg and decodes its header into h. The decoder and
// h alias msg and the decoder's buffers.
func (d *Decoder) Reset(msg []byte, h *sensor.Header) error {
	d.p, d.err, d.hdr = msg, nil, d.hdr[:0]
	d.cur, d.ended = [nArrays]int{}, [nArrays]bool{}
	*h = sensor.Header{RegionNull: true}
	const (
		fBatchID = 1 << iota
		fSensor
		fBatchTs
		fSendTs
		fEvents
		fAll = fBatchID | fSensor | fBatchTs | fSendTs | fEvents
	)
	seen := 0
	i := d.ws(0)
	if i >= len(msg) || msg[i] != '{' {
		d.fail(i, "value is not a JSON object")
		return d.err
	}
	i = d.members(i+1, func(key []byte, i int) int {
		switch string(key) {
		case "batch_id":
			seen |= fBatchID
			h.BatchID, i = d.int(i, "batch_id")
		case "sensor":
			seen |= fSensor
			h.Sensor, d.hdr, i = d.str(i, d.hdr, "sensor")
		case "region":
			if d.lit(i, "null") {
				h.Region, h.RegionNull = nil, true
				return i + 4
			}
			h.Region, d.hdr, i = d.str(i, d.hdr, "region")
			h.RegionNull = false
		case "batch_ts_ms":
			seen |= fBatchTs
			h.BatchTsMs, i = d.int(i, "batch_ts_ms")
		case "send_ts_us":
			seen |= fSendTs
			h.SendTsUs, i = d.int(i, "send_ts_us")
		case "events":
			seen |= fEvents
			i = d.events(i)
		default:
			i = d.skip(i, 0, string(key))
		}
		return i
	})
	if d.err == nil {
		if i = d.ws(i); i != len(msg) {
			d.fail(i, "data after the object")
		}
	}
	if d.err == nil && seen != fAll {
		for _, f := range []struct {
			bit  int
			name string
		}{{fBatchID, "batch_id"}, {fSensor, "sensor"}, {fBatchTs, "batch_ts_ms"}, {fSendTs, "send_ts_us"}, {fEvents, "events"}} {
			if seen&f.bit == 0 {
				d.err = fmt.Errorf("json: the batch has no %q", f.name)
				break
			}
		}
	}
	return d.err
}

// events reads the events object at i, noting where each array starts.
func (d *Decoder) events(i int) int {
	if i >= len(d.p) || d.p[i] != '{' {
		d.fail(i, "events is not an object")
		return len(d.p)
	}
	var seen [nArrays]bool
	i = d.members(i+1, func(key []byte, i int) int {
		k := -1
		for j, n := range arrayNames {
			if string(key) == n {
				k = j
			}
		}
		if k < 0 {
			return d.skip(i, 0, "events."+string(key))
		}
		if i >= len(d.p) || d.p[i] != '[' {
			d.fail(i, arrayPaths[k]+" is not an array")
			return len(d.p)
		}
		seen[k] = true
		d.cur[k] = d.ws(i + 1)
		d.ended[k] = d.cur[k] < len(d.p) && d.p[d.cur[k]] == ']'
		return d.skip(i, 0, arrayPaths[k])
	})
	for k, ok := range seen {
		if !ok && d.err == nil {
			d.err = fmt.Errorf("json: the batch has no %s", arrayPaths[k])
		}
	}
	return i
}

// members reads the members of an object whose '{' precedes i, calling
// member with each key and the offset of its value; member returns the
// offset after the value. members returns the offset after the '}'.
func (d *Decoder) members(i int, member func(key []byte, i int) int) int {
	p := d.p
	i = d.ws(i)
	if i < len(p) && p[i] == '}' {
		return i + 1
	}
	var key []byte
	for d.err == nil {
		// A nested members call (skipping a value) may reuse d.key: key
		// is used only before the value is read.
		key, d.key, i = d.str(i, d.key[:0], "a key")
		if i = d.ws(i); d.err == nil && (i >= len(p) || p[i] != ':') {
			d.fail(i, "expected ':' after a key")
		}
		if d.err != nil {
			break
		}
		i = member(key, d.ws(i+1))
		if i = d.ws(i); d.err != nil {
			break
		}
		switch {
		case i < len(p) && p[i] == ',':
			i = d.ws(i + 1)
		case i < len(p) && p[i] == '}':
			return i + 1
		default:
			d.fail(i, "expected ',' or '}' in an object")
		}
	}
	return len(p)
}

// Next decodes the next event into e and reports whether there was one.
// After it returns false, Err says whether the batch ended cleanly.
func (d *Decoder) Next(e *sensor.Event) bool {
	if d.err != nil {
		return false
	}
	n := 0
	for _, end := range d.ended {
		if end {
			n++
		}
	}
	if n == nArrays {
		return false
	}
	if n > 0 {
		d.err = fmt.Errorf("json: the events arrays have different lengths")
		return false
	}
	d.ev = d.ev[:0]
	var v int64
	v, d.cur[aSeq] = d.int(d.cur[aSeq], "events.seq")
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(d.cur[aSeq], "events.seq: out of the range of an int")
	}
	e.Seq = int32(v)
	e.Name, d.ev, d.cur[aName] = d.str(d.cur[aName], d.ev, "events.name")
	e.Unit, d.ev, d.cur[aUnit] = d.str(d.cur[aUnit], d.ev, "events.unit")
	e.Value, d.cur[aValue] = d.int(d.cur[aValue], "events.value")
	if i := d.cur[aQuality]; d.lit(i, "null") {
		e.QualityNull, e.Quality, d.cur[aQuality] = true, 0, i+4
	} else {
		e.QualityNull = false
		e.Quality, d.cur[aQuality] = d.float(i, "events.quality")
	}
	e.Tags = e.Tags[:0]
	d.cur[aTags] = d.tags(d.cur[aTags], e)
	for k := range d.cur {
		d.cur[k] = d.next(d.cur[k], k)
	}
	return d.err == nil
}

// next moves past the ',' after an element, or notes the array's ']'.
func (d *Decoder) next(i, k int) int {
	i = d.ws(i)
	switch {
	case d.err != nil:
	case i < len(d.p) && d.p[i] == ',':
		return d.ws(i + 1)
	case i < len(d.p) && d.p[i] == ']':
		d.ended[k] = true
	default:
		d.fail(i, "expected ',' or ']' in "+arrayPaths[k])
	}
	return i
}

func (d *Decoder) tags(i int, e *sensor.Event) int {
	p := d.p
	if i >= len(p) || p[i] != '[' {
		d.fail(i, "events.tags: an element is not an array")
		return len(p)
	}
	if i = d.ws(i + 1); i < len(p) && p[i] == ']' {
		return i + 1
	}
	for d.err == nil {
		var t []byte
		t, d.ev, i = d.str(i, d.ev, "a tag")
		e.Tags = append(e.Tags, t)
		switch i = d.ws(i); {
		case d.err != nil:
		case i < len(p) && p[i] == ',':
			i = d.ws(i + 1)
		case i < len(p) && p[i] == ']':
			return i + 1
		default:
			d.fail(i, "expected ',' or ']' in a tags array")
		}
	}
	return len(p)
}

// Err is the first decoding error, if any.
func (d *Decoder) Err() error { return d.err }

func (d *Decoder) ws(i int) int {
	for i < len(d.p) {
		switch d.p[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (d *Decoder) lit(i int, s string) bool {
	return len(d.p)-i >= len(s) && string(d.p[i:i+len(s)]) == s
}

// int reads a JSON number that is an integer in the range of an int64.
func (d *Decoder) int(i int, what string) (int64, int) {
	p, start := d.p, i
	neg := i < len(p) && p[i] == '-'
	if neg {
		i++
	}
	var u uint64
	digits := i
	for ; i < len(p) && '0' <= p[i] && p[i] <= '9'; i++ {
		if u > (math.MaxUint64-9)/10 {
			d.fail(start, what+": integer out of range")
			return 0, len(p)
		}
		u = u*10 + uint64(p[i]-'0')
	}
	switch {
	case i == digits:
		d.fail(start, what+": not a number")
	case p[digits] == '0' && i-digits > 1:
		d.fail(start, what+": leading zero")
	case i < len(p) && (p[i] == '.' || p[i] == 'e' || p[i] == 'E'):
		d.fail(start, what+": not an integer")
	case !neg && u > math.MaxInt64, neg && u > 1<<63:
		d.fail(start, what+": integer out of range")
	default:
		if neg {
			return -int64(u), i
		}
		return int64(u), i
	}
	return 0, len(p)
}

// number scans the JSON number at i and returns the offset after it, or
// -1 when it is not valid number syntax.
func (d *Decoder) number(i int) int {
	p := d.p
	if i < len(p) && p[i] == '-' {
		i++
	}
	digits := i
	for i < len(p) && '0' <= p[i] && p[i] <= '9' {
		i++
	}
	if i == digits || p[digits] == '0' && i-digits > 1 {
		return -1
	}
	if i < len(p) && p[i] == '.' {
		i++
		f := i
		for i < len(p) && '0' <= p[i] && p[i] <= '9' {
			i++
		}
		if i == f {
			return -1
		}
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		f := i
		for i < len(p) && '0' <= p[i] && p[i] <= '9' {
			i++
		}
		if i == f {
			return -1
		}
	}
	return i
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// float reads a JSON number.
func (d *Decoder) float(i int, what string) (float64, int) {
	p, start := d.p, i
	end := d.number(i)
	if end < 0 {
		d.fail(start, what+": not a number")
		return 0, len(p)
	}
	// Fast path (Clinger's): at most 15 significant digits and no
	// exponent: the mantissa and the power of ten are exact in a float64,
	// so one division is correctly rounded, as ParseFloat would be.
	neg := p[i] == '-'
	if neg {
		i++
	}
	var m uint64
	digits, frac, dot := 0, 0, false
	for ; i < end; i++ {
		c := p[i]
		switch {
		case c == '.':
			dot = true
			continue
		case c < '0' || c > '9':
			digits = 99 // an exponent: the slow path
		}
		m = m*10 + uint64(c-'0')
		digits++
		if dot {
			frac++
		}
	}
	if digits <= 15 {
		f := float64(m) / pow10[frac]
		if neg {
			f = -f
		}
		return f, end
	}
	// unsafe.String spares a copy per value; the span is valid syntax.
	f, err := strconv.ParseFloat(unsafe.String(&p[start], end-start), 64)
	if err != nil {
		d.fail(start, what+": number out of range")
		return 0, len(p)
	}
	return f, end
}

// str reads a JSON string. Without escapes it aliases the message; with
// them it is decoded onto buf, which is returned grown.
func (d *Decoder) str(i int, buf []byte, what string) ([]byte, []byte, int) {
	p := d.p
	if i >= len(p) || p[i] != '"' {
		d.fail(i, what+": not a string")
		return nil, buf, len(p)
	}
	start := i + 1
	for i = start; i < len(p); i++ {
		switch c := p[i]; {
		case c == '"':
			return p[start:i:i], buf, i + 1
		case c == '\\':
			return d.unescape(start, i, buf, what)
		case c < 0x20:
			d.fail(i, what+": control character in a string")
			return nil, buf, len(p)
		}
	}
	d.fail(start-1, what+": unterminated string")
	return nil, buf, len(p)
}

func (d *Decoder) unescape(start, i int, buf []byte, what string) ([]byte, []byte, int) {
	p := d.p
	from := len(buf)
	buf = append(buf, p[start:i]...)
	for i < len(p) {
		c := p[i]
		switch {
		case c == '"':
			return buf[from:len(buf):len(buf)], buf, i + 1
		case c < 0x20:
			d.fail(i, what+": control character in a string")
			return nil, buf, len(p)
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(p) {
			break
		}
		switch p[i+1] {
		case '"', '\\', '/':
			buf = append(buf, p[i+1])
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := hex4(p, i+2)
			if !ok {
				d.fail(i, what+": bad \\u escape")
				return nil, buf, len(p)
			}
			i += 6
			if 0xd800 <= r && r < 0xdc00 { // a high surrogate: a low one should follow
				if lo, ok := hex4(p, i+2); ok && i+1 < len(p) && p[i] == '\\' && p[i+1] == 'u' && 0xdc00 <= lo && lo < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
					i += 6
				} else {
					r = utf8.RuneError
				}
			} else if 0xdc00 <= r && r < 0xe000 {
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
			continue
		default:
			d.fail(i, what+": bad escape")
			return nil, buf, len(p)
		}
		i += 2
	}
	d.fail(start-1, what+": unterminated string")
	return nil, buf, len(p)
}

func hex4(p []byte, i int) (rune, bool) {
	if i+4 > len(p) {
		return 0, false
	}
	var r rune
	for _, c := range p[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skip skips the value at i and returns the offset after it.
func (d *Decoder) skip(i, depth int, what string) int {
	p := d.p
	if depth > maxDepth {
		d.fail(i, what+": nested too deeply")
		return len(p)
	}
	if i >= len(p) {
		d.fail(i, what+": unexpected end of the message")
		return len(p)
	}
	switch c := p[i]; {
	case c == '"':
		for i++; i < len(p); i++ {
			switch p[i] {
			case '"':
				return i + 1
			case '\\':
				if i+1 < len(p) && p[i+1] == 'u' {
					if _, ok := hex4(p, i+2); !ok {
						d.fail(i, what+": bad \\u escape")
						return len(p)
					}
					i += 5
				} else if i+1 < len(p) && strings.IndexByte(`"\\/bfnrt`, p[i+1]) < 0 {
					d.fail(i, what+": bad escape")
					return len(p)
				} else {
					i++
				}
			default:
				if p[i] < 0x20 {
					d.fail(i, what+": control character in a string")
					return len(p)
				}
			}
		}
		d.fail(i, what+": unterminated string")
	case c == '{':
		return d.members(i+1, func(_ []byte, i int) int { return d.skip(i, depth+1, what) })
	case c == '[':
		if i = d.ws(i + 1); i < len(p) && p[i] == ']' {
			return i + 1
		}
		for d.err == nil {
			i = d.ws(d.skip(i, depth+1, what))
			switch {
			case d.err != nil:
			case i < len(p) && p[i] == ',':
				i = d.ws(i + 1)
			case i < len(p) && p[i] == ']':
				return i + 1
			default:
				d.fail(i, what+": expected ',' or ']' in an array")
			}
		}
	case c == 't' && d.lit(i, "true"), c == 'n' && d.lit(i, "null"):
		return i + 4
	case c == 'f' && d.lit(i, "false"):
		return i + 5
	case c == '-' || '0' <= c && c <= '9':
		end := d.number(i)
		if end < 0 {
			d.fail(i, what+": not a number")
			return len(p)
		}
		return end
	default:
		d.fail(i, what+": unexpected character "+strconv.QuoteRune(rune(c)))
	}
	return len(p)
}
