package main

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/examples/sensor-batch/table/tabletest"
	"github.com/sluicehq/sluice/guest-sdk/go/sluicetest"
)

const testdata = "../sensor-batch/testdata/"

// TestGolden runs the JSON form of the golden corpus through the module
// and compares every row with the rows the workload's formulas give: the
// same rows.txt the Avro module must produce.
func TestGolden(t *testing.T) {
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.Table18)
	rows := tabletest.Rows(t, in, tabletest.ReadCorpus(t, testdata+"json.bin"))
	tabletest.CheckGolden(t, rows, testdata+"rows.txt")
}

// TestGoldenModern is TestGolden into the modern layout (DateTime64).
func TestGoldenModern(t *testing.T) {
	in := tabletest.NewInstance(t, &module{}, nil, tabletest.TableModern)
	rows := tabletest.RowsIn(t, in, tabletest.ReadCorpus(t, testdata+"json.bin"), tabletest.TableModern)
	tabletest.CheckGolden(t, rows, testdata+"rows.txt")
}

func run(t *testing.T, values ...string) []sluicetest.Result {
	t.Helper()
	msgs := make([][]byte, len(values))
	for i, v := range values {
		msgs[i] = []byte(v)
	}
	return tabletest.Results(t, tabletest.NewInstance(t, &module{}, nil, tabletest.Table18), msgs)
}

func rowsOf(t *testing.T, r sluicetest.Result) []string {
	t.Helper()
	if r.Failed {
		t.Fatalf("record failed: %s", r.Err)
	}
	var out []string
	for _, row := range r.Rows {
		v, err := sluicetest.DecodeRow(tabletest.Table18.Columns, row.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tabletest.RowText(v))
	}
	return out
}

