//go:build unix

package wasmhost

import (
	"context"
	"testing"
)

// TestMappedMemoryBytes: the count of mapped linear memory follows each
// instance's memory as it is made, grows, traps at its limit and closes,
// and a closed runtime gives its instances' memory back.
func TestMappedMemoryBytes(t *testing.T) {
	base := MappedMemoryBytes()
	wantMapped := func(what string, want int64) {
		t.Helper()
		if got := MappedMemoryBytes() - base; got != want {
			t.Errorf("%s: MappedMemoryBytes is %d over the start, want %d", what, got, want)
		}
	}
	r := newTestRuntime(t, Config{})
	m := load(t, r, "examples/adversarial/memory-bomb", Limits{MemoryBytes: 64 << 20})
	a := instantiate(t, m, advInit)
	b := instantiate(t, m, advInit)
	sizeA, sizeB := int64(a.mem.Size()), int64(b.mem.Size())
	if sizeA == 0 {
		t.Fatal("an instance with no memory")
	}
	wantMapped("two instances", sizeA+sizeB)

	if _, err := a.Transform(context.Background(), values("bomb")); err == nil {
		t.Fatal("the memory bomb did not trap")
	}
	grown := int64(a.mem.Size())
	if grown < 32<<20 {
		t.Fatalf("the bomb's memory is %d bytes, want it near its 64 MiB limit", grown)
	}
	wantMapped("one instance at its limit", grown+sizeB)

	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantMapped("the trapped instance closed", sizeB)

	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantMapped("the runtime closed", 0)
}
