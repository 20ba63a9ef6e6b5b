// Package testinfra starts and stops the real services sluice's integration
// and fault tests run against: a ClickHouse server, either Legacy (Debian's
// clickhouse-server 18.16) or Modern (ClickHouse 26.9 from PyPI's
// chdb-core: its clickhouse-local serving the native and HTTP interfaces,
// through chdb_serve.py), and a single-node KRaft Apache Kafka broker (the
// 4.1.1 jars fetched by scripts/deps.sh).
//
// ClickHouseOptions.Server picks the server; its default is $SLUICE_CLICKHOUSE
// or Legacy. EachClickHouse and EachServer run a subtest per server of
// Servers (the server matrix); ClickHouse.Version and Capabilities tell a
// test what the server it got can do.
//
// Every service runs as a child process on free 127.0.0.1 ports with its
// configuration, data and logs in a private temporary directory. Stop keeps
// that directory so that Start can bring the service back on the same ports
// with the same data (for fault tests); Close stops the service and removes
// the directory. Child processes get SIGKILL when the test process dies.
//
// ClickHouseT and KafkaT are the test helpers: they start a service, register
// Close with t.Cleanup and fail the test, with an install hint, when the
// software is missing. They never skip because of it: a missing service is
// a broken test machine, not a reason to test less. Install everything with
// `go tool -modfile=tools/go.mod task deps` or scripts/deps.sh. Under go test -short they skip
// (SkipShort), before looking for any software: -short runs only the
// hermetic tests, which need no server.
package testinfra
