package wasmhost

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

func shaHex(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// PruneCache removes the compiled code of the modules not kept, and only
// theirs.
func TestPruneCache(t *testing.T) {
	dir := t.TempDir()
	a := wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}.Build()
	b := wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x01, 0x0B}}.Build()
	r := newTestRuntime(t, Config{CacheDir: dir})
	loadBytes(t, r, "a", a, Limits{})
	onlyA, err := cacheFiles(dir)
	if err != nil || len(onlyA) == 0 {
		t.Fatalf("cache after compiling a: %v, %v", onlyA, err)
	}
	loadBytes(t, r, "b", b, Limits{})
	both, _ := cacheFiles(dir)
	if len(both) <= len(onlyA) {
		t.Fatalf("compiling b added no file to the cache: %v", both)
	}
	removed, err := PruneCache(dir, func(sha string) bool { return sha == shaHex(a) })
	if err != nil || removed != len(both)-len(onlyA) {
		t.Fatalf("PruneCache removed %d files (%v), want b's %d", removed, err, len(both)-len(onlyA))
	}
	left, _ := cacheFiles(dir)
	if len(left) != len(onlyA) {
		t.Fatalf("after pruning b the cache holds %v, want a's %v", left, onlyA)
	}
	for f := range onlyA {
		if !left[f] {
			t.Errorf("a's file %s was removed", f)
		}
	}
	// b compiles again, and a pruning that keeps everything removes nothing.
	loadBytes(t, newTestRuntime(t, Config{CacheDir: dir}), "b", b, Limits{})
	if again, _ := cacheFiles(dir); len(again) != len(both) {
		t.Errorf("after loading b again the cache holds %d files, want %d", len(again), len(both))
	}
	if n, err := PruneCache(dir, func(string) bool { return true }); n != 0 || err != nil {
		t.Errorf("PruneCache keeping everything: %d, %v", n, err)
	}
}

// Loaded answers while a Load holds the runtime's lock: PruneCache calls
// it (as its keep) holding the cache directory's lock, which a Load takes
// while holding the runtime's, so a Loaded that took the runtime's lock
// could deadlock a prune against a compile.
func TestLoadedDoesNotWaitForALoad(t *testing.T) {
	dir := t.TempDir()
	a := wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}.Build()
	r := newTestRuntime(t, Config{CacheDir: dir})
	loadBytes(t, r, "a", a, Limits{})
	r.mu.Lock() // as a Load of another module does while it compiles
	done := make(chan bool, 1)
	go func() {
		_, _ = PruneCache(dir, r.Loaded)
		done <- r.Loaded(shaHex(a))
	}()
	select {
	case loaded := <-done:
		r.mu.Unlock()
		if !loaded {
			t.Error("Loaded: false for a loaded module")
		}
	case <-time.After(time.Minute):
		r.mu.Unlock()
		t.Fatal("PruneCache with Loaded as its keep waited for the runtime's lock")
	}
	if files, _ := cacheFiles(dir); len(files) == 0 {
		t.Error("pruning with Loaded removed the loaded module's code")
	}
}
