package clickhouse

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func TestParseDistributed(t *testing.T) {
	for _, tc := range []struct {
		engine string
		want   distributedEngine
		err    string
	}{
		{"Distributed(two, default, loc, cityHash64(s))", distributedEngine{"two", "default", "loc", "cityHash64(s)"}, ""},
		{`Distributed('two', 'default', 'loc', id)`, distributedEngine{"two", "default", "loc", "id"}, ""},
		{"Distributed(two, currentDatabase(), loc, rand())", distributedEngine{"two", "own", "loc", "rand()"}, ""},
		{"Distributed(two, default, loc)", distributedEngine{"two", "default", "loc", ""}, ""},
		{`Distributed(two, default, 'it\'s\tx')`, distributedEngine{"two", "default", "it's\tx", ""}, ""},
		{"Distributed(`c-1`, db, `t,x`, intHash64(a, b), 'policy') SETTINGS fsync_after_insert = 1",
			distributedEngine{"c-1", "db", "t,x", "intHash64(a, b)"}, ""},
		{"MergeTree ORDER BY id", distributedEngine{}, "not Distributed"},
		{"Distributed(two, default)", distributedEngine{}, "want Distributed"},
		{"Distributed(two, default, loc", distributedEngine{}, "unbalanced"},
		{"Distributed(two, concat('a','b'), loc)", distributedEngine{}, "not a name"},
	} {
		got, err := parseDistributed(tc.engine, "own")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.engine, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.engine, got, err, tc.want)
		}
	}
}

var routeCols = []Column{
	{Name: "tags", Type: "Array(String)"},
	{Name: "s", Type: "String"},
	{Name: "u8", Type: "UInt8"},
	{Name: "i64", Type: "Int64"},
	{Name: "fs", Type: "FixedString(3)"},
	{Name: "d", Type: "Date"},
	{Name: "n", Type: "Nullable(UInt32)"},
	{Name: "f", Type: "Float64"},
}

func routeRow(tags []string, s string, u8 uint8, i64 int64) []byte {
	b := binary.AppendUvarint(nil, uint64(len(tags)))
	for _, t := range tags {
		b = append(b, uvarintStr(t)...)
	}
	b = append(b, uvarintStr(s)...)
	b = append(b, u8)
	b = binary.LittleEndian.AppendUint64(b, uint64(i64))
	b = append(b, "abc"...)
	b = binary.LittleEndian.AppendUint16(b, 20000)
	b = append(b, 1)
	return binary.LittleEndian.AppendUint64(b, 0)
}

func TestNewRouteRejects(t *testing.T) {
	for key, want := range map[string]string{
		"":                    "no sharding key",
		"cityHash64(n)":       "column type Nullable(UInt32)",
		"cityHash64(f)":       "column type Float64",
		"s":                   "must be an integer",
		"d":                   "must be an integer",
		"absent":              "not an insertable column",
		"cityHash64(s, u8)":   "not a single column",
		"intHash64(u8)":       "not a single column",
		"sipHash64(s) % 7":    "not a single column",
		"cityHash64(tags)":    "column type Array(String)",
		"toUInt64(i64) + u8 ": "not a single column",
	} {
		_, err := newRoute("db.t", routeCols, key, []int{1, 2})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("key %q: err = %v, want %q", key, err, want)
		}
	}
	if _, err := newRoute("db.t", routeCols, "rand()", []int{0, 0}); err == nil {
		t.Error("weights summing to 0 accepted")
	}
	r, err := newRoute("db.t", routeCols, "", []int{5})
	if err != nil || r.kind != keyNone {
		t.Errorf("no key with one shard: %v", err)
	}
}

