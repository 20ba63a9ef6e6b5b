// Package wasmhost runs tenant normalization modules in a wazero sandbox
// and implements the host side of the sluice guest ABI (guest-sdk/ABI.md).
//
// A Runtime compiles each module once per sha256; an Instance belongs to one
// goroutine (a partition worker) and is not safe for concurrent use.
package wasmhost