// TestShapes: keys in any order, white space, unknown keys skipped, a
// missing region is NULL, escaped strings decoded.
func TestShapes(t *testing.T) {
	res := run(t,
		` { "events" : { "tags":[ [ "a\"b", "\u00e9\ud83d\ude80" ] , [] ], "quality" : [ null , 0.25 ],
		   "value":[ -7 , 7e0 ], "unit":["ms","ms"], "name":["metric_\u0061","x"], "seq":[2,3], "extra":{"a":[1,{"b":null}]} },
		  "send_ts_us":42, "sensor":"s\\1", "batch_ts_ms":1772000000123, "batch_id":5, "other":[true,false] } `,
		`{"batch_id":6,"sensor":"s","region":"r\n","batch_ts_ms":0,"send_ts_us":0,"events":{"seq":[],"name":[],"unit":[],"value":[],"quality":[],"tags":[]}}`,
	)
	if !res[0].Failed || !strings.Contains(res[0].Err, "events.value: not an integer") {
		t.Errorf("7e0 as an integer: %+v", res[0])
	}
	got := rowsOf(t, run(t, strings.Replace(`{"events":{"tags":[["a\"b","\u00e9\ud83d\ude80"],[]],"quality":[null,0.25],`+
		`"value":[-7,7],"unit":["ms","ms"],"name":["metric_\u0061","x"],"seq":[2,3],"extra":{"a":[1,{"b":null}]}},`+
		`"send_ts_us":42,"sensor":"s\\1","batch_ts_ms":1772000000123,"batch_id":5,"other":[true,false]}`, ",", " ,\n ", -1))[0])
	want := []string{
		"5\t2\ts\\1\t\tMETRIC_A\tms\t-7\t-2333\tNULL\t['a\"b','é🚀']\t1772000000\t123\t42",
		"5\t3\ts\\1\t\tX\tms\t7\t1750\t0.25\t[]\t1772000000\t123\t42",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := res[1]; r.Failed || len(r.Rows) != 0 {
		t.Errorf("empty events: %+v", r)
	}
}

func TestMalformed(t *testing.T) {
	const ev = `"events":{"seq":[0],"name":["n"],"unit":["u"],"value":[1],"quality":[0.5],"tags":[[]]}`
	good := `{"batch_id":1,"sensor":"s","batch_ts_ms":0,"send_ts_us":0,` + ev + `}`
	for _, tt := range []struct{ value, want string }{
		{``, "json: value is not a JSON object at byte 0"},
		{`[1]`, "json: value is not a JSON object"},
		{`{"batch_id":1}`, `json: the batch has no "sensor"`},
		{`{"batch_id":1,"sensor":"s","batch_ts_ms":0,"send_ts_us":0}`, `json: the batch has no "events"`},
		{strings.Replace(good, `"tags":[[]]`, `"tag":[[]]`, 1), `json: the batch has no events.tags`},
		{strings.Replace(good, `"seq":[0]`, `"seq":[0,1]`, 1), "json: the events arrays have different lengths"},
		{strings.Replace(good, `"seq":[0]`, `"seq":[0,]`, 1), "events.seq: unexpected character ']'"},
		{strings.Replace(good, `"seq":[0]`, `"seq":[99999999999]`, 1), "events.seq: out of the range of an int"},
		{strings.Replace(good, `"seq":[0]`, `"seq":[65536]`, 1), "event seq 65536 is outside 0..65535"},
		{strings.Replace(good, `"seq":[0]`, `"seq":["0"]`, 1), "events.seq: not a number"},
		{strings.Replace(good, `"value":[1]`, `"value":[01]`, 1), "events.value: not a number"},
		{strings.Replace(good, `"value":[1]`, `"value":[9223372036854775808]`, 1), "events.value: integer out of range"},
		{strings.Replace(good, `"quality":[0.5]`, `"quality":[.5]`, 1), "events.quality: unexpected character '.'"},
		{strings.Replace(good, `"quality":[0.5]`, `"quality":[1e999]`, 1), "events.quality: number out of range"},
		{strings.Replace(good, `"tags":[[]]`, `"tags":[["a",]]`, 1), "events.tags: unexpected character ']'"},
		{strings.Replace(good, `"name":["n"]`, `"name":["n\x"]`, 1), "events.name: bad escape"},
		{strings.Replace(good, `"name":["n"]`, "\"name\":[\"n\x01\"]", 1), "events.name: control character in a string"},
		{strings.Replace(good, `"sensor":"s"`, `"sensor":"s`, 1), "json: expected ',' or '}' in an object"},
		{good + `x`, "json: data after the object"},
		{strings.Replace(good, `"batch_id":1`, `"batch_id":-1`, 1), "batch_id -1 is negative"},
		{strings.Replace(good, `"batch_ts_ms":0`, `"batch_ts_ms":4294967296000`, 1), "batch_ts_ms 4294967296000 is outside the range of DateTime"},
		{strings.Replace(good, `"batch_id":1`, `"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`,"batch_id":1`, 1), "nested too deeply"},
	} {
		res := run(t, tt.value, good)
		if !res[0].Failed || !strings.Contains(res[0].Err, tt.want) {
			t.Errorf("%s:\n\tgot %+v\n\twant an error containing %q", tt.value, res[0], tt.want)
		}
		if res[1].Failed || len(res[1].Rows) != 1 {
			t.Errorf("the good record after it: %+v", res[1])
		}
	}
}

// TestEveryTruncation: every proper prefix of a message is an error.
func TestEveryTruncation(t *testing.T) {
	tabletest.CheckTruncations(t, &module{}, tabletest.ReadCorpus(t, testdata+"json.bin")[3])
}

func TestAllocs(t *testing.T) {
	tabletest.CheckNoAllocs(t, &module{}, tabletest.ReadCorpus(t, testdata+"json.bin"))
}

// BenchmarkModule is the JSON module's whole per-batch path natively, on
// calls of 150 records by default, about 1 MiB.
func BenchmarkModule(b *testing.B) {
	tabletest.BenchModule(b, &module{}, testdata+"json.bin", 150)
}
