// Package chtype is sluice's one model of the ClickHouse column types that
// module output carries in RowBinary (guest-sdk/ABI.md): Parse reads a type
// as system.columns spells it into a Type, and a Type checks and skips
// RowBinary values; package chvalue decodes them into Go values. A parsed
// Type is immutable and safe for concurrent use.
//
// The Go SDK, a module of its own that must not import the host, keeps a
// generated copy of the files gensdk lists in guest-sdk/go/internal/chtype
// (go generate ./internal/chtype; gensdk's test fails when it is stale).
package chtype
