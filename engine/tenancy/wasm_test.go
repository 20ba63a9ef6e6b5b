package tenancy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/wasmhost"
)

// tinyModule assembles the smallest binary wasmhost loads: the four ABI
// exports (sluice_abi_version returning abi, the others returning 0) and a
// memory. importFrom, if set, adds an imported function "importFrom.f".
func tinyModule(abi byte, importFrom string) []byte {
	vec := func(items ...[]byte) []byte {
		out := []byte{byte(len(items))}
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	section := func(id byte, body []byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	const i32, i64 = 0x7F, 0x7E
	types := vec(
		[]byte{0x60, 0, 1, i32},           // () -> i32
		[]byte{0x60, 1, i32, 1, i32},      // (i32) -> i32
		[]byte{0x60, 2, i32, i32, 1, i64}, // (i32, i32) -> i64
	)
	var imports [][]byte
	if importFrom != "" {
		imports = append(imports, append(append(name(importFrom), name("f")...), 0x00, 0))
	}
	first := byte(len(imports)) // imported functions come first in the index space
	export := func(n string, kind, idx byte) []byte { return append(name(n), kind, idx) }
	code := func(body ...byte) []byte { return append([]byte{byte(len(body) + 1), 0}, body...) } // no locals
	b := []byte("\x00asm\x01\x00\x00\x00")
	b = append(b, section(1, types)...)
	if len(imports) > 0 {
		b = append(b, section(2, vec(imports...))...)
	}
	b = append(b, section(3, vec([]byte{0}, []byte{1}, []byte{2}, []byte{2}))...)
	b = append(b, section(5, vec([]byte{0x00, 1}))...) // one memory, one page
	b = append(b, section(7, vec(
		export("sluice_abi_version", 0, first), export("sluice_alloc", 0, first+1),
		export("sluice_init", 0, first+2), export("sluice_transform", 0, first+3),
		export("memory", 2, 0)))...)
	b = append(b, section(10, vec(
		code(0x41, abi, 0x0B),    // i32.const abi
		code(0x41, 0, 0x0B),      // i32.const 0
		code(0x42, 0, 0x0B),      // i64.const 0
		code(0x42, 0, 0x0B)))...) // i64.const 0
	return b
}

var quietHost = wasmhost.Config{Logger: slog.New(slog.DiscardHandler)}

func TestCheckWasm(t *testing.T) {
	ctx := context.Background()
	if err := CheckWasm(ctx, quietHost, tinyModule(byte(wasmhost.ABIVersion), "")); err != nil {
		t.Fatalf("a well-formed module: %v", err)
	}
	for _, tc := range []struct {
		name string
		wasm []byte
		want string
	}{
		{"not wasm", []byte("MZ\x90\x00 an executable"), "not a WebAssembly binary"},
		{"truncated", tinyModule(1, "")[:20], "unexpected end"},
		{"wrong ABI", tinyModule(7, ""), "built for guest ABI version 7; this host supports [1]"},
		{"forbidden import", tinyModule(1, "env"), "imports env.f: only wasi_snapshot_preview1 and sluice imports are allowed"},
	} {
		err := CheckWasm(ctx, quietHost, tc.wasm)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckWasm = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// wasmValidator is a Validator with the real upload check.
type wasmValidator struct{ fakeValidator }

func (wasmValidator) CheckUpload(ctx context.Context, _, _ string, wasm []byte) error {
	return CheckWasm(ctx, quietHost, wasm)
}

func TestAPIWithRealUploadCheck(t *testing.T) {
	api := newTestAPI(t, func(o *ServerOptions) { o.Validator = wasmValidator{} })
	for _, tc := range []struct {
		name   string
		wasm   []byte
		status int
		want   string
	}{
		{"not wasm", []byte("PK\x03\x04 a zip file"), http.StatusUnprocessableEntity, "not a WebAssembly binary (no \\0asm magic)"},
		{"wrong ABI", tinyModule(7, ""), http.StatusUnprocessableEntity, "built for guest ABI version 7; this host supports [1]"},
		{"good", tinyModule(1, ""), http.StatusCreated, ""},
	} {
		r := api.upload(acmeToken, "acme", "logs", tc.wasm)
		expectStatus(t, tc.name, r, tc.status)
		if !strings.Contains(r.errText(), tc.want) {
			t.Errorf("%s: error %q, want %q", tc.name, r.errText(), tc.want)
		}
	}
	st, _ := api.store.List("acme", "logs")
	if len(st.Versions) != 1 || st.Versions[0].SHA256 != shaOf(tinyModule(1, "")) {
		t.Fatalf("stored %+v, want only the good module", st.Versions)
	}
	blob, _ := api.store.Blob(st.Versions[0].SHA256)
	if !bytes.Equal(blob, tinyModule(1, "")) {
		t.Fatal("stored blob differs from the upload")
	}
}
