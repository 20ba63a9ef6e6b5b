package records

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"

	"github.com/sluicehq/sluice/wasmhost"
)

// ReadJSONL reads test records, one per line, as `sluice module
// test` and activation dry runs take them: a line {"value": …, "key": …,
// "headers": {…}, "timestamp": ms, "offset": n} (value required, no other
// fields) is a Kafka record; any other non-blank line is taken whole as a
// record's value. Records get offsets 0, 1, … and timestamp defaultTs
// unless the line says otherwise. lines are the records' 1-based line
// numbers.
func ReadJSONL(r io.Reader, defaultTs int64) (recs []wasmhost.Record, lines []int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		rec := wasmhost.Record{Offset: int64(len(recs)), Timestamp: defaultTs}
		if !parseEnvelope(line, &rec) {
			rec.Value = bytes.Clone(line)
		}
		recs = append(recs, rec)
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return recs, lines, nil
}

// parseEnvelope fills rec from a record envelope line and reports whether
// the line is one. A value or key that is not a JSON string is taken as its
// JSON text.
func parseEnvelope(line []byte, rec *wasmhost.Record) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m["value"] == nil {
		return false
	}
	env := *rec
	for k, raw := range m {
		switch k {
		case "value", "key":
			var s string
			b := []byte(raw)
			if json.Unmarshal(raw, &s) == nil {
				b = []byte(s)
			} else if string(raw) == "null" {
				b = nil
			}
			if k == "value" {
				env.Value = b
			} else {
				env.Key = b
			}
		case "headers":
			var h map[string]string
			if json.Unmarshal(raw, &h) != nil {
				return false
			}
			for hk, hv := range h {
				env.Headers = append(env.Headers, wasmhost.Header{Key: hk, Value: []byte(hv)})
			}
		case "timestamp":
			if json.Unmarshal(raw, &env.Timestamp) != nil {
				return false
			}
		case "offset":
			if json.Unmarshal(raw, &env.Offset) != nil {
				return false
			}
		default:
			return false
		}
	}
	*rec = env
	return true
}
