//go:build !sluice_faultinject

package wasmhost

// FaultInjection reports whether this binary was built with the
// sluice_faultinject tag (see faultinject.go): it was not, and every
// module is instrumented.
const FaultInjection = false

func loadUninstrumented([]byte) bool { return false }
