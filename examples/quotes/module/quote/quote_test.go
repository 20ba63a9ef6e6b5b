package quote

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in          string
		symbol, say string
		bid, ask    int64
		ts          int64
	}{
		{`{"symbol":"ACME","bid":101.25,"ask":101.27,"ts":1772443800000,"say":"firm"}`, "ACME", "firm", 1012500, 1012700, 1772443800000},
		{` { "ts" : 5 , "ask" : 2 , "bid" : 1.5 , "symbol" : "X" } `, "X", "", 15000, 20000, 5},
		{`{"symbol":"A\u00e9\"B","bid":0.0001,"ask":0.0001,"ts":0,"say":"l\u00e0st \ud83d\ude00 look\n"}`, "Aé\"B", "làst 😀 look\n", 1, 1, 0},
		{`{"symbol":"LONE","bid":1,"ask":1,"ts":1,"say":"\ud800x"}`, "LONE", "\uFFFDx", 10000, 10000, 1},
		{`{"symbol":"Z","bid":7.10000,"ask":9999999999999.9999,"ts":1,"venue":{"id":[1,2.5e3,"x",true,null,{}]},"n":-0.5}`, "Z", "", 71000, 99999999999999999, 1},
		{`{"\u0073ymbol":"ESC","bid":1,"ask":1,"ts":1}`, "ESC", "", 10000, 10000, 1},
	} {
		var q Quote
		if err := Parse([]byte(tc.in), &q); err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if string(q.Symbol) != tc.symbol || string(q.Say) != tc.say || q.Bid != tc.bid || q.Ask != tc.ask || q.TS != tc.ts {
			t.Errorf("%s: got %q %q bid %d ask %d ts %d", tc.in, q.Symbol, q.Say, q.Bid, q.Ask, q.TS)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	syntax := new(*SyntaxError)
	for _, tc := range []struct {
		in, want string
		isSyntax bool
	}{
		{``, "a quote is a JSON object", false},
		{`[1]`, "a quote is a JSON object", false},
		{`{"symbol":"A","bid":1,"ask":1}`, `no "ts"`, false},
		{`{"bid":1,"ask":1,"ts":1}`, `no "symbol"`, false},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1,"symbol":"B"}`, `key "symbol" given twice`, false},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1,"say":"","say":""}`, `key "say" given twice`, false},
		{`{"symbol":"","bid":1,"ask":1,"ts":1}`, "empty symbol", false},
		{`{"symbol":"` + strings.Repeat("S", 33) + `","bid":1,"ask":1,"ts":1}`, "symbol of 33 bytes", false},
		{`{"symbol":7,"bid":1,"ask":1,"ts":1}`, "symbol: want a string", false},
		{`{"symbol":"A","bid":"1","ask":1,"ts":1}`, "bid: want a number", false},
		{`{"symbol":"A","bid":-1,"ask":1,"ts":1}`, "bid -1: a price must be positive", false},
		{`{"symbol":"A","bid":0,"ask":1,"ts":1}`, "bid 0: a price must be positive", false},
		{`{"symbol":"A","bid":1e2,"ask":1,"ts":1}`, "without an exponent", false},
		{`{"symbol":"A","bid":1.00001,"ask":2,"ts":1}`, "bid 1.00001: more than 4 decimals", false},
		{`{"symbol":"A","bid":1,"ask":10000000000000,"ts":1}`, "ask 10000000000000: too large", false},
		{`{"symbol":"A","bid":2,"ask":1.9999,"ts":1}`, "crossed quote: ask 1.9999 is below bid 2.0000", false},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1.5}`, "ts 1.5: want whole milliseconds", false},
		{`{"symbol":"A","bid":1,"ask":1,"ts":5662310400000}`, "after 2149-06-06", false},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1,"x":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, "nested more than 64 deep", false},
		{`{"symbol":"A","bid":1 2,"ask":1,"ts":1}`, "want ',' or '}'", true},
		{`{"symbol":"A","bid":1.,"ask":1,"ts":1}`, "want a digit after '.'", true},
		{"{\"symbol\":\"A\x01\",\"bid\":1,\"ask\":1,\"ts\":1}", "control character", true},
		{`{"symbol":"A\q","bid":1,"ask":1,"ts":1}`, "unknown escape", true},
		{`{"symbol":"A\u12","bid":1,"ask":1,"ts":1}`, `bad hex digit`, true},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1}x`, "trailing data", true},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1,"x":tru}`, "want a value", true},
		{`{"symbol":"A","bid":1,"ask":1,"ts":1,}`, "want a string", true},
		{`{"symbol":"A" "bid":1}`, "want ',' or '}'", true},
		{`{"symbol":"A`, "unterminated string", true},
	} {
		var q Quote
		err := Parse([]byte(tc.in), &q)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.in, err, tc.want)
			continue
		}
		if errors.As(err, syntax) != tc.isSyntax {
			t.Errorf("%s: %v: is a SyntaxError: %v, want %v", tc.in, err, !tc.isSyntax, tc.isSyntax)
		}
		if tc.isSyntax && json.Valid([]byte(tc.in)) {
			t.Errorf("%s: the test case disagrees with encoding/json on validity", tc.in)
		}
	}
}

