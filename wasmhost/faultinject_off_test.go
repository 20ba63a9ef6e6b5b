//go:build !sluice_faultinject

package wasmhost

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wasmhost/internal/wasmtest"
)

// withCustomSection appends a custom section named name to a module, with
// one byte of payload (wazero refuses a custom section with none).
func withCustomSection(wasm []byte, name string) []byte {
	body := append(wasmtest.Name(name), 1)
	return append(append([]byte(nil), wasm...), wasmtest.Section(0, body)...)
}

// TestFaultInjectSectionIgnored: in a binary built without the
// sluice_faultinject tag (every production binary), the custom section
// that the fault-injection build reads changes nothing: the module is
// instrumented and its loop stops at the deadline.
func TestFaultInjectSectionIgnored(t *testing.T) {
	if FaultInjection {
		t.Fatal("FaultInjection is true without the build tag")
	}
	r := newTestRuntime(t, Config{})
	m := loadBytes(t, r, "spin", withCustomSection(spinModule(), "sluice.faultinject.uninstrumented"), Limits{Deadline: 100 * time.Millisecond})
	if !m.instrumented {
		t.Fatal("the module was loaded without the instrumentation")
	}
	in := instantiate(t, m, InitConfig{})
	_, err := in.Transform(context.Background(), values("x"))
	if !errors.Is(err, ErrDeadline) {
		t.Fatalf("Transform: %v, want the deadline", err)
	}
}
