//go:build unix && !linux

package wasmhost

const mapNoReserve = 0
