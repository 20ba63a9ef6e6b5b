package chtype

import (
	"strconv"
	"strings"
)

// Kind is the encoding of a value in RowBinary.
type Kind uint8

// The kinds. LowCardinality(T) has no kind of its own: it is encoded as T.
// JSON is carried as its text, a String.
const (
	Invalid Kind = iota
	UInt8
	UInt16
	UInt32
	UInt64
	Int8
	Int16
	Int32
	Int64
	Float32
	Float64
	String
	FixedString
	Date
	DateTime
	Bool
	UUID
	Enum8
	Enum16
	IPv4
	IPv6
	Nullable
	Array
	Int128
	UInt128
	Int256
	UInt256
	Date32
	DateTime64
	Decimal32
	Decimal64
	Decimal128
	Decimal256
	Map
	Tuple
	numKinds
)

// kindInfo is what a kind is called and, for a fixed-width kind but
// FixedString, its width in bytes.
var kindInfo = [numKinds]struct {
	name  string
	width int
}{
	Invalid: {"unsupported type", 0}, UInt8: {"UInt8", 1}, UInt16: {"UInt16", 2}, UInt32: {"UInt32", 4},
	UInt64: {"UInt64", 8}, Int8: {"Int8", 1}, Int16: {"Int16", 2}, Int32: {"Int32", 4}, Int64: {"Int64", 8},
	Float32: {"Float32", 4}, Float64: {"Float64", 8}, String: {"String", 0}, FixedString: {"FixedString", 0},
	Date: {"Date", 2}, DateTime: {"DateTime", 4}, Bool: {"Bool", 1}, UUID: {"UUID", 16},
	Enum8: {"Enum8", 1}, Enum16: {"Enum16", 2}, IPv4: {"IPv4", 4}, IPv6: {"IPv6", 16},
	Nullable: {"Nullable", 0}, Array: {"Array", 0},
	Int128: {"Int128", 16}, UInt128: {"UInt128", 16}, Int256: {"Int256", 32}, UInt256: {"UInt256", 32},
	Date32: {"Date32", 4}, DateTime64: {"DateTime64", 8},
	Decimal32: {"Decimal32", 4}, Decimal64: {"Decimal64", 8}, Decimal128: {"Decimal128", 16}, Decimal256: {"Decimal256", 32},
	Map: {"Map", 0}, Tuple: {"Tuple", 0},
}

func (k Kind) String() string {
	if k < numKinds {
		return kindInfo[k].name
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Signed reports whether an integer or Decimal kind is signed.
func (k Kind) Signed() bool {
	switch k {
	case Int8, Int16, Int32, Int64, Int128, Int256, Decimal32, Decimal64, Decimal128, Decimal256:
		return true
	}
	return false
}

// IsDecimal reports whether k is one of the Decimal kinds.
func (k Kind) IsDecimal() bool { return k >= Decimal32 && k <= Decimal256 }

// MaxDepth is the deepest nesting of Array, Map, Tuple and Nullable a type
// may have.
const MaxDepth = 8

// EnumValue is one declared value of an Enum8 or Enum16.
type EnumValue struct {
	Name  string
	Value int16
}

// Type is a parsed column type.
type Type struct {
	Kind Kind
	// Size is N of FixedString(N), the precision P of a Decimal (9, 18,
	// 38 or 76 for Decimal32(S) … Decimal256(S)) and the byte width of
	// Int128/UInt128 (16) and Int256/UInt256 (32).
	Size int
	// Scale is S of a Decimal and the precision of DateTime64 (0…9).
	Scale int
	// TZ is the time zone of DateTime('tz') and DateTime64(p, 'tz'); ""
	// when the type names none.
	TZ   string
	Elem *Type       // Nullable(T), Array(T): T; Map(K, V): V
	Key  *Type       // Map(K, V): K
	Enum []EnumValue // Enum8, Enum16: the declared values, in declaration order
	// Seq are the values a container holds, in the order they are
	// written, repeating: Array(T): [T]; Map(K, V): [K, V]; Tuple: its
	// elements. Names are a Tuple's element names ("" for none).
	Seq   []*Type
	Names []string
	// LowCardinality is set for LowCardinality(T), which is encoded as T;
	// JSON for a JSON type, a String holding the JSON text.
	LowCardinality bool
	JSON           bool
	Text           string // the type as written, e.g. "LowCardinality(String)"
	Bare           string // Text without a LowCardinality wrapper, e.g. "String"

	// enumBits has a bit set for every declared value of an enum, indexed
	// by the value's bits as unsigned, so that a check is one load.
	enumBits []uint64
	// least is the fewest bytes one repetition of Seq takes (each value its
	// width, or a byte), which bounds an Array or Map's count.
	least int
}

// Width is the size in bytes of a value of a fixed-width type in
// RowBinary, and 0 for String, JSON and the containers.
func (t *Type) Width() int {
	if t.Kind == FixedString {
		return t.Size
	}
	return kindInfo[t.Kind].width
}

// HasEnum reports whether v is a declared value of an enum type.
func (t *Type) HasEnum(v int16) bool {
	i := uint(uint16(v))
	if t.Kind == Enum8 {
		if v != int16(int8(v)) {
			return false
		}
		i = uint(uint8(v))
	}
	return i/64 < uint(len(t.enumBits)) && t.enumBits[i/64]&(1<<(i%64)) != 0
}

// EnumName returns the name of the enum value v.
func (t *Type) EnumName(v int16) (string, bool) {
	for i := range t.Enum {
		if t.Enum[i].Value == v {
			return t.Enum[i].Name, true
		}
	}
	return "", false
}

// Canonical returns s without the white space outside quoted names, so that
// "Enum8('a' = 1)" and "Enum8('a'=1)" compare equal.
func Canonical(s string) string {
	if !strings.ContainsAny(s, " \t\r\n") {
		return s
	}
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s):
			b.WriteByte(c)
			i++
			c = s[i]
		case c == '\'':
			quoted = !quoted
		case !quoted && (c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
