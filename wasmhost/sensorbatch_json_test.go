package wasmhost

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The C sensor-batch module with format=json must decode the JSON form of
// the corpus as the Go module examples/sensor-batch-json does: the same
// rows, byte for byte, and the same per-record errors, at the same byte, in
// both layouts of the table; its native build too.

// sensorJSON appends batch b of the workload's corpus in its JSON form
// (benchmarks/sensor's AppendJSON, from the same formulas as sensorAvro),
// in drain mode.
func sensorJSON(dst []byte, b uint64) []byte {
	units := [8]string{"count", "bytes", "ms", "drop", "ratio", "celsius", "volts", "rpm"}
	dst = append(dst, `{"batch_id":`...)
	dst = strconv.AppendUint(dst, b, 10)
	dst = append(dst, `,"sensor":"sensor-`...)
	dst = strconv.AppendUint(dst, b%1024, 10)
	dst = append(dst, `","region":`...)
	if b%10 == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = strconv.AppendUint(append(dst, `"region-`...), b%7, 10)
		dst = append(dst, '"')
	}
	dst = strconv.AppendInt(append(dst, `,"batch_ts_ms":`...), sensorBaseTsMs+int64(b), 10)
	dst = strconv.AppendInt(append(dst, `,"send_ts_us":`...), sensorBaseTsMs*1000+int64(b), 10)
	arr := func(key string, first bool, elem func(s uint64) []byte) {
		if !first {
			dst = append(dst, "],"...)
		}
		dst = append(dst, `"`+key+`":[`...)
		for s := uint64(0); s < 100; s++ {
			if s > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, elem(s)...)
		}
	}
	dst = append(dst, `,"events":{`...)
	arr("seq", true, func(s uint64) []byte { return strconv.AppendUint(nil, s, 10) })
	arr("name", false, func(s uint64) []byte {
		return append(strconv.AppendUint([]byte(`"metric_`), (b*31+s)%32, 10), '"')
	})
	arr("unit", false, func(s uint64) []byte { return []byte(`"` + units[(b*7+s)%8] + `"`) })
	arr("value", false, func(s uint64) []byte { return strconv.AppendUint(nil, (b*1000003+s*97)%2147483647, 10) })
	arr("quality", false, func(s uint64) []byte {
		if (b+s)%5 == 0 {
			return []byte("null")
		}
		return strconv.AppendFloat(nil, float64((b*13+s*7)%100)/100.0, 'g', -1, 64)
	})
	arr("tags", false, func(s uint64) []byte {
		t := []byte{'['}
		for j := uint64(0); j < (b+s)%4; j++ {
			if j > 0 {
				t = append(t, ',')
			}
			t = append(strconv.AppendUint(append(t, `"tag-`...), (b+s+j)%16, 10), '"')
		}
		return append(t, ']')
	})
	return append(dst, "]}}"...)
}

// sensorJSONSmall is a batch of two events with what the corpus lacks:
// whitespace, escapes, an unknown key of every kind of value, keys out of
// order.
const sensorJSONSmall = ` { "sensor" : "s\u00e9\"x" , "extra":{"a":[1,-2.5e+3,true,false,null,"\\\/\b\f\n\r\t\ud83d\ude00"],"":{}},
 "batch_id":3, "batch_ts_ms":1772000000000,"send_ts_us":5, "region":"r\ud800x",
 "events":{"tags":[["a","B\u00e9"],[]],"unit":["ms","rpm"],"name":["metric_z\u00e9","m\tx"],"seq":[0,65535],
  "value":[9223372036854775807,-9223372036854775808],"quality":[null,0.1234567890123456789],"more":[[]]} } `

// sensorJSONMutations is how many mutated records sensorJSONMalformed
// makes: 3000, or $SLUICE_JSON_MUTATIONS for a longer search.
var sensorJSONMutations = func() int {
	if n, err := strconv.Atoi(os.Getenv("SLUICE_JSON_MUTATIONS")); err == nil && n > 0 {
		return n
	}
	return 3000
}()

