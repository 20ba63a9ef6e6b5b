package chtype

import "testing"

func BenchmarkSkip(b *testing.B) {
	typ, err := Parse("Tuple(String, Nullable(UInt64), Array(LowCardinality(String)), Enum8('a' = 1, 'b' = 2))")
	if err != nil {
		b.Fatal(err)
	}
	row := []byte("\x05hello\x00\x07\x00\x00\x00\x00\x00\x00\x00\x02\x01x\x02yz\x02")
	b.SetBytes(int64(len(row)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := typ.Skip(row); err != nil {
			b.Fatal(err)
		}
	}
}
