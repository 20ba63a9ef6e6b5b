// Package tenancy owns multi-tenant module management: tenant tokens, the
// on-disk module store (content-addressed blobs and an atomically replaced
// manifest) and the admin HTTP API that uploads, lists, activates, rolls
// back and deletes module versions. The engine supplies the validation and
// the hot swap through the Validator and Activator interfaces.
//
// Concurrency: Auth and Store are safe for concurrent use; a Store owns its
// directory (one process at a time). The handler from NewServer serializes
// changes per (tenant, pipeline) and starts no goroutines.
package tenancy
