//go:build cgo

package cnative

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef const char *(*sluice_init_fn)(const uint8_t *, size_t, size_t *);
typedef const uint8_t *(*sluice_transform_fn)(const uint8_t *, size_t, size_t *);

static const char *call_init(void *f, const uint8_t *p, size_t n, size_t *len) {
	return ((sluice_init_fn)f)(p, n, len);
}

static const uint8_t *call_transform(void *f, const uint8_t *p, size_t n, size_t *len) {
	return ((sluice_transform_fn)f)(p, n, len);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Module is a loaded native module: the SDK's sluice_run_init and
// sluice_run_transform (guest-sdk/c/sluice.h).
type Module struct {
	init, transform unsafe.Pointer
}

// Load opens the shared library at path. Libraries are never closed: their
// code may hold state, and a test process loads a handful.
func Load(path string) (*Module, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("cnative: dlopen %s: %s", path, C.GoString(C.dlerror()))
	}
	m := &Module{}
	for _, s := range []struct {
		name string
		fn   *unsafe.Pointer
	}{{"sluice_run_init", &m.init}, {"sluice_run_transform", &m.transform}} {
		cname := C.CString(s.name)
		*s.fn = C.dlsym(h, cname)
		C.free(unsafe.Pointer(cname))
		if *s.fn == nil {
			return nil, fmt.Errorf("cnative: %s has no symbol %s: not built with guest-sdk/c", path, s.name)
		}
	}
	return m, nil
}

func data(p []byte) *C.uint8_t {
	if len(p) == 0 {
		return nil
	}
	return (*C.uint8_t)(unsafe.Pointer(&p[0]))
}

// Init runs the module's init on an init payload (as wasmhost encodes it)
// and returns its refusal, "" when it accepts.
func (m *Module) Init(payload []byte) string {
	var n C.size_t
	msg := C.call_init(m.init, data(payload), C.size_t(len(payload)), &n)
	if msg == nil || n == 0 {
		return ""
	}
	return C.GoStringN(msg, C.int(n))
}

// Transform runs the module on a batch payload, in one cgo call, and returns
// the output payload. The result is the library's memory, valid until the
// next call.
func (m *Module) Transform(payload []byte) []byte {
	var n C.size_t
	out := C.call_transform(m.transform, data(payload), C.size_t(len(payload)), &n)
	if out == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(out)), int(n))
}
