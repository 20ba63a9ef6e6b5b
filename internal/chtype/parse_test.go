package chtype

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string // kind chain, e.g. "Array Nullable String"
	}{
		{"UInt8", "UInt8"},
		{"Int64", "Int64"},
		{"Float32", "Float32"},
		{"String", "String"},
		{"LowCardinality(String)", "String"},
		{" LowCardinality( Nullable(String) ) ", "Nullable String"},
		{"FixedString(16)", "FixedString"},
		{"Date", "Date"},
		{"DateTime", "DateTime"},
		{"DateTime('Europe/Berlin')", "DateTime"},
		{"Bool", "Bool"},
		{"UUID", "UUID"},
		{"IPv4", "IPv4"},
		{"IPv6", "IPv6"},
		{"Enum8('a' = 1, 'b' = -2)", "Enum8"},
		{"Enum16('x, y' = 1000, 'it\\'s' = 2)", "Enum16"},
		{"Array(Array(UInt32))", "Array Array UInt32"},
		{"Array(LowCardinality(String))", "Array String"},
		{"DateTime64(3)", "DateTime64"},
		{"DateTime64(9, 'Asia/Tokyo')", "DateTime64"},
		{"Date32", "Date32"},
		{"Decimal(10, 2)", "Decimal64"},
		{"Decimal(76, 20)", "Decimal256"},
		{"Decimal32(2)", "Decimal32"},
		{"Decimal128(10)", "Decimal128"},
		{"Int128", "Int128"},
		{"UInt256", "UInt256"},
		{"JSON", "String"},
		{"JSON(max_dynamic_paths = 8, a.b UInt32, SKIP `c)`)", "String"},
		{"Boolean", "Bool"},
		{"Tuple(`a b` UInt8)", "Tuple"},
		{"Map(String, Array(Nullable(Int32)))", "Map Array Nullable Int32"},
		{"Tuple(String, UInt8)", "Tuple"},
		{"Tuple(a Int64, b Nullable(String))", "Tuple"},
	}
	for _, tt := range tests {
		typ, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		var kinds []string
		for x := typ; x != nil; x = x.Elem {
			kinds = append(kinds, x.Kind.String())
		}
		if got := strings.Join(kinds, " "); got != tt.want {
			t.Errorf("Parse(%q) = %s, want %s", tt.in, got, tt.want)
		}
		if typ.Text != strings.TrimSpace(tt.in) {
			t.Errorf("Parse(%q).Text = %q", tt.in, typ.Text)
		}
	}
}

