// Package chvalue decodes RowBinary values of a chtype.Type into Go values,
// for the tools that show or test module output (sluice module test, the Go
// SDK's sluicetest), and gives their JSON form. The sink never decodes into
// values: it checks and copies bytes with chtype. The functions are safe for
// concurrent use.
package chvalue
