// Package e2e holds sluice's whole-binary suites: the fault suite
// (TestFaults), the randomized fault injector (TestChaos) and the isolation
// suite (TestIsolationSuite). Each builds cmd/sluice once, runs it as a
// child process against the real Kafka broker and ClickHouse servers of
// internal/testinfra, and judges it only by what it leaves behind: rows in
// ClickHouse, committed offsets and dead letters in Kafka, its logs, exit
// codes and peak RSS. Nothing here calls sluice's own code, but for one
// hermetic check that the configs the suites write are ones sluice's
// parser accepts.
//
// The suites share one environment (env: the servers and the binary), one
// process supervisor (sluiceProc: start, kill -9, SIGTERM, freeze, logs,
// peak RSS) and one config builder (sluiceConfig, marshalled to YAML).
// Under go test -short they skip; the tasks faults, chaos and isolation
// of Taskfile.yml run their full profiles.
package e2e