// sensorJSONMalformed are records each rule of the JSON decoder and of the
// row checks refuses, and edge cases it accepts: every truncation of a
// small batch, and hand-made records.
func sensorJSONMalformed() [][]byte {
	small := []byte(sensorJSONSmall)
	out := [][]byte{nil, []byte(" "), []byte("[]"), []byte("{}"), []byte("{"), []byte("nul"), []byte("\x00"), small}
	// Records that end inside a string, right after a backslash: the
	// scans must stop at the record's end.
	for _, r := range []string{`{"x":"\`, `{"x":"abcdefghijklmnop\`, `{"events":{"more":["\`, `{"sensor":"\`, `{"sensor":"abcdefghijklmnop\`,
		`{"x":"abcdefghijklmnop`, `{"x":12345678901234567`, `{"x":0.12345678901234567`} {
		out = append(out, []byte(r))
	}
	for i := 0; i < len(small); i++ {
		out = append(out, small[:i])
	}
	batch := func(hdr, events string) []byte {
		return []byte(`{"batch_id":1,"sensor":"s","region":"r","batch_ts_ms":1772000000000,"send_ts_us":5` + hdr + `,"events":{` + events + `}}`)
	}
	ev := func(seq, name, unit, value, quality, tags string) string {
		return `"seq":[` + seq + `],"name":[` + name + `],"unit":[` + unit + `],"value":[` + value + `],"quality":[` + quality + `],"tags":[` + tags + `]`
	}
	one := ev(`1`, `"m"`, `"u"`, `2`, `0.5`, `[]`)
	out = append(out,
		batch("", one), batch("", ev(``, ``, ``, ``, ``, ``)),
		batch(`,"batch_id":-1`, one), batch(`,"batch_ts_ms":-1`, one), batch(`,"batch_ts_ms":4294967296000`, one),
		batch(`,"batch_ts_ms":-2208988800001`, one), batch(`,"batch_ts_ms":10413792000000`, one),
		batch(`,"send_ts_us":10413792000000000`, one), batch(`,"region":null`, one),
		batch(`,"batch_id":01`, one), batch(`,"batch_id":1.0`, one), batch(`,"batch_id":1e3`, one),
		batch(`,"batch_id":-`, one), batch(`,"batch_id":"1"`, one), batch(`,"batch_id":18446744073709551615`, one),
		batch(`,"batch_id":99999999999999999999`, one), batch(`,"batch_id":9223372036854775808`, one),
		batch(`,"send_ts_us":-9223372036854775808`, one), batch(`,"send_ts_us":-9223372036854775809`, one),
		batch(`,"sensor":1`, one), batch(`,"sensor":"a\x01"`, one), batch(`,"sensor":"a\q"`, one),
		batch(`,"sensor":"\u12"`, one), batch(`,"sensor":"\udc00\ud800\ud800\u0041"`, one), batch(`,"region":"x\u0000"`, one),
		batch(`,"x":"a\q"`, one), batch(`,"x":"\u12g4"`, one), batch(`,"x":"a`+"\x1f"+`"`, one),
		batch(`,"x":`+strings.Repeat("[", 64)+strings.Repeat("]", 64), one),
		batch(`,"x":`+strings.Repeat("[", 65)+strings.Repeat("]", 65), one),
		batch(`,"x":`+strings.Repeat("[", 66)+strings.Repeat("]", 66), one),
		batch("", ev(`1`, `"m"`, `"u"`, `2`, `0.5`, strings.Repeat("[", 63)+strings.Repeat("]", 63))),
		batch("", ev(`1`, `"m"`, `"u"`, `2`, `0.5`, strings.Repeat("[", 64)+strings.Repeat("]", 64))),
		batch("", one+`,"more":`+strings.Repeat("[", 65)+strings.Repeat("]", 65)),
		batch("", one+`,"more":`+strings.Repeat("[", 66)+strings.Repeat("]", 66)),
		batch(`,"x":`+strings.Repeat(`{"a":`, 66)+"1"+strings.Repeat("}", 66), one),
		batch(`,"x":[1,]`, one), batch(`,"x":[1 2]`, one), batch(`,"x":{"a" 1}`, one), batch(`,"x":{"a":1,}`, one),
		batch(`,"x":{1:2}`, one), batch(`,"x":tru`, one), batch(`,"x":nulL`, one), batch(`,"x":fals`, one),
		batch(`,"x":-`, one), batch(`,"x":1.`, one), batch(`,"x":1e`, one), batch(`,"x":1e+`, one), batch(`,"x":00`, one),
		batch(`,"x\"\u00e9y":'a'`, one), batch(`,"x":\`, one), batch(`,"x":+1`, one), batch(`,"x":.5`, one),
		batch(`,"x":`+"\x7f", one), batch(`,"x":`+"\x80", one), batch(`,"x":`+"\xa0", one),
		batch(`,"x":`+"\xad", one), batch(`,"x":`+"\xe9", one), batch(`,"x":`+"\x07", one), batch(`,"x":`+"\x0b", one),
		batch(`,"x":`+"\x01", one), batch(`,"`+strings.Repeat("k", 5000)+`":}`, one),
		batch(`,"events":[]`, one), batch(`,"events":{"seq":1}`, one),
		batch("", `"seq":[1],"name":["m"],"unit":["u"],"value":[2],"quality":[0.5]`),
		batch("", `"seq":[1],"name":["m"],"unit":["u"],"value":[2],"quality":[0.5],"tags":[[]],"seq":[2]`),
		batch("", ev(`1,2`, `"m"`, `"u"`, `2`, `0.5`, `[]`)), batch("", ev(`1`, `"m","n"`, `"u"`, `2`, `0.5`, `[]`)),
		batch("", ev(`1,2`, `"m","n"`, `"u","v"`, `2,3`, `0.5,null`, `[],["t"]`)),
		batch("", ev(`65536`, `"m"`, `"u"`, `2`, `0.5`, `[]`)), batch("", ev(`-1`, `"m"`, `"u"`, `2`, `0.5`, `[]`)),
		batch("", ev(`2147483648`, `"m"`, `"u"`, `2`, `0.5`, `[]`)), batch("", ev(`-2147483649`, `"m"`, `"u"`, `2`, `0.5`, `[]`)),
		batch("", ev(`1.5`, `"m"`, `"u"`, `2`, `0.5`, `[]`)), batch("", ev(`"1"`, `"m"`, `"u"`, `2`, `0.5`, `[]`)),
		batch("", ev(`1`, `2`, `"u"`, `2`, `0.5`, `[]`)), batch("", ev(`1`, `"m"`, `null`, `2`, `0.5`, `[]`)),
		batch("", ev(`1`, `"m"`, `"u"`, `2.0`, `0.5`, `[]`)), batch("", ev(`1`, `"m"`, `"u"`, `2`, `"0.5"`, `[]`)),
		batch("", ev(`1`, `"m"`, `"u"`, `2`, `0.5`, `"t"`)), batch("", ev(`1`, `"m"`, `"u"`, `2`, `0.5`, `[1]`)),
		batch("", ev(`1`, `"m"`, `"u"`, `2`, `0.5`, `["a","b\n"]`)),
		batch("", ev(`1,70000`, `"m","n"`, `"u","drop"`, `2,3`, `0.5,null`, `[],[]`)),
		batch("", ev(`0,1,2`, `"m","n","o"`, `"drop","u","u"`, `2,3,4`, `0.5,0.19999,0.2`, `[],[],[]`)),
	)
	// Tags arrays and nulls beside and past the fast path's: white space,
	// escapes, other values, and malformed ones.
	for _, tags := range []string{`[ ]`, `[ "a" , "b" ]`, "[\n\"a\"\t]", `["a",]`, `["a" "b"]`, `["a",1]`, `[1,"a"]`,
		`["a\"b"]`, `["a","\u0041"]`, `["a",["b"]]`, `["a",null]`, `["a"`, `["a",`, `[`, `["a"}`, `["a`} {
		out = append(out, batch("", ev(`1,2`, `"m","n"`, `"u","v"`, `2,3`, `0.5,0.6`, `["x"],`+tags)))
	}
	for _, q := range []string{`nul`, `nulll`, `null `, `Null`, `n`} {
		out = append(out, batch("", ev(`1`, `"m"`, `"u"`, `2`, q, `[]`)))
	}
	// Integers of every length, read eight and sixteen digits at a time.
	for n := 1; n <= 20; n++ {
		d := "98765432109876543210"[:n]
		out = append(out, batch(`,"batch_id":`+d, one), batch(`,"send_ts_us":-`+d, one),
			batch("", ev(`1,2`, `"m","n"`, `"u","v"`, d+`,-`+d, `0.5,0.6`, `[],[]`)))
	}
	for _, q := range []string{"0", "-0", "1", "0.2", "0.19999999999999999", "0.2000000000000000000001", "1e400", "-1e400", "1e-400",
		"4.9e-324", "2.5E+3", "-2.5e-3", "123456789012345", "1234567890123456", "0.000000000000001", "1.7976931348623157e308",
		"1.7976931348623159e308", "0." + strings.Repeat("3", 100)} {
		out = append(out, batch("", ev(`1`, `"m"`, `"u"`, `2`, q, `[]`)))
	}
	// Seeded mutations of the small batch and of a batch of the corpus:
	// a byte replaced by one JSON cares about, inserted, or deleted.
	rng := rand.New(rand.NewPCG(18, 2026))
	special := []byte("{}[]\":,\\u0123456789.eE+-tnfl \t\n\x01\x7f\x80\xe9'")
	corpus := sensorJSON(nil, 7)
	for n := 0; n < sensorJSONMutations; n++ {
		m := append([]byte{}, small...)
		if n%3 == 2 {
			m = append([]byte{}, corpus...)
		}
		for k := 0; k <= rng.IntN(2); k++ {
			i := rng.IntN(len(m))
			c := special[rng.IntN(len(special))]
			switch rng.IntN(3) {
			case 0:
				m[i] = c
			case 1:
				m = append(m[:i], append([]byte{c}, m[i:]...)...)
			default:
				m = append(m[:i], m[i+1:]...)
			}
		}
		out = append(out, m)
	}
	return out
}

// TestSensorBatchCJSONMatchesGo runs examples/sensor-batch-json and the C
// module with format=json (wasm and native) on the JSON corpus (2000
// batches) and the malformed records, into each layout, and compares every
// record's rows, byte for byte, and error message.
func TestSensorBatchCJSONMatchesGo(t *testing.T) {
	r := newTestRuntime(t, Config{})
	goMod := load(t, r, "examples/sensor-batch-json", Limits{})
	cMod := loadBytes(t, r, "sensor-batch-c", cModuleWasm(t, "examples/sensor-batch-c"), Limits{})
	native := cModuleNative(t, "examples/sensor-batch-c")
	var corpus [][]byte
	for b := uint64(0); b < 2000; b++ {
		corpus = append(corpus, sensorJSON(nil, b))
	}
	inputs := map[string][][]byte{"corpus": corpus, "malformed": sensorJSONMalformed()}
	jsonParams := map[string]string{"format": "json"}
	for _, layout := range sensorLayouts {
		t.Run(layout.name, func(t *testing.T) {
			goIn := instantiate(t, goMod, InitConfig{Tables: []TableSchema{layout.table}})
			cIn := instantiate(t, cMod, InitConfig{Params: jsonParams, Tables: []TableSchema{layout.table}})
			if msg := native.Init(encodeInit(InitConfig{Params: jsonParams, Tables: []TableSchema{layout.table}})); msg != "" {
				t.Fatalf("native init: %s", msg)
			}
			for name, msgs := range inputs {
				want := transformInCalls(t, goIn, msgs)
				got := map[string][]recordResult{"C module": transformInCalls(t, cIn, msgs), "C module, native": transformNative(t, native, msgs)}
				rows, errs, distinct := 0, 0, map[string]bool{}
				for _, w := range want {
					rows += len(w.rows)
					if w.err != "" {
						errs++
						distinct[strings.TrimRightFunc(w.err, func(r rune) bool { return '0' <= r && r <= '9' })] = true
					}
				}
				switch {
				case name == "corpus" && (errs > 0 || rows < 2000*100*70/100 || rows > 2000*100*77/100):
					t.Fatalf("Go module, corpus: %d rows of 200000 events and %d errors, want about 73.5%% and none", rows, errs)
				case name == "malformed" && (errs < len(msgs)/2 || rows == 0 || len(distinct) < 40):
					t.Fatalf("Go module, malformed: %d of %d records fail, %d rows, %d distinct messages: the cases do not exercise the decoder",
						errs, len(msgs), rows, len(distinct))
				}
				t.Logf("%s: %d records, %d rows, %d fail in the Go module with %d distinct messages (offsets aside)", name, len(msgs), rows, errs, len(distinct))
				for port, g := range got {
					if len(g) != len(want) {
						t.Fatalf("%s, %s: %d records out, want %d", name, port, len(g), len(want))
					}
					bad := 0
					for i := range want {
						if !equalResult(want[i], g[i]) {
							if bad++; bad <= 10 {
								t.Errorf("%s, record %d (%q):\n\tGo module: %s\n\t%s: %s", name, i, head(msgs[i]), summary(want[i]), port, summary(g[i]))
							}
						}
					}
					if bad > 10 {
						t.Errorf("%s, %s: %d records differ in all", name, port, bad)
					}
				}
			}
		})
	}
}

// TestSensorBatchCFormatParam: the C module reads Avro by default and with
// format=avro, JSON with format=json, and refuses any other format.
func TestSensorBatchCFormatParam(t *testing.T) {
	r := newTestRuntime(t, Config{})
	cMod := loadBytes(t, r, "sensor-batch-c", cModuleWasm(t, "examples/sensor-batch-c"), Limits{})
	avro, json := sensorAvro(nil, 1), sensorJSON(nil, 1)
	for _, tt := range []struct {
		params           map[string]string
		avroOK, jsonOK   bool
		refused, wantErr string
	}{
		{params: nil, avroOK: true},
		{params: map[string]string{"format": "avro"}, avroOK: true},
		{params: map[string]string{"format": "json"}, jsonOK: true},
		{params: map[string]string{"format": "JSON"}, refused: `sensor-batch: the format parameter is "JSON", want avro or json`},
		{params: map[string]string{"format": ""}, refused: `sensor-batch: the format parameter is "", want avro or json`},
		{params: map[string]string{"format": strings.Repeat("x", 300)},
			refused: `sensor-batch: the format parameter is "` + strings.Repeat("x", 256) + `…", want avro or json`},
	} {
		in, err := cMod.Instantiate(context.Background(), InitConfig{Params: tt.params, Tables: []TableSchema{sensorTableModern}})
		if tt.refused != "" {
			if err == nil || !strings.Contains(err.Error(), tt.refused) {
				t.Errorf("params %v: init error %v, want one that says %q", tt.params, err, tt.refused)
			}
			continue
		}
		if err != nil {
			t.Fatalf("params %v: %v", tt.params, err)
		}
		res := transformInCalls(t, in, [][]byte{avro, json})
		in.Close(context.Background())
		for i, ok := range []bool{tt.avroOK, tt.jsonOK} {
			if got := res[i].err == "" && len(res[i].rows) > 0; got != ok {
				t.Errorf("params %v, record %d (%s): %s, want accepted = %v", tt.params, i, []string{"Avro", "JSON"}[i], summary(res[i]), ok)
			}
		}
	}
}
