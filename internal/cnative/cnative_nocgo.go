//go:build !cgo

package cnative

// Module is a loaded native module; without cgo there is none.
type Module struct{}

// Load returns ErrNoCgo: this build cannot call C.
func Load(path string) (*Module, error) { return nil, ErrNoCgo }

// Init is never reached without cgo.
func (m *Module) Init(payload []byte) string { panic(ErrNoCgo) }

// Transform is never reached without cgo.
func (m *Module) Transform(payload []byte) []byte { panic(ErrNoCgo) }
