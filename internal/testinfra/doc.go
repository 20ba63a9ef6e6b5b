// Package testinfra starts and stops the real services sluice's integration
// and fault tests run against: a ClickHouse server (Debian's clickhouse-server)
// and a single-node KRaft Apache Kafka broker (the 4.1.1 jars fetched by
// scripts/deps.sh).
//
// Every service runs as a child process on free 127.0.0.1 ports with its
// configuration, data and logs in a private temporary directory. Stop keeps
// that directory so that Start can bring the service back on the same ports
// with the same data (for fault tests); Close stops the service and removes
// the directory. Child processes get SIGKILL when the test process dies.
//
// ClickHouseT and KafkaT are the test helpers: they start a service, register
// Close with t.Cleanup and fail the test, with an install hint, when the
// software is missing. They never skip: a missing service is a broken test
// machine, not a reason to test less. Install everything with
// `go tool task deps` or scripts/deps.sh.
package testinfra
