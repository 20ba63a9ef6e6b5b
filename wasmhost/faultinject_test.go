//go:build sluice_faultinject

package wasmhost

import (
	"testing"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// TestFaultInjectLoadsUninstrumented: the fault-injection build loads a
// module that carries the section without the instrumentation (its loop
// could not be interrupted, so it is not run here), and any other module
// with it.
func TestFaultInjectLoadsUninstrumented(t *testing.T) {
	r := newTestRuntime(t, Config{})
	plain := wasmtest.Module{Version: 1, Transform: []byte{0x42, 0x00, 0x0B}}.Build()
	marked := append(append([]byte(nil), plain...), wasmtest.Section(0, append(wasmtest.Name(faultInjectSection), 1))...)
	other := append(append([]byte(nil), plain...), wasmtest.Section(0, append(wasmtest.Name("name"), 1))...)
	for _, tc := range []struct {
		name         string
		wasm         []byte
		instrumented bool
	}{{"plain", plain, true}, {"marked", marked, false}, {"other section", other, true}} {
		if m := loadBytes(t, r, tc.name, tc.wasm, Limits{}); m.instrumented != tc.instrumented {
			t.Errorf("%s: instrumented = %v, want %v", tc.name, m.instrumented, tc.instrumented)
		}
	}
	if loadUninstrumented(marked[:len(marked)-4]) {
		t.Error("a cut section counts")
	}
}
