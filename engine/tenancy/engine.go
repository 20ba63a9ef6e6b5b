package tenancy

import (
	"context"
	"errors"
)

// Validator checks modules for the API before they are stored or activated.
// The engine implements it. Both methods report a refusal as an error whose
// text the API returns, with status 422, to the tenant: say why, plainly.
type Validator interface {
	// CheckUpload inspects an uploaded binary: that it is WebAssembly,
	// targets a supported ABI version and imports nothing forbidden
	// (CheckWasm does this much).
	CheckUpload(ctx context.Context, tenant, pipeline string, wasm []byte) error
	// CheckActivation checks that the module can run the pipeline: it
	// compiles, initializes with the pipeline's allowed tables and their
	// live schemas (a module refuses init if it wants a table it is not
	// given), and, when sample is not empty, transforms the sample records
	// (JSON lines, as sluice module test -input reads them) into rows the
	// tables accept.
	CheckActivation(ctx context.Context, tenant, pipeline string, wasm, sample []byte) error
}

// Activator swaps a validated module into the running engine. The engine
// implements it.
type Activator interface {
	// Activate makes v (whose binary is wasm) the pipeline's running
	// module. It is called after Validator.CheckActivation and before the
	// manifest records the change; if it fails, the manifest is left as it
	// was. An error wrapping ErrModuleRejected is the module's fault (the
	// API answers 422); any other the engine's (503).
	Activate(ctx context.Context, tenant, pipeline string, v Version, wasm []byte) error
}

// ErrModuleRejected marks an Activator error caused by the module rather
// than the engine (the engine could not load it for the pipeline): the API
// answers 422 with the error's text.
var ErrModuleRejected = errors.New("module rejected")
