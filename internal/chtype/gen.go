package chtype

// The SDK's copy is regenerated from this package's files; gensdk lists
// them.
//go:generate go run ./gensdk