func TestRouteKeyValue(t *testing.T) {
	row := routeRow([]string{"x", "yy"}, "hello", 200, -5)
	for _, tc := range []struct {
		key  string
		want uint64
	}{
		{"u8", 200},
		{"i64", uint64(0xFFFFFFFFFFFFFFFB)}, // -5 as UInt64
		{"cityHash64(s)", cityHash64String([]byte("hello"))},
		{"cityHash64(`s`)", cityHash64String([]byte("hello"))},
		{"cityHash64(fs)", cityHash64String([]byte("abc"))},
		{"cityHash64(u8)", cityHash64Int(200)},
		{"cityHash64(i64)", cityHash64Int(uint64(0xFFFFFFFFFFFFFFFB))},
		{"cityHash64(d)", cityHash64Int(20000)},
	} {
		r, err := newRoute("db.t", routeCols, tc.key, []int{1, 2})
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		got, err := r.keyValue(row, new(uint64))
		if err != nil || got != tc.want {
			t.Errorf("%s: got %d, %v; want %d", tc.key, got, err, tc.want)
		}
	}
	// The variable-width columns before the key are walked, not assumed.
	r, _ := newRoute("db.t", routeCols, "u8", []int{1})
	if r.fixedOffset != -1 {
		t.Errorf("fixedOffset = %d after an Array and a String", r.fixedOffset)
	}
	r, _ = newRoute("db.t", routeCols[2:], "i64", []int{1})
	if r.fixedOffset != 1 {
		t.Errorf("fixedOffset = %d after a UInt8, want 1", r.fixedOffset)
	}
}

func TestRouteSlotsFollowWeights(t *testing.T) {
	cols := []Column{{Name: "k", Type: "UInt32"}}
	r, err := newRoute("db.t", cols, "k", []int{1, 2, 0, 3})
	if err != nil {
		t.Fatal(err)
	}
	// slots: shard 0 ×1, shard 1 ×2, shard 2 ×0, shard 3 ×3.
	want := []int{0, 1, 1, 3, 3, 3, 0, 1}
	for k, w := range want {
		got, err := r.partOf(binary.LittleEndian.AppendUint32(nil, uint32(k)), nil)
		if err != nil || got != w {
			t.Errorf("key %d: shard %d, %v; want %d", k, got, err, w)
		}
	}
	// A signed key is taken as its unsigned bit pattern of the same width:
	// Int8 -1 is 255 and 255 % 7 = 3 (sign-extended to 64 bits it would
	// give 1).
	r8, _ := newRoute("db.t", []Column{{Name: "k", Type: "Int8"}}, "k", []int{1, 1, 1, 1, 1, 1, 1})
	if got, _ := r8.partOf([]byte{0xff}, nil); got != 3 {
		t.Errorf("Int8 -1: shard %d, want 3", got)
	}
}