func TestDerived(t *testing.T) {
	q := Quote{Bid: 1012500, Ask: 1012701, TS: 2*msPerDay + 5}
	if q.MidE5() != 10126005 || q.Spread() != 201 || q.Day() != 2 {
		t.Errorf("mid %d, spread %d, day %d", q.MidE5(), q.Spread(), q.Day())
	}
	for v, want := range map[int64]string{1: "0.0001", 1012500: "101.2500", 99999: "9.9999", 0: "0.0000", -15: "-0.0015"} {
		if got := FormatPrice(v); got != want {
			t.Errorf("FormatPrice(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestParseAllocatesNothing(t *testing.T) {
	in := []byte(`{"symbol":"A\u00e9","bid":101.25,"ask":101.27,"ts":1772443800000,"say":"esc\"aped","extra":[1,{"k":"v"}]}`)
	var q Quote
	if err := Parse(in, &q); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = Parse(in, &q) }); n != 0 {
		t.Errorf("Parse allocates %v times per quote", n)
	}
}

// FuzzParse checks Parse against encoding/json: what Parse accepts is
// valid JSON with the same symbol, say, prices and ts; what it calls a
// SyntaxError is not valid JSON.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"symbol":"ACME","bid":101.25,"ask":101.27,"ts":1772443800000,"say":"firm"}`,
		`{"symbol":"A\u00e9\"B","bid":0.0001,"ask":0.0001,"ts":0,"say":"\ud83d\ude00\ud800"}`,
		`{"ts":5,"ask":2,"bid":1.5,"symbol":"X","o":{"a":[1,-2.5e-3,"\n",false,null]}}`,
		`{"symbol":"A","bid":01,"ask":1,"ts":1}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var q Quote
		err := Parse(b, &q)
		if errors.As(err, new(*SyntaxError)) && json.Valid(b) {
			t.Fatalf("Parse calls valid JSON malformed: %v", err)
		}
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if jerr := json.Unmarshal(b, &m); jerr != nil {
			t.Fatalf("Parse accepted what encoding/json refuses (%v)", jerr)
		}
		str := func(key string) (string, bool) {
			var s string
			if err := json.Unmarshal(m[key], &s); err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			return s, utf8.Valid(m[key])
		}
		if s, ok := str("symbol"); ok && s != string(q.Symbol) {
			t.Errorf("symbol %q, encoding/json %q", q.Symbol, s)
		}
		if _, has := m["say"]; has {
			if s, ok := str("say"); ok && s != string(q.Say) {
				t.Errorf("say %q, encoding/json %q", q.Say, s)
			}
		}
		scale := new(big.Rat).SetInt64(10000)
		for key, got := range map[string]int64{"bid": q.Bid, "ask": q.Ask} {
			want, ok := new(big.Rat).SetString(string(m[key]))
			if !ok || want.Cmp(new(big.Rat).Quo(new(big.Rat).SetInt64(got), scale)) != 0 {
				t.Errorf("%s %d (10^-4), JSON %s", key, got, m[key])
			}
		}
		if string(m["ts"]) != big.NewInt(q.TS).String() {
			t.Errorf("ts %d, JSON %s", q.TS, m["ts"])
		}
		if q.Ask < q.Bid {
			t.Errorf("crossed quote accepted: bid %d, ask %d", q.Bid, q.Ask)
		}
	})
}
