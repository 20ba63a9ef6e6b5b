//go:build unix

package wasmhost

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// TestMappedMemoryBytes: the count of mapped linear memory follows each
// instance's memory as it is made, grows, traps at its limit and closes,
// and a closed runtime gives its instances' memory back. The count is the
// process's, so these tests (like every test of this package) do not run
// in parallel.
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

// TestMappedMemoryBytesFailedStart: an instance whose start function traps
// gives its memory back, at load and at instantiation, and a module's
// instance of 3 pages counts 3 pages while it is open.
func TestMappedMemoryBytesFailedStart(t *testing.T) {
	base := MappedMemoryBytes()
	r := newTestRuntime(t, Config{})
	ret := []byte{0x42, 0x00, 0x0B} // i64.const 0: no output
	trapping := wasmtest.Module{Version: 1, MemoryPages: 3, Transform: ret,
		Extra: []wasmtest.Func{{Type: wasmtest.TypeVoid, Body: []byte{0x00, 0x0B}}}, Start: 1}.Build() // unreachable
	if _, err := r.Load(context.Background(), "trapping-start", trapping); err == nil {
		t.Fatal("a module whose start function traps loaded")
	}
	if got := MappedMemoryBytes() - base; got != 0 {
		t.Errorf("after the failed load: %d bytes over the start, want 0", got)
	}
	m := loadBytes(t, r, "plain", wasmtest.Module{Version: 1, MemoryPages: 3, Transform: ret}.Build(), Limits{})
	in := instantiate(t, m, advInit)
	if got := MappedMemoryBytes() - base; got != 3*wasmPage {
		t.Errorf("one open instance of 3 pages: %d bytes over the start, want %d", got, 3*wasmPage)
	}
	if err := in.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := MappedMemoryBytes() - base; got != 0 {
		t.Errorf("after Close: %d bytes over the start, want 0", got)
	}
}