func TestParseDetails(t *testing.T) {
	for _, tt := range []struct {
		in                 string
		bare, tz           string
		lowCardinality, js bool
		width              int
	}{
		{"LowCardinality(FixedString(2))", "FixedString(2)", "", true, false, 2},
		{"LowCardinality( Nullable(String) )", "Nullable(String)", "", true, false, 0},
		{"DateTime('Europe/Berlin')", "DateTime('Europe/Berlin')", "Europe/Berlin", false, false, 4},
		{"DateTime64(6, 'Asia/Tokyo')", "DateTime64(6, 'Asia/Tokyo')", "Asia/Tokyo", false, false, 8},
		{"DateTime64(3)", "DateTime64(3)", "", false, false, 8},
		{"JSON", "JSON", "", false, true, 0},
		{"Decimal(38, 2)", "Decimal(38, 2)", "", false, false, 16},
		{"Decimal256(2)", "Decimal256(2)", "", false, false, 32},
		{"UInt256", "UInt256", "", false, false, 32},
		{"IPv6", "IPv6", "", false, false, 16},
		{"Enum16('a' = 1)", "Enum16('a' = 1)", "", false, false, 2},
		{"Array(UInt8)", "Array(UInt8)", "", false, false, 0},
	} {
		typ, err := Parse(tt.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if typ.Bare != tt.bare || typ.TZ != tt.tz || typ.LowCardinality != tt.lowCardinality || typ.JSON != tt.js || typ.Width() != tt.width {
			t.Errorf("Parse(%q) = bare %q tz %q lc %v json %v width %d, want %+v",
				tt.in, typ.Bare, typ.TZ, typ.LowCardinality, typ.JSON, typ.Width(), tt)
		}
	}
	typ, err := Parse("Tuple(`a b` UInt8, c String)")
	if err != nil || strings.Join(typ.Names, ",") != "a b,c" {
		t.Errorf("tuple names: %+v, %v", typ, err)
	}
}

func TestParseEnum(t *testing.T) {
	typ, err := Parse("Enum16('x, y' = 1000, 'it\\'s' = -2)")
	if err != nil {
		t.Fatal(err)
	}
	if len(typ.Enum) != 2 || typ.Enum[0] != (EnumValue{"x, y", 1000}) || typ.Enum[1] != (EnumValue{"it's", -2}) {
		t.Fatalf("enum values %+v", typ.Enum)
	}
	if !typ.HasEnum(-2) || typ.HasEnum(3) || typ.HasEnum(1000-256) {
		t.Error("HasEnum")
	}
	e8, err := Parse(`Enum8('a''b' = -128, 'c\td' = 127)`)
	if err != nil {
		t.Fatal(err)
	}
	if e8.Enum[0].Name != "a'b" || e8.Enum[1].Name != "c\td" || !e8.HasEnum(-128) || !e8.HasEnum(127) || e8.HasEnum(0) || e8.HasEnum(128) {
		t.Errorf("Enum8 values %+v", e8.Enum)
	}
	if n, ok := typ.EnumName(1000); !ok || n != "x, y" {
		t.Errorf("EnumName(1000) = %q, %v", n, ok)
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"", "Decimal(0, 0)", "Decimal(10, 11)", "Decimal32(10)", "Tuple()", "Map(String)", "DateTime64(10)",
		"DateTime64()", "AggregateFunction(uniq, UInt64)", "Variant(String, UInt8)", "Tuple(a)",
		"Array(String", "Array()", "String)", "FixedString(0)", "FixedString(x)",
		"Enum8('a' = 200)", "Enum8('a' 1)", "Enum8('a = 1)", "Nullable(Foo)", "Enum8()", "JSON(a", "DateTime(UTC)",
		"Object('json')", "Nested(a UInt8)", "LowCardinality(String",
		strings.Repeat("Array(", 9) + "UInt8" + strings.Repeat(")", 9),
	} {
		if typ, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", in, typ)
		}
	}
}

func TestParseContainers(t *testing.T) {
	typ, err := Parse("Tuple(a Int64, b Nullable(String), Map(LowCardinality(String), UInt8))")
	if err != nil {
		t.Fatal(err)
	}
	if len(typ.Seq) != 3 || strings.Join(typ.Names, ",") != "a,b," || typ.Seq[0].Kind != Int64 ||
		typ.Seq[1].Kind != Nullable || typ.Seq[2].Kind != Map || typ.Seq[2].Key.Kind != String {
		t.Fatalf("tuple %+v", typ)
	}
	d, err := Parse("Decimal(18, 4)")
	if err != nil || d.Size != 18 || d.Scale != 4 {
		t.Fatalf("Decimal(18, 4) = %+v, %v", d, err)
	}
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"String":                       "String",
		"Enum8( 'a b' = 1,  'c' = 2 )": "Enum8('a b'=1,'c'=2)",
		"Enum8('it\\' s' = 1)":         "Enum8('it\\' s'=1)",
		"LowCardinality( String )":     "LowCardinality(String)",
	} {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"Array(Nullable(LowCardinality(String)))", "Enum8('a\\'' = -1, 'b' = 2)", "DateTime('UTC')", "FixedString(3)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		typ, err := Parse(s)
		if err != nil {
			return
		}
		depth := 0
		for x := typ; x != nil; x = x.Elem {
			if x.Kind == Invalid || (x.Kind == Array || x.Kind == Nullable || x.Kind == Map) != (x.Elem != nil) {
				t.Fatalf("Parse(%q): bad node %+v", s, x)
			}
			depth++
		}
		if depth > MaxDepth+1 {
			t.Fatalf("Parse(%q): depth %d", s, depth)
		}
	})
}