func TestRoutedBlockTruncateAndErrors(t *testing.T) {
	tbl, err := NewTable("db", "t", routeCols)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRoute(tbl.FullName(), tbl.Insert, "u8", []int{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	tbl.route, tbl.shards = r, make([]*shard, 3)
	b := tbl.NewBlock()
	for i := range 9 {
		if err := b.AppendRow(routeRow(nil, "s", uint8(i), int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.partRows(); got[0] != 3 || got[1] != 3 || got[2] != 3 {
		t.Fatalf("parts %v, want 3 each", got)
	}
	size := b.Size()
	// A row whose key cannot be found, or whose later column is bad, leaves
	// the block as it was.
	for name, bad := range map[string][]byte{
		"cut before the key": routeRow([]string{"a"}, "s", 1, 1)[:4],
		"cut after the key":  routeRow(nil, "s", 1, 1)[:5],
	} {
		var re *RowError
		if err := b.AppendRow(bad); !errors.As(err, &re) {
			t.Errorf("%s: err = %v, want RowError", name, err)
		}
		if b.Rows() != 9 || b.Size() != size {
			t.Errorf("%s: block changed", name)
		}
	}
	// Truncate removes the last rows appended, whichever part they are in.
	b.Truncate(4) // keeps keys 0..3: parts get 0,3 | 1 | 2
	if got := b.partRows(); b.Rows() != 4 || got[0] != 2 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("after Truncate(4): rows %d parts %v", b.Rows(), got)
	}
	if err := b.AppendRow(routeRow(nil, "s", 5, 5)); err != nil {
		t.Fatal(err)
	}
	if got := b.partRows(); got[2] != 2 {
		t.Errorf("append after truncate: parts %v", got)
	}
	b.Reset()
	if b.Rows() != 0 || b.Size() != 0 {
		t.Errorf("after Reset: rows %d size %d", b.Rows(), b.Size())
	}
}

func TestRandKeySpreadsByWeight(t *testing.T) {
	r, err := newRoute("db.t", routeCols, "rand()", []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(42)
	var n [2]int
	for range 30000 {
		p, _ := r.partOf(nil, &seed)
		n[p]++
	}
	if n[0] < 9000 || n[0] > 11000 {
		t.Errorf("rand() with weights 1:2 put %d of 30000 rows on shard 1", n[0])
	}
}

func FuzzRoutedAppendRow(f *testing.F) {
	f.Add(routeRow([]string{"t"}, "s", 3, -1))
	f.Add([]byte{})
	tbl, err := NewTable("db", "t", routeCols)
	if err != nil {
		f.Fatal(err)
	}
	r, err := newRoute(tbl.FullName(), tbl.Insert, "cityHash64(s)", []int{1, 2})
	if err != nil {
		f.Fatal(err)
	}
	tbl.route, tbl.shards = r, make([]*shard, 2)
	f.Fuzz(func(t *testing.T, data []byte) {
		b := tbl.NewBlock()
		if err := b.AppendRow(data); err != nil {
			if b.Rows() != 0 || b.Size() != 0 {
				t.Fatalf("failed row left data behind")
			}
			return
		}
		if b.Rows() != 1 {
			t.Fatalf("rows %d", b.Rows())
		}
	})
}

func FuzzParseDistributed(f *testing.F) {
	f.Add("Distributed(two, default, loc, cityHash64(s))")
	f.Add("Distributed('c', currentDatabase(), `t`, rand(), 'p') SETTINGS x = 1")
	f.Add("Distributed(")
	f.Fuzz(func(t *testing.T, engine string) {
		d, err := parseDistributed(engine, "db")
		if err != nil {
			return
		}
		if d.Cluster == "" || d.Database == "" || d.Table == "" {
			t.Fatalf("accepted %q with an empty name: %+v", engine, d)
		}
		// Whatever key it yields, newRoute must refuse it or route with it.
		if r, err := newRoute("db.t", routeCols, d.ShardingKey, []int{1, 2}); err == nil {
			if _, err := r.partOf(routeRow(nil, "s", 1, 1), new(uint64)); err != nil {
				t.Fatalf("key %q: %v", d.ShardingKey, err)
			}
		}
	})
}

// BenchmarkAppendRow decodes RowBinary rows into a block, plain and routed
// by cityHash64 of a String after variable-width columns; neither may
// allocate per row once the block's buffers have grown.
func BenchmarkAppendRow(b *testing.B) {
	rows := make([][]byte, 1024)
	total := 0
	for i := range rows {
		rows[i] = routeRow([]string{"a", "bb"}, strings.Repeat("k", i%40), uint8(i), int64(i))
		total += len(rows[i])
	}
	for _, key := range []string{"", "cityHash64(s)", "i64", "rand()"} {
		name := key
		if name == "" {
			name = "unrouted"
		}
		b.Run(name, func(b *testing.B) {
			tbl, err := NewTable("db", "t", routeCols)
			if err != nil {
				b.Fatal(err)
			}
			if key != "" {
				r, err := newRoute(tbl.FullName(), tbl.Insert, key, []int{1, 2})
				if err != nil {
					b.Fatal(err)
				}
				tbl.route, tbl.shards = r, make([]*shard, 2)
			}
			blk := tbl.NewBlock()
			b.SetBytes(int64(total / len(rows)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%len(rows) == 0 && blk.Rows() >= 64*len(rows) {
					blk.Reset()
				}
				if err := blk.AppendRow(rows[i%len(rows)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
