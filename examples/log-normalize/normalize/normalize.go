// Package normalize turns one JSON log line into the fields of a row of the
// logs table: timestamp, service, normalized level, message template and its
// fingerprint, message, and the other fields as sorted attributes.
//
// It is plain Go with no dependency beyond the standard library, so the
// sluice module (package main beside it) and native tests and benchmarks
// share it. It is written for the hot path: a hand-written JSON scanner and
// template scanner, no regexp, no reflection, and no allocation once an
// Entry's buffers have grown.
package normalize

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// Attr is one attribute: a top-level field other than ts, level, service
// and msg. A string value is decoded; any other value is its compact JSON
// text (42, true, null, {"a":[1,2]}).
type Attr struct {
	Key, Value []byte
}

// Entry is a normalized log line. Reuse one Entry for many lines: its slices
// alias the input value and buffers of the Entry, and are valid until the
// next Normalize with the same Entry. Do not modify them.
type Entry struct {
	Time        int64  // seconds since the Unix epoch, rounded down
	Service     []byte // "unknown" when missing, null or empty
	Level       string // one of the Level constants
	Msg         []byte
	Template    []byte // see AppendTemplate
	Fingerprint uint64 // Fingerprint(Template)
	Attrs       []Attr // sorted by key; of duplicate keys, the last wins

	arena []byte // decoded strings and compacted JSON
	tmpl  []byte
}

// The errors of records that are not log lines.
var (
	ErrNotObject = errors.New("value is not a JSON object")
	ErrNoMsg     = errors.New(`log line has no "msg" field (or it is null)`)
)

var unknownService = []byte("unknown")

// Normalize parses value, a JSON object, into e:
//
//   - ts: an RFC 3339 string, or a number of seconds, milliseconds,
//     microseconds or nanoseconds since the epoch (told apart by size; see
//     parseEpoch), as a number or a string. Missing or null: kafkaTsMillis.
//     Anything else is an error.
//   - level: normalized by NormalizeLevel; a number by the pino/bunyan scale
//     (30 is info); missing or null is info; another type is unknown.
//   - service: missing, null or "" is "unknown"; a non-string is its JSON text.
//   - msg: required (missing or null is ErrNoMsg); a non-string is its JSON text.
//   - every other field goes to Attrs.
//
// A value that is not a JSON object is ErrNotObject; malformed JSON is a
// *SyntaxError; in both cases e is left in an unspecified state.
func Normalize(value []byte, kafkaTsMillis int64, e *Entry) error {
	s := scanner{p: value, arena: e.arena[:0]}
	err := e.parse(&s, kafkaTsMillis)
	e.arena = s.arena // keep the grown buffer for the next line
	return err
}

func (e *Entry) parse(s *scanner, kafkaTsMillis int64) error {
	e.Attrs = e.Attrs[:0]
	var ts, level, service, msg field
	s.ws()
	if s.i >= len(s.p) || s.p[s.i] != '{' {
		return ErrNotObject
	}
	s.i++
	if !s.next('}') {
		for {
			s.ws()
			if s.i >= len(s.p) || s.p[s.i] != '"' {
				return s.fail("expected a string key")
			}
			key, err := s.str()
			if err != nil {
				return err
			}
			if !s.next(':') {
				return s.fail("expected ':'")
			}
			var f field
			s.ws()
			if s.i < len(s.p) && s.p[s.i] == '"' {
				f.str = true
				f.val, err = s.str()
			} else {
				f.val, err = s.skip(0)
			}
			if err != nil {
				return err
			}
			f.set = !(!f.str && string(f.val) == "null")
			switch string(key) {
			case "ts":
				ts = f
			case "level":
				level = f
			case "service":
				service = f
			case "msg":
				msg = f
			default:
				v := f.val
				if !f.str && len(v) > 0 && (v[0] == '{' || v[0] == '[') {
					a0 := len(s.arena)
					s.arena = appendCompact(s.arena, v)
					v = s.arena[a0:len(s.arena):len(s.arena)]
				}
				e.Attrs = append(e.Attrs, Attr{Key: key, Value: v})
			}
			if s.next(',') {
				continue
			}
			if s.next('}') {
				break
			}
			return s.fail("expected ',' or '}'")
		}
	}
	s.ws()
	if s.i != len(s.p) {
		return s.fail("unexpected data after the object")
	}

	if !msg.set {
		return ErrNoMsg
	}
	e.Msg = s.text(msg)

	switch {
	case !ts.set:
		e.Time = floorDiv(kafkaTsMillis, 1000)
	case ts.str:
		t, ok := parseTime(ts.val)
		if !ok {
			return fmt.Errorf("ts %q is neither RFC 3339 nor a number of (milli)seconds since the epoch", ts.val)
		}
		e.Time = t
	default:
		t, ok := parseEpoch(ts.val)
		if !ok {
			return fmt.Errorf("ts %s is neither RFC 3339 nor a number of (milli)seconds since the epoch", ts.val)
		}
		e.Time = t
	}

	switch {
	case !level.set:
		e.Level = LevelInfo
	case level.str:
		e.Level = NormalizeLevel(level.val)
	case len(level.val) > 0 && (level.val[0] == '-' || level.val[0] >= '0' && level.val[0] <= '9'):
		e.Level = numericLevel(level.val)
	default:
		e.Level = LevelUnknown
	}

	e.Service = unknownService[:len(unknownService):len(unknownService)]
	if service.set && len(service.val) > 0 {
		e.Service = s.text(service)
	}

	e.tmpl = AppendTemplate(e.tmpl[:0], e.Msg)
	e.Template = e.tmpl[:len(e.tmpl):len(e.tmpl)]
	e.Fingerprint = Fingerprint(e.Template)

	if len(e.Attrs) > 1 {
		slices.SortStableFunc(e.Attrs, func(a, b Attr) int { return bytes.Compare(a.Key, b.Key) })
		// Of equal keys, keep the last (the stable sort kept input order).
		out := e.Attrs[:0]
		for i, a := range e.Attrs {
			if i+1 < len(e.Attrs) && bytes.Equal(a.Key, e.Attrs[i+1].Key) {
				continue
			}
			out = append(out, a)
		}
		e.Attrs = out
	}
	return nil
}

// field is a top-level value: a decoded string, or raw JSON text.
type field struct {
	val []byte
	str bool
	set bool // present and not null
}

// text is a field as text: a string as decoded, anything else compacted.
func (s *scanner) text(f field) []byte {
	if f.str || len(f.val) == 0 || f.val[0] != '{' && f.val[0] != '[' {
		return f.val
	}
	a0 := len(s.arena)
	s.arena = appendCompact(s.arena, f.val)
	return s.arena[a0:len(s.arena):len(s.arena)]
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
