// Package configdoc writes docs/config.md, the reference of every config key,
// from the config structs: reflection on engine.Config gives the keys and
// their YAML types, go/parser the fields' doc comments, which must exist.
//
// Concurrency: it holds no state; its functions may run concurrently.
package configdoc

//go:generate go run ./cmd/configdoc
