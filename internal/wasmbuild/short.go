package wasmbuild

import "testing"

// SkipShort skips tb under go test -short: a C, Rust or AssemblyScript
// module needs its toolchain (clang and wasi-libc, Debian's Rust for
// wasm32-wasi, node and asc), which the hermetic tier does not assume.
// Without -short it does nothing, and a missing toolchain fails the test
// with how to install it. BuildCT, BuildRustT and BuildAST call it; a test
// that uses a toolchain any other way calls it first.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("wasmbuild: builds a C, Rust or AssemblyScript module; -short runs only the tests that need no guest toolchain")
	}
}
