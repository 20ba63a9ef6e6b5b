// Package records reads the sample records that `sluice module test` and
// an activation's dry run feed a module: one JSON line a record. It keeps
// no state; its functions are safe for concurrent use.
package records
